"""The link commands as a user runs them: a real ``mark-server`` on loopback holding the Prometheus
docs as they are, and the installed ``mark`` (``links``, ``backlinks``, ``graph`` in every format,
``check`` on the server and on the local folder), plus the library's ``Client.links`` against
the server, a reference-like server without links, and ``mark://`` URLs of the server itself."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import shared_path
from support.echo import start_echo
from support.exchange import seed
from support.server import ServerProcess, server_process

from markproto.client import Client, Pool, Trust
from markproto.protocol import bodies, wire
from markproto.server import devcert

MARK = str(Path(sys.executable).with_name("mark"))
EXTRA = [
    (
        "/notes/hub.md",
        "# Hub\n\n[metric types](/docs/concepts/metric_types/) [self](mark://127.0.0.1:PORT/notes/hub.md)\n",
        {},
    ),
    ("/notes/old.md", "# Old\n\n[[hub]]\n", {"rel-superseded-by": "/notes/hub.md"}),
]


@dataclass
class Site:
    server: ServerProcess
    home: Path
    corpus: Path

    def mark(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
        env["MARK_HOME"] = str(self.home)
        return subprocess.run([MARK, *args], capture_output=True, text=True, env=env, timeout=60)

    def url(self, path: str) -> str:
        return self.server.url + path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    corpus = shared_path("corpus", "prometheus-docs")
    base = tmp_path_factory.mktemp("links")
    root = base / "root"
    root.mkdir()
    docs = [
        ("/" + file.relative_to(corpus).as_posix(), file.read_bytes(), {})
        for file in sorted(corpus.rglob("*.md"))
    ]
    seed(root, docs)
    with server_process(root, base / "state", args=["--scan-interval", "0.3"]) as server:
        seed_extra = [(p, body.replace("PORT", str(server.port)), meta) for p, body, meta in EXTRA]
        home = base / "home"
        home.mkdir()
        pin = devcert.fingerprint(server.cert.read_bytes())
        (home / "known_hosts").write_text(f"127.0.0.1:{server.port} {pin}\n")
        site = Site(server, home, corpus)
        asyncio.run(_publish(site, seed_extra))
        yield site


async def _publish(site: Site, docs: list[tuple[str, str, dict[str, str]]]) -> None:
    """Documents written behind the running server's back (it names its own port in a link),
    picked up by its change scan."""
    seed(site.server.root, docs)
    async with Client(Pool(Trust(known_hosts=site.home / "known_hosts"))) as client:
        for _ in range(100):
            result = await client.links(site.url("/notes/hub.md"))
            if result.ok:
                return
            await asyncio.sleep(0.1)
    raise AssertionError("the server did not pick up the new documents")


def test_mark_links_lists_a_documents_links_broken_and_external_marked(site: Site) -> None:
    done = site.mark("links", site.url("/docs/guides/node-exporter.md"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("/docs/guides/node-exporter.md: ") and "broken" in lines[0]
    assert any("missing-anchor" in line and "#tarball-installation" in line for line in lines)
    assert any("external" in line and "https://" in line for line in lines)
    as_json = json.loads(site.mark("links", "-json", site.url("/notes/hub.md")).stdout)
    assert [(e["target"], e["state"]) for e in as_json["links"]] == [
        ("/docs/concepts/metric_types.md", "ok"),
        ("/notes/hub.md", "ok"),
    ]
    assert as_json["links"][0]["url"] == site.url("/docs/concepts/metric_types.md")


def test_mark_backlinks_lists_what_links_here(site: Site) -> None:
    done = site.mark("backlinks", "-json", site.url("/docs/concepts/metric_types.md"))
    found = json.loads(done.stdout)
    sources = {link["source"] for link in found["links"]}
    assert "/notes/hub.md" in sources and "/docs/practices/histograms.md" in sources
    assert found["total"] == len(found["links"]) and found["exit_code"] == 0
    hub = json.loads(site.mark("backlinks", "-json", site.url("/notes/hub.md")).stdout)
    assert [(link["source"], link["kind"], link["relation"]) for link in hub["links"]] == [
        ("/notes/old.md", "internal", ""),
        ("/notes/old.md", "relation", "superseded-by"),
    ]


def test_mark_graph_in_every_format(site: Site) -> None:
    text = site.mark("graph", site.url("/notes/old.md"))
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("[0] Old (/notes/old.md, 2 links)\n")
    assert "[2] Metric types (/docs/concepts/metric_types.md" in text.stdout
    found = json.loads(site.mark("graph", "-json", "-depth", "2", site.url("/notes/old.md")).stdout)
    depths = {node["id"]: node["depth"] for node in found["nodes"] if node["kind"] == "document"}
    assert depths == {"/notes/old.md": 0, "/notes/hub.md": 1, "/docs/concepts/metric_types.md": 2}
    one = json.loads(site.mark("graph", "-json", "-depth", "1", site.url("/notes/old.md")).stdout)
    assert {e["target"] for e in one["edges"]} == {"/notes/hub.md"}
    dot = site.mark("graph", "-format", "dot", site.url("/notes/old.md")).stdout
    assert dot.startswith("digraph links {") and 'label="superseded-by"' in dot
    mermaid = site.mark("graph", "-format", "mermaid", site.url("/notes/old.md")).stdout
    assert mermaid.startswith("graph LR\n") and "-->|superseded-by|" in mermaid
    too_deep = site.mark("graph", "-depth", "6", site.url("/notes/old.md"))
    assert too_deep.returncode == 2


def test_mark_check_on_the_server_and_on_the_folder_find_the_same_broken_links(site: Site) -> None:
    served = site.mark("check", "-json", site.url("/docs/"))
    local = site.mark("check", "-json", str(site.corpus))
    assert (served.returncode, local.returncode) == (1, 1)

    def broken(output: str) -> list[tuple[str, int, str]]:
        findings = json.loads(output)["findings"]
        return sorted(
            (f["path"], f["line"], f["message"]) for f in findings if f["kind"] == "broken-link"
        )

    assert broken(served.stdout) == broken(local.stdout)
    assert len(broken(served.stdout)) == 79
    table = site.mark("check", site.url("/docs/guides/"))
    assert table.returncode == 1
    assert "/docs/guides/node-exporter.md\n" in table.stdout
    assert "broken link #tarball-installation" in table.stdout
    assert table.stderr.startswith("mark: ") and "errors" in table.stderr


def test_mark_check_strict_fails_on_warnings(site: Site, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n[b](b.md)\n")
    (tmp_path / "b.md").write_text("no title here, and [a](a.md)\n")
    assert site.mark("check", str(tmp_path)).returncode == 0
    strict = site.mark("check", "-strict", str(tmp_path))
    assert strict.returncode == 1 and "no-title" in strict.stdout
    (tmp_path / "c.md").write_bytes(b"---\ntitle: [unclosed\n---\n\xff\n")
    bad = json.loads(site.mark("check", "-json", str(tmp_path)).stdout)
    assert [(f["path"], f["kind"]) for f in bad["findings"] if f["severity"] == "error"] == [
        ("/c.md", "not-utf8")
    ]


@pytest.fixture
def reference_like(site: Site) -> Iterator[int]:
    """A Mark server that lists an empty folder and answers every other request as the
    reference's server answers an unknown ``match``; its certificate pinned in the site's
    home."""
    refusal = wire.emit_response(
        wire.error_response("bad-request", 'match must be "catalog" or "body", got "links"')
    )
    empty = wire.Response("ok", {"entries": "0", "complete": "true"}, bodies.index_heading("/"))
    listing = wire.emit_response(empty)
    cert, key = devcert.ensure(site.home / "reference")[:2]
    loop = asyncio.new_event_loop()

    def reply(data: bytes) -> bytes:
        return listing if data.startswith(b"LIST ") else refusal

    started = loop.run_until_complete(start_echo(cert, key, reply=reply))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    pins = site.home / "known_hosts"
    pin = devcert.fingerprint(cert.read_bytes())
    pins.write_text(pins.read_text() + f"127.0.0.1:{started[1]} {pin}\n")
    try:
        yield started[1]
    finally:
        loop.call_soon_threadsafe(started[0].close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_a_server_without_links_says_so(site: Site, reference_like: int) -> None:
    for command in ("links", "backlinks", "graph", "check"):
        asked = site.mark(command, f"mark://127.0.0.1:{reference_like}/docs/x.md")
        assert asked.returncode == 1, command
        assert asked.stderr.strip().endswith(
            "the server does not answer links (LOOKUP match: links, a markproto extension): "
            "it is the reference's or an older one"
        ), (command, asked.stderr)


async def test_the_library_pages_through_links_and_checks_its_arguments(site: Site) -> None:
    from markproto.client import LinksResult, UsageError
    from markproto.client.graph import gather

    async with Client(Pool(Trust(known_hosts=site.home / "known_hosts"))) as client:
        first = await client.links(site.url("/docs/"), direction="outgoing", limit=50)
        assert isinstance(first, LinksResult) and len(first.rows) == 50
        assert first.next_cursor == "50" and first.total > 1000
        whole = await gather(client, client.url(site.url("/docs/")), direction="outgoing")
        assert len(whole.rows) == first.total and not whole.cut
        assert whole.rows[:50] == first.rows
        assert {d.path for d in whole.documents} >= {row.source for row in whole.rows}
        for bad in ({"direction": "up"}, {"depth": 6}, {"limit": 0}):
            with pytest.raises(UsageError):
                await client.links(site.url("/docs/"), **bad)  # type: ignore[arg-type]
        missing = await client.links(site.url("/docs/nope.md"))
        assert (missing.status, missing.rows, missing.unsupported) == ("not-found", (), False)
