"""Content roots written by earlier reference releases, served over QUIC: every document, every
version, the hash index, VERSIONS with the reference's chain verdict, and PUBLISH onto them.

Each root is made by hand, byte for byte as that release wrote it (SPEC §7.2, "Liberal
reading"): the flat layout with every key behind ``meta.``, OKF keys behind ``meta.`` in the
per-document layout, the first releases' files without an ``archived`` line (and a chain they
never linked), an archive flag rewritten in place, lines no release of ours understands, and
histories retention pruned (the oldest survivor naming a version that is gone), in both layouts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.exchange import Remote, ask, fetch, publish
from support.server import WRITE_TOKEN, running_server

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import bodies, storefmt


@dataclass(frozen=True)
class Doc:
    path: str
    files: tuple[bytes, ...]
    """Version files v1..vN, as that release wrote them."""
    flat: bool
    """The legacy flat layout ``versions/<name>.v<N>``."""
    chain: bool
    """The reference's VERSIONS verdict."""
    meta: dict[str, str]
    """Publisher metadata FETCH answers for the current version."""
    archived: bool = False
    first: int = 1
    """The oldest version still stored (retention pruned the ones before it)."""

    @property
    def numbers(self) -> range:
        return range(self.first, self.first + len(self.files))


def _v(number: int, previous: bytes | None, lines: bytes, body: bytes, head: bytes = b"") -> bytes:
    link = b"previous-hash: " + storefmt.hash_ref(previous).encode() + b"\n" if previous else b""
    return b"---\nversion: %d\n" % number + head + link + lines + b"---\n" + body


def _march() -> Doc:
    v1 = _v(
        1,
        None,
        b"meta.tags: go, auth\nmeta.type: Note\n",
        b"# Tokens\n\nOne.\n",
        b"archived: false\n",
    )
    v2 = _v(
        2,
        v1,
        b"meta.importance: 0.9\nmeta.tags: go, auth\nmeta.type: Note\n",
        b"# Tokens\n\nTwo.\n",
        b"archived: false\n",
    )
    meta = {"importance": "0.9", "tags": "go,auth", "type": "Note"}
    return Doc("/notes/tokens.md", (v1, v2), flat=True, chain=True, meta=meta)


def _okf_prefixed() -> Doc:
    v1 = _v(1, None, b"meta.tags: [go]\nmeta.type: Note\n", b"# Go\n", b"archived: false\n")
    v2 = _v(
        2, v1, b"meta.tags: [go, quic]\nmeta.type: Note\n", b"# Go and QUIC\n", b"archived: false\n"
    )
    return Doc(
        "/docs/go.md", (v1, v2), flat=False, chain=True, meta={"tags": "go,quic", "type": "Note"}
    )


def _first_release() -> Doc:
    # The demo site of the first release: no archived line, and a v2 that names no v1.
    v1 = b"---\nversion: 1\n---\n\n# Welcome to Demarkus\n\nThe first version.\n"
    v2 = b"---\nversion: 2\n---\n\n# Welcome to Demarkus\n\nAn example site.\n"
    return Doc("/index.md", (v1, v2), flat=True, chain=False, meta={})


def _archived_in_place() -> Doc:
    v1 = _v(1, None, b"meta.type: Note\n", b"# Old\n", b"archived: true\n")
    return Doc("/old/gone.md", (v1,), flat=True, chain=True, meta={"type": "Note"}, archived=True)


def _unknown_lines() -> Doc:
    v1 = _v(
        1,
        None,
        b"evil: value\nno separator\nmeta.status: forged\ntitle: Odd\n",
        b"# Odd\n",
        b"archived: false\n",
    )
    return Doc("/docs/odd.md", (v1,), flat=False, chain=False, meta={"title": "Odd"})


def _pruned(flat: bool) -> Doc:
    # Retention 2 kept v3 and v4: v3 names a v2 that is gone, a link nobody checks.
    lines, head = b"meta.retention: 2\ntags: [kept]\ntype: Note\n", b"archived: false\n"
    v2 = _v(2, b"gone", lines, b"# Two\n", head)
    v3 = _v(3, v2, lines, b"# Three\n", head)
    v4 = _v(4, v3, lines, b"# Four\n", head)
    meta = {"retention": "2", "tags": "kept", "type": "Note"}
    path = "/pruned/flat.md" if flat else "/pruned/dir.md"
    return Doc(path, (v3, v4), flat=flat, chain=True, meta=meta, first=3)


_SERVER_KEYS = {"etag", "version", "modified", "content-hash"}
WRITE_AUTH = {"auth": WRITE_TOKEN}
DOCS = (
    _march(),
    _okf_prefixed(),
    _first_release(),
    _archived_in_place(),
    _unknown_lines(),
    _pruned(flat=True),
    _pruned(flat=False),
)


def build(root: Path, docs: tuple[Doc, ...] = DOCS) -> None:
    for doc in docs:
        folder = root / doc.path.lstrip("/")
        name = folder.name
        versions = folder.parent / "versions"
        for number, data in zip(doc.numbers, doc.files, strict=True):
            file = versions / f"{name}.v{number}" if doc.flat else versions / name / f"v{number}"
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(data)
        last = doc.numbers[-1]
        os.symlink(f"versions/{name}.v{last}" if doc.flat else f"versions/{name}/v{last}", folder)


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[Remote]:
    """A server on a fresh root of every legacy shape."""
    root = tmp_path / "root"
    root.mkdir()
    build(root)
    async with running_server(root) as server, Pool(Trust(cafile=str(server.cert))) as pool:
        yield Remote(pool, server.authority)


def _body(data: bytes) -> bytes:
    return storefmt.read_version(data, 1)[0].body


async def test_every_version_and_the_current_one_are_served(remote: Remote) -> None:
    for doc in DOCS:
        current = await fetch(remote, doc.path)
        if doc.archived:
            assert current.status == "archived"
        else:
            assert current.status == "ok", (doc.path, current.body)
            assert current.body == _body(doc.files[-1])
            assert current.meta["etag"] == storefmt.etag(doc.files[-1])
            assert current.meta["version"] == str(doc.numbers[-1])
            publisher = {k: v for k, v in current.meta.items() if k not in _SERVER_KEYS}
            assert publisher == doc.meta, doc.path
            by_hash = await fetch(remote, "/" + current.meta["content-hash"])
            assert by_hash.status == "ok" and by_hash.body == current.body
        for number, data in zip(doc.numbers, doc.files, strict=True):
            old = await fetch(remote, f"{doc.path}/v{number}")
            assert old.status == "ok", (doc.path, number, old.body)
            assert old.body == _body(data)
            assert old.meta["etag"] == storefmt.etag(data)
        for number in range(1, doc.first):  # pruned
            assert (await fetch(remote, f"{doc.path}/v{number}")).status == "not-found"


async def test_versions_gives_the_reference_chain_verdict(remote: Remote) -> None:
    for doc in DOCS:
        history = await ask(remote, "VERSIONS", doc.path)
        assert history.status == "ok", doc.path
        assert history.meta["total"] == str(len(doc.files))
        assert history.meta["chain-valid"] == ("true" if doc.chain else "false"), doc.path
        listed = [entry.version for entry in bodies.parse_history(history.body)]
        assert listed == list(reversed(doc.numbers))


async def test_publish_onto_a_legacy_document_extends_its_chain(remote: Remote) -> None:
    for doc in (d for d in DOCS if not d.archived):
        before = await fetch(remote, doc.path)
        number = doc.numbers[-1]
        written = await publish(
            remote, doc.path, b"# New\n", WRITE_AUTH, expected_version=str(number)
        )
        assert written.status == "created", (doc.path, written.body)
        assert written.meta["version"] == str(number + 1)
        history = await ask(remote, "VERSIONS", doc.path)
        assert history.meta["total"] == str(len(doc.files) + 1)  # retention is not inherited
        assert history.meta["chain-valid"] == ("true" if doc.chain else "false")
        newest = await fetch(remote, f"{doc.path}/v{number + 1}")
        assert newest.body == b"# New\n"
        again = await fetch(remote, f"{doc.path}/v{number}")
        assert again.meta["etag"] == before.meta["etag"]  # the old version is untouched


async def test_lookup_finds_the_tags_of_prefixed_keys(remote: Remote) -> None:
    found = await ask(remote, "LOOKUP", "/", query="quic")
    assert [row.path for row in bodies.parse_lookup(found.body)] == ["/docs/go.md"]


async def test_lines_not_understood_are_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    build(root, (_unknown_lines(),))
    with caplog.at_level(logging.WARNING, logger="markproto.server.storage.store"):
        async with running_server(root) as server, Pool(Trust(cafile=str(server.cert))) as pool:
            remote = Remote(pool, server.authority)
            for _ in range(3):
                assert (await fetch(remote, "/docs/odd.md/v1")).status == "ok"
    notes = [r.getMessage() for r in caplog.records if "/docs/odd.md" in r.getMessage()]
    assert len(notes) == 1, notes
    assert "'evil: value': unknown key, ignored" in notes[0]
    assert "'no separator': not 'key: value', ignored" in notes[0]
