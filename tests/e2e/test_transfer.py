"""Folders in and out over QUIC: ``mark import``, ``mark export`` and ``mark okf`` against a real
server, and the round trip of the real corpora (import, export, byte-identical trees, a second
import that sends no write, LOOKUP finding their frontmatter titles and tags).

One server runs in a background thread's event loop for the whole module; each test works
under a prefix of its own. Commands run in-process through click's runner, one through a real
``mark`` process whose stderr is a terminal (the progress bar).
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from support import shared_path
from support.server import WRITE_TOKEN, RunningServer, running_server
from support.trees import SKIPPED, TAKEN, messy_folder, tree

from markproto.client import Client, Pool, Tokens, Trust
from markproto.client.cli import main
from markproto.client.transfer import export_folder, import_folder
from markproto.protocol.url import parse_url
from markproto.server import devcert


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Any]]:
    base = tmp_path_factory.mktemp("transfer")
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def run() -> None:
        async with running_server(base / "root") as live:
            box.update(live=live, loop=asyncio.get_running_loop(), stop=asyncio.Event())
            ready.set()
            await box["stop"].wait()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(30), "the server did not start"
    yield box["live"], box["loop"]
    box["loop"].call_soon_threadsafe(box["stop"].set)
    thread.join(10)


@pytest.fixture
def live(server: tuple[RunningServer, Any]) -> RunningServer:
    return server[0]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: RunningServer) -> Path:
    """A MARK_HOME with the server's certificate pinned."""
    home = tmp_path / "home"
    home.mkdir()
    pin = f"{live.authority} {devcert.fingerprint(live.cert.read_bytes())}\n"
    (home / "known_hosts").write_text(pin)
    monkeypatch.setenv("MARK_HOME", str(home))
    for name in ("MARK_HOST", "MARK_AUTH"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def prefix(live: RunningServer, home: Path, request: pytest.FixtureRequest) -> str:
    """The URL of this test's own folder on the server."""
    return f"{live.url}/{request.node.name.removeprefix('test_').replace('_', '-')}/"


def mark(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def ok(*args: str) -> Result:
    result = mark(*args)
    assert result.exit_code == 0, result.output
    return result


def client_for(live: RunningServer) -> Client:
    return Client(
        Pool(Trust(cafile=str(live.cert))), tokens=Tokens(None, {live.authority: WRITE_TOKEN})
    )


def on_server(server: tuple[RunningServer, Any], job: Any) -> Any:
    """Run ``job(client)`` in a client of its own (this thread's event loop)."""

    async def go() -> Any:
        async with client_for(server[0]) as client:
            return await job(client)

    return asyncio.run(go())


# -- the corpora ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["fastapi-docs", "prometheus-docs"])
def test_the_corpora_round_trip_byte_for_byte(
    server: tuple[RunningServer, Any], tmp_path: Path, corpus: str
) -> None:
    folder = shared_path("corpus", corpus)
    target = parse_url(f"{server[0].url}/round/{corpus}/")
    sent: list[bytes] = []

    async def job(client: Client) -> Any:
        first = await import_folder(client, folder, target)
        exported = await export_folder(client, target, tmp_path / "out")
        real = client.pool.request

        async def counting(authority: str, data: bytes) -> bytes:
            sent.append(data.split(b" ", 1)[0])
            return await real(authority, data)

        client.pool.request = counting  # type: ignore[method-assign]
        second = await import_folder(client, folder, target)
        client.pool.request = real  # type: ignore[method-assign]
        found = await client.lookup(target, "Remote-Write" if "prom" in corpus else "Bigger")
        return first, exported, second, found

    first, exported, second, found = on_server(server, job)
    source = {rel: body for rel, body in tree(folder).items() if rel.endswith(".md")}
    assert len(first.created) == len(source) and not first.refused
    assert [rel for rel, _ in first.skipped] == sorted(set(tree(folder)) - set(source))
    assert tree(tmp_path / "out") == source
    assert len(exported.documents) == len(source)
    assert (second.writes, len(second.unchanged)) == (0, len(source))
    assert set(sent) <= {b"LIST", b"FETCH"}  # the second import sent no write
    titles = {row.title for row in found.rows}
    if "prom" in corpus:  # titles from the frontmatter
        assert "Prometheus Remote-Write 2.0 specification [EXPERIMENTAL]" in titles
    else:  # titles from the first heading
        assert any(t.startswith("Bigger Applications") for t in titles)


def test_frontmatter_becomes_metadata_lookup_reads(
    server: tuple[RunningServer, Any], tmp_path: Path
) -> None:
    (tmp_path / "quic.md").write_text(
        "---\ntitle: Streams and Datagrams\ntags: [quic, transport]\nsort_rank: 3\n"
        "version: 9\n---\nbody\n"
    )
    target = parse_url(f"{server[0].url}/meta/")

    async def job(client: Client) -> Any:
        report = await import_folder(client, tmp_path, target)
        by_tag = await client.lookup(target, "transport")
        by_title = await client.lookup(target, "datagrams")
        fetched = await client.fetch(target.with_path("/meta/quic.md"))
        return report, by_tag, by_title, fetched

    report, by_tag, by_title, fetched = on_server(server, job)
    assert report.notes == [
        ("quic.md", "frontmatter key 'version' left out: 'version' is the store's to set")
    ]
    assert [row.path for row in by_tag.rows] == ["/meta/quic.md"]
    assert by_tag.rows[0].tags == ("quic", "transport")
    assert [row.title for row in by_title.rows] == ["Streams and Datagrams"]
    assert fetched.meta["sort-rank"] == "3"
    assert fetched.meta["type"] == "Document"  # the server's type default
    assert fetched.body.startswith(b"---\ntitle:")  # the body is the file, unchanged


# -- mark import ---------------------------------------------------------------------------------


def test_import_reports_every_file_it_leaves_out(
    prefix: str, tmp_path: Path, live: RunningServer
) -> None:
    folder = tmp_path / "src"
    messy_folder(folder)
    dry = json.loads(ok("import", "--dry-run", "--json", str(folder), prefix).stdout)
    assert dry["dry_run"] and sorted(dry["created"]) == sorted(
        prefix.removeprefix(live.url) + name for name in TAKEN
    )
    assert mark("fetch", "-no-cache", prefix + "a.md").exit_code == 1  # nothing written
    done = json.loads(ok("import", "-auth", WRITE_TOKEN, "-json", str(folder), prefix).stdout)
    assert done["created"] == dry["created"] and not done["refused"]
    reasons = {entry["file"]: entry["reason"] for entry in done["skipped"]}
    assert reasons == SKIPPED
    assert ok("fetch", "-no-cache", prefix + "inside.md").stdout == "---\ntitle: A\n---\n# A\n"


def test_import_updates_changed_files_and_refuses_archived_ones(
    prefix: str, tmp_path: Path
) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (folder / name).write_text(f"# {name}\n")
    ok("import", "-auth", WRITE_TOKEN, str(folder), prefix)
    ok("archive", "-auth", WRITE_TOKEN, prefix + "b.md")
    (folder / "a.md").write_text("# a, again\n")
    (folder / "b.md").write_text("# b, again\n")
    again = mark("import", "-auth", WRITE_TOKEN, str(folder), prefix)
    assert again.exit_code == 1
    path = prefix.split("//", 1)[1].split("/", 1)[1]
    assert again.stdout.splitlines() == [
        "0 created, 1 updated, 1 unchanged, 0 archived, 1 refused, 0 skipped",
        f"refused /{path}b.md: document is archived; unarchive first",
    ]
    assert again.stderr == "mark: 1 document refused\n"
    assert ok("fetch", "-no-cache", prefix + "a.md").stdout == "# a, again\n"
    (folder / "c.md").unlink()
    gone = mark("import", "-auth", WRITE_TOKEN, "--archive-missing", str(folder), prefix[:-1])
    assert gone.stdout.startswith("0 created, 0 updated, 1 unchanged, 1 archived, 1 refused")
    assert mark("fetch", "-no-cache", prefix + "c.md").stdout.startswith("\n# Archived")


def test_progress_counts_every_write_against_the_whole_total(
    server: tuple[RunningServer, Any], tmp_path: Path
) -> None:
    """A first import sends its writes while the folder is still being read: its progress still
    only ever shows the whole total, as a second import's (whose writes wait for the plan)."""
    for n in range(40):  # more files than the window of writes in flight
        (tmp_path / f"{n:02d}.md").write_text(f"# {n}\n")
    target = parse_url(f"{server[0].url}/progress/")

    async def job(client: Client) -> Any:
        calls: list[list[tuple[int, int]]] = [[], []]
        first = await import_folder(
            client, tmp_path, target, progress=lambda *c: calls[0].append(c)
        )
        for n in range(0, 40, 4):
            (tmp_path / f"{n:02d}.md").write_text(f"# {n}, again\n")
        second = await import_folder(
            client, tmp_path, target, progress=lambda *c: calls[1].append(c)
        )
        return first, second, calls

    first, second, calls = on_server(server, job)
    assert len(first.created) == 40 and len(second.updated) == 10
    for made, total in zip(calls, (40, 10), strict=True):
        assert {seen for _, seen in made} == {total} and made[-1] == (total, total)
        dones = [done for done, _ in made]
        assert dones == sorted(set(dones))


def test_import_without_a_token_is_refused_document_by_document(
    prefix: str, tmp_path: Path
) -> None:
    (tmp_path / "a.md").write_text("# A\n")
    refused = mark("import", "-json", str(tmp_path), prefix)
    assert refused.exit_code == 1
    (entry,) = json.loads(refused.stdout)["refused"]
    assert entry["reason"] == "unauthorized: authentication required"


def test_a_terminal_gets_a_progress_bar(prefix: str, tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    for n in range(3):
        (folder / f"{n}.md").write_text(f"# {n}\n")
    primary, secondary = pty.openpty()
    env = {**os.environ, "MARK_HOME": str(home)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "markproto.client.cli",
            "import",
            "-auth",
            WRITE_TOKEN,
            str(folder),
            prefix,
        ],
        stdout=subprocess.PIPE,
        stderr=secondary,
        env=env,
        check=False,
        timeout=60,
    )
    os.close(secondary)
    drawn = os.read(primary, 65536).decode()
    os.close(primary)
    assert proc.returncode == 0, drawn
    assert proc.stdout.decode().startswith("3 created")
    assert "\rimporting [" in drawn and "3/3" in drawn


# -- mark export ---------------------------------------------------------------------------------


def test_export_versions_writes_every_version(prefix: str, tmp_path: Path) -> None:
    for n in range(1, 4):
        ok("publish", "-auth", WRITE_TOKEN, "-force", "-body", f"# v{n}\n", prefix + "d/doc.md")
    out = tmp_path / "out"
    assert ok("export", "--versions", prefix, str(out)).stdout == (
        "1 document, 3 history files, 0 skipped\n"
    )
    assert tree(out) == {
        "d/doc.md": b"# v3\n",
        "d/doc.v1.md": b"# v1\n",
        "d/doc.v2.md": b"# v2\n",
        "d/doc.v3.md": b"# v3\n",
    }


def test_export_never_writes_through_a_symlink(prefix: str, tmp_path: Path) -> None:
    ok("publish", "-auth", WRITE_TOKEN, "-force", "-body", "# A\n", prefix + "a.md")
    ok("publish", "-auth", WRITE_TOKEN, "-force", "-body", "# B\n", prefix + "sub/b.md")
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (elsewhere / "a.md").write_text("keep")
    os.symlink(elsewhere / "a.md", out / "a.md")
    os.symlink(elsewhere, out / "sub")
    result = mark("export", "-json", prefix, str(out))
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [entry["reason"] for entry in report["skipped"]] == ["sub is not a folder here"]
    assert (elsewhere / "a.md").read_text() == "keep"
    assert not (out / "a.md").is_symlink() and (out / "a.md").read_text() == "# A\n"


# -- mark okf --------------------------------------------------------------------------------------


def bundle(folder: Path) -> None:
    (folder / "tables").mkdir(parents=True)
    (folder / "index.md").write_text("---\nokf_version: 0.1\n---\n# Bundle\n")
    (folder / "tables/index.md").write_text("# Tables\n\n- [orders](orders.md)\n")
    (folder / "tables/orders.md").write_text(
        "---\ntype: Table\ntitle: Orders\ntags: [sales]\ntimestamp: 2026-01-01T00:00:00Z\n---\n"
    )
    (folder / "log.md").write_text("# Log\n\n## 2026-01-02\n\nAdded orders.\n")


def test_okf_validate_checks_frontmatter_and_structure(tmp_path: Path) -> None:
    bundle(tmp_path)
    assert ok("okf", "validate", str(tmp_path)).stdout == "4 files: 0 errors, 0 warnings\n"
    (tmp_path / "tables/untyped.md").write_text("---\ntitle: No type\ntimestamp: soon\n---\n")
    (tmp_path / "tables/index.md").write_text("---\ntitle: x\n---\n")
    (tmp_path / "log.md").write_text("# Log\n\n## 2026/01/02\n")
    (tmp_path / "notes.md").write_text("no frontmatter\n")
    failed = mark("okf", "validate", str(tmp_path))
    assert failed.exit_code == 1
    assert failed.stdout.splitlines() == [
        "log.md: warning: '2026/01/02' is not YYYY-MM-DD",
        "notes.md: error: no frontmatter: a concept document needs a `type`",
        "tables/index.md: error: a folder's index.md has no frontmatter",
        "tables/untyped.md: error: no `type` in the frontmatter",
        "tables/untyped.md: warning: timestamp 'soon' is not RFC 3339",
        "6 files: 3 errors, 2 warnings",
    ]
    quiet = mark("okf", "validate", "--quiet", "--json", str(tmp_path))
    assert json.loads(quiet.stdout)["errors"] == 3
    for name in ("notes.md", "tables/index.md", "tables/untyped.md"):
        (tmp_path / name).unlink()
    assert mark("okf", "validate", str(tmp_path)).exit_code == 0  # a warning only
    assert mark("okf", "validate", "--strict", str(tmp_path)).exit_code == 1


def test_okf_import_and_export_give_the_bundle_back(prefix: str, tmp_path: Path) -> None:
    bundle(tmp_path / "src")
    (tmp_path / "src/untyped.md").write_text("# Untyped\n")
    (tmp_path / "src/titled.md").write_text("---\ntitle: T\n---\n# T\n")
    imported = ok("okf", "import", "-auth", WRITE_TOKEN, str(tmp_path / "src"), prefix)
    assert imported.stdout.splitlines()[-2:] == [
        "note titled.md: error: no `type` in the frontmatter",
        "note untyped.md: error: no frontmatter: a concept document needs a `type`",
    ]
    ok(
        "publish",
        "-auth",
        WRITE_TOKEN,
        "-force",
        "-meta",
        "type=Note",
        "-meta",
        "tags=a,b",
        "-meta",
        "title=Plain",
        "-body",
        "# Plain\n",
        prefix + "plain.md",
    )
    ok("okf", "export", prefix, str(tmp_path / "out"))
    out = tree(tmp_path / "out")
    assert {k: v for k, v in out.items() if k != "plain.md"} == {
        **tree(tmp_path / "src"),
        "untyped.md": b"---\ntype: Document\n---\n# Untyped\n",
        "titled.md": b"---\ntype: Document\ntitle: T\n---\n# T\n",
    }
    assert out["plain.md"] == b"---\ntype: Note\ntitle: Plain\ntags: [a, b]\n---\n# Plain\n"
    assert mark("okf", "validate", str(tmp_path / "out")).exit_code == 0


def test_folders_the_server_lacks_export_nothing(
    server: tuple[RunningServer, Any], tmp_path: Path
) -> None:
    target = parse_url(f"{server[0].url}/no-such-folder/")
    report = on_server(server, lambda client: export_folder(client, target, tmp_path / "out"))
    assert (report.documents, report.skipped) == ([], [])
    listed = on_server(server, lambda client: client.list(target))
    assert listed.status == "not-found"
