"""The link index on real documentation, published as it is (docs/SPEC.md §5.9): the Prometheus
docs (site-absolute links without ``.md``, trailing slashes, HTML anchors) and the FastAPI docs
(relative links, ``{ #id }`` headings). Every link that resolves by hand resolves here, the
broken ones are the real broken ones, and every document's backlinks are what a scan of all
bodies finds."""

from __future__ import annotations

import os
import re
from collections import Counter
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest
from support import shared_path

from markproto.protocol import linkkinds, links
from markproto.server.search.links import LinkIndex
from markproto.server.search.service import Lookup
from markproto.server.storage.store import Version

DAY = datetime(2026, 1, 1, tzinfo=UTC)
_INLINE = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^()\s]+)\)")
_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)


@cache
def published(name: str) -> tuple[Path, LinkIndex]:
    """A corpus published as it is: each file at ``/`` + its path in the folder."""
    root = shared_path("corpus", name)
    lookup = Lookup()
    for file in sorted(root.rglob("*.md")):
        path = "/" + file.relative_to(root).as_posix()
        lookup.put(Version(path, 1, "", DAY, False, {}, file.read_bytes(), "", ""))
    return root, lookup.links


def by_hand(root: Path, source: str, raw: str) -> str | None:
    """Where a path link leads, worked out with the file system the way a reader would: the
    file named, else that path with ``.md``, else its folder's ``index.md``."""
    location = raw.split("#", 1)[0].split("?", 1)[0]
    if not location:
        return source
    base = root / source.lstrip("/")
    named = root / location.lstrip("/") if location.startswith("/") else base.parent / location
    here = Path(os.path.normpath(named))
    for candidate in (here, here.with_name(here.name + ".md"), here / "index.md"):
        if candidate.is_file() and candidate.suffix == ".md":
            return "/" + candidate.relative_to(root).as_posix()
    return None


def hand_links(root: Path) -> list[tuple[str, str]]:
    """Every inline path link outside code fences, found with one regex: (source, target)."""
    out = []
    for file in sorted(root.rglob("*.md")):
        text = file.read_text()
        kept = "".join(part for i, part in enumerate(_FENCE.split(text)) if i % 4 == 0)
        kept = re.sub(r"`[^`\n]*`", "", kept)  # code spans
        source = "/" + file.relative_to(root).as_posix()
        for raw in _INLINE.findall(kept):
            if not re.match(r"[a-z][a-z0-9+.-]*:|//", raw, re.IGNORECASE) and "{{" not in raw:
                out.append((source, raw))
    return out


@pytest.mark.parametrize("name", ["prometheus-docs", "fastapi-docs"])
def test_every_link_that_resolves_by_hand_resolves(name: str) -> None:
    root, index = published(name)
    edges = {(e.source, e.raw): e for p in index.paths() for e in index.outbound(p)}
    checked = 0
    for source, raw in hand_links(root):
        edge = edges.get((source, raw))
        assert edge is not None, (source, raw)
        expected = by_hand(root, source, raw)
        if expected is None:
            assert edge.state == linkkinds.MISSING, (source, raw, edge)
        else:
            assert (edge.target, edge.state != linkkinds.MISSING) == (expected, True), (source, raw)
            checked += 1
    assert checked > (60 if name == "prometheus-docs" else 80)


@pytest.mark.parametrize(
    ("name", "source", "raw", "target", "anchor"),
    [
        (
            "prometheus-docs",
            "/docs/concepts/data_model.md",
            "/docs/practices/naming/",
            "/docs/practices/naming.md",
            "",
        ),
        (
            "prometheus-docs",
            "/docs/practices/naming.md",
            "/docs/concepts/data_model/#metric-names-and-labels",
            "/docs/concepts/data_model.md",
            "metric-names-and-labels",
        ),
        (
            "prometheus-docs",
            "/docs/guides/multi-target-exporter.md",
            "#query-exporter",
            "/docs/guides/multi-target-exporter.md",
            "query-exporter",
        ),
        (
            "prometheus-docs",
            "/docs/guides/node-exporter.md",
            "#config",
            "/docs/guides/node-exporter.md",
            "config",
        ),
        (
            "prometheus-docs",
            "/docs/guides/open_metrics_2_0_migration.md",
            "../specs/om/open_metrics_spec_2_0.md#summary",
            "/docs/specs/om/open_metrics_spec_2_0.md",
            "summary",
        ),
        (
            "fastapi-docs",
            "/tutorial/dependencies/index.md",
            "../../deployment/versions.md#upgrading-the-fastapi-versions",
            "/deployment/versions.md",
            "upgrading-the-fastapi-versions",
        ),
        ("fastapi-docs", "/async.md", "#in-a-hurry", "/async.md", "in-a-hurry"),
        (
            "fastapi-docs",
            "/index.md",
            "tutorial/#install-fastapi",
            "/tutorial/index.md",
            "install-fastapi",
        ),
        (
            "fastapi-docs",
            "/deployment/docker.md",
            "#build-a-docker-image-for-fastapi",
            "/deployment/docker.md",
            "build-a-docker-image-for-fastapi",
        ),
    ],
)
def test_links_with_anchors_resolve_as_a_reader_follows_them(
    name: str, source: str, raw: str, target: str, anchor: str
) -> None:
    _, index = published(name)
    found = [e for e in index.outbound(source) if e.raw == raw]
    assert found and all(
        (e.target, e.anchor, e.state) == (target, anchor, linkkinds.OK) for e in found
    )


PROMETHEUS_BAD_ANCHORS = {
    ("/docs/guides/contributing.md", "#developer-summit-details"),
    (
        "/docs/guides/multi-target-exporter.md",
        "/docs/instrumenting/exposition_formats/#text-format-example",
    ),
    ("/docs/guides/node-exporter.md", "#tarball-installation"),
    ("/docs/instrumenting/exposition_formats.md", "#text-format-details"),
    ("/docs/specs/native_histograms.md", "#open-metrics"),
    ("/docs/specs/native_histograms.md", "#limit-bucket-count-and-resolution"),
    ("/docs/specs/native_histograms.md", "#limit-the-bucket-count"),
}
"""Each checked by hand: no heading, heading id or HTML id of that document answers to it (the
headings were renamed; ``Limiting the bucket count`` is ``#limiting-the-bucket-count``)."""


def test_the_broken_links_are_the_real_ones() -> None:
    root, index = published("prometheus-docs")
    edges = [e for p in index.paths() for e in index.outbound(p)]
    missing = {(e.source, e.raw) for e in edges if e.state == linkkinds.MISSING}
    hand = {(s, raw) for s, raw in hand_links(root) if by_hand(root, s, raw) is None}
    assert hand <= missing
    assert all(by_hand(root, source, raw) is None for source, raw in missing)
    assert len(missing) > 50  # pages of the site outside docs/, and its images
    bad_anchors = {(e.source, e.raw) for e in edges if e.state == linkkinds.MISSING_ANCHOR}
    assert bad_anchors == PROMETHEUS_BAD_ANCHORS
    _, fastapi = published("fastapi-docs")
    edges = [e for p in fastapi.paths() for e in fastapi.outbound(p)]
    broken = [e for e in edges if e.state not in (linkkinds.OK, linkkinds.EXTERNAL)]
    assert [(e.source, e.raw) for e in broken] == [
        ("/translation-banner.md", "ENGLISH_VERSION_URL")
    ]


@pytest.mark.parametrize("name", ["prometheus-docs", "fastapi-docs"])
def test_backlinks_are_what_a_scan_of_every_body_finds(name: str) -> None:
    root, index = published(name)
    bodies = {p: (root / p.lstrip("/")).read_text() for p in index.paths()}

    class Everything:
        def exists(self, path: str) -> bool:
            return path in bodies

        def named(self, name: str) -> list[str]:
            return [p for p in bodies if p.rsplit("/", 1)[-1].lower() == name]

        def anchors(self, path: str) -> tuple[list[str], list[str], list[str]]:
            return [], [], []

        def ours(self, authority: str) -> bool:
            return False

    scanned: dict[str, Counter[str]] = {}
    for source, text in bodies.items():
        for link in links.extract(text):
            to = links.follow(link, source, Everything())
            if (
                to.state != linkkinds.MISSING
                and to.kind != linkkinds.EXTERNAL
                and to.target != source
            ):
                scanned.setdefault(to.target, Counter())[source] += 1
    assert sum(map(len, scanned.values())) > 50
    for path in bodies:
        found = Counter(e.source for e in index.inbound(path))
        assert found == scanned.get(path, Counter()), path
