"""``mark-server import``: a folder straight into a content root, run as the installed command:
the real corpora there and back (byte for byte, a second import writing nothing), every file
left out with its reason, in place over a root of plain files, and the start-up warning about
such files as ``mark-server serve`` prints it."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support import shared_path
from support.server import running_server
from support.trees import SKIPPED, TAKEN, messy_folder, tree

from markproto.client import Client, Pool, Trust
from markproto.client.transfer import export_folder
from markproto.protocol import storefmt
from markproto.protocol.url import parse_url
from markproto.server.storage.store import Store

MARK_SERVER = str(Path(sys.executable).parent / "mark-server")
"""The installed command, as a user runs it."""
ENV = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}


def server_import(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MARK_SERVER, "import", *map(str, args)],
        capture_output=True,
        text=True,
        env=ENV,
        check=False,
        timeout=300,
    )


def entries(root: Path) -> dict[str, tuple[int, int]]:
    """Every file, link and folder under ``root`` with its inode and modification time: any
    write changes one."""
    return {
        str(p.relative_to(root)): (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in root.rglob("*")
    }


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["fastapi-docs", "prometheus-docs"])
async def test_a_corpus_round_trips_offline(tmp_path: Path, corpus: str) -> None:
    folder = shared_path("corpus", corpus)
    root, out, prefix = tmp_path / "root", tmp_path / "out", f"/{corpus}/"
    source = {rel: body for rel, body in tree(folder).items() if rel.endswith(".md")}
    first = await asyncio.to_thread(
        server_import, folder, "--root", root, "--prefix", prefix, "--json"
    )
    report = json.loads(first.stdout)
    assert first.returncode == 0, first.stderr
    assert (len(report["created"]), report["refused"]) == (len(source), [])
    assert sorted(e["file"] for e in report["skipped"]) == sorted(set(tree(folder)) - set(source))
    before = entries(root)
    again = await asyncio.to_thread(
        server_import, folder, "--root", root, "--prefix", prefix, "--json"
    )
    second = json.loads(again.stdout)
    assert (len(second["unchanged"]), second["created"], second["updated"]) == (len(source), [], [])
    assert entries(root) == before  # the second import wrote nothing at all
    async with running_server(root) as server:
        client = Client(Pool(Trust(cafile=str(server.cert))))
        async with client:
            target = parse_url(f"{server.url}{prefix}")
            exported = await export_folder(client, target, out)
            query = "Remote-Write specification" if "prom" in corpus else "Bigger Applications"
            found = await client.lookup(target, query)
    assert len(exported.documents) == len(source) and not exported.skipped
    assert tree(out) == source  # byte for byte
    titles = {row.title for row in found.rows}
    if "prom" in corpus:  # the title of its frontmatter
        assert "Prometheus Remote-Write 2.0 specification [EXPERIMENTAL]" in titles
    else:  # no frontmatter: the first heading
        assert any(t.startswith("Bigger Applications") for t in titles)


def test_a_corpus_file_keeps_its_frontmatter_as_metadata(tmp_path: Path) -> None:
    corpus = shared_path("corpus", "prometheus-docs")
    root = tmp_path / "root"
    done = server_import(corpus, "--root", root, "--prefix", "/prom/")
    assert done.stdout.splitlines()[:3] == [
        "71 created, 0 updated, 0 unchanged, 0 archived, 0 refused, 2 skipped",
        "skipped LICENSE: not a .md file",
        "skipped NOTICE: not a .md file",
    ]
    store = Store(root)
    doc = store.load("/prom/docs/specs/prw/remote_write_spec_2_0.md")
    assert doc is not None and doc.meta["sort-rank"] == "2"
    assert doc.meta["title"] == "Prometheus Remote-Write 2.0 specification [EXPERIMENTAL]"
    assert doc.body == (corpus / "docs/specs/prw/remote_write_spec_2_0.md").read_bytes()
    store.close()


def test_every_file_left_out_is_reported_with_its_reason(tmp_path: Path) -> None:
    folder, root = tmp_path / "src", tmp_path / "root"
    messy_folder(folder)
    done = server_import(folder, "--root", root, "--prefix", "/m/", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert sorted(report["created"]) == sorted(f"/m/{name}" for name in TAKEN)
    assert {e["file"]: e["reason"] for e in report["skipped"]} == SKIPPED
    text = server_import(folder, "--root", root, "--prefix", "/m/").stdout.splitlines()
    assert (
        text[0]
        == f"0 created, 0 updated, 3 unchanged, 0 archived, 0 refused, {len(SKIPPED)} skipped"
    )
    assert sorted(text[1:]) == sorted(f"skipped {f}: {r}" for f, r in SKIPPED.items())


def test_changes_archives_refusals_and_a_dry_run(tmp_path: Path) -> None:
    folder, root = tmp_path / "src", tmp_path / "root"
    folder.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (folder / name).write_text(f"# {name}\n")
    assert server_import(folder, "--root", root).returncode == 0
    store = Store(root)
    store.set_archived("/b.md", True)
    (folder / "a.md").write_text("# a, changed\n")
    (folder / "c.md").unlink()
    (folder / "d.md").write_text("# d\n")
    dry = server_import(folder, "--root", root, "--archive-missing", "--dry-run")
    assert dry.stdout.splitlines() == [
        "dry run: 1 to create, 1 to update, 0 unchanged, 1 to archive, 1 refused, 0 skipped",
        "refused /b.md: document is archived; unarchive first",
    ]
    assert store.load("/d.md") is None and store.load("/a.md").number == 1  # type: ignore[union-attr]
    done = server_import(folder, "--root", root, "--archive-missing")
    assert done.returncode == 1  # a document was refused
    assert done.stdout.splitlines()[0] == (
        "1 created, 1 updated, 0 unchanged, 1 archived, 1 refused, 0 skipped"
    )
    changed = store.load("/a.md")
    assert changed is not None and (changed.number, changed.body) == (2, b"# a, changed\n")
    history = store.history("/a.md")
    assert history is not None and store.chain_valid(history)
    assert store.load("/c.md").archived  # type: ignore[union-attr]


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    missing = server_import(tmp_path / "absent", "--root", tmp_path)
    bad = server_import(tmp_path, "--root", tmp_path / "r", "--prefix", "/a/versions/")
    assert (missing.returncode, bad.returncode) == (2, 2)
    assert "reserved for version history" in bad.stderr


def plain_root(root: Path) -> None:
    (root / "notes").mkdir(parents=True)
    (root / "index.md").write_text("---\ntags: [home]\n---\n# Home\n")
    (root / "notes/a.md").write_text("# A\n")
    (root / "notes/picture.png").write_bytes(b"\x89PNG")


def serve_until_listening(root: Path, state: Path) -> list[str]:
    """Start the installed ``mark-server serve`` on ``root``; its stderr lines up to the one
    that says it listens, then stop it."""
    command = [MARK_SERVER, "serve", "--root", root, "--state-dir", state, "--host", "127.0.0.1"]
    server = subprocess.Popen(
        [*map(str, command), "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert server.stderr is not None
    lines = []
    try:
        for line in server.stderr:
            lines.append(line.rstrip("\n"))
            if " on udp " in line:
                break
    finally:
        server.terminate()
        server.wait(30)
    assert any(" on udp " in line for line in lines), lines
    return lines


def test_start_up_warns_once_with_the_command_that_imports_plain_files(tmp_path: Path) -> None:
    root, state = tmp_path / "my root", tmp_path / "state"  # a space: the command quotes it
    plain_root(root)
    warnings = [line for line in serve_until_listening(root, state) if "plain .md" in line]
    assert len(warnings) == 1, warnings
    quoted = shlex.quote(str(root))
    assert warnings[0].endswith(
        "WARNING markproto.server: 2 plain .md files in the content root are not served (they"
        " have no version history); make them documents in place with:"
        f" mark-server import {quoted} --root {quoted}"
    )
    command = shlex.split(warnings[0].split(" with: ", 1)[1])
    assert command[0] == "mark-server"
    done = subprocess.run(
        [MARK_SERVER, *command[1:]], capture_output=True, text=True, env=ENV, check=False
    )
    assert done.stdout.splitlines() == [
        "2 created, 0 updated, 0 unchanged, 0 archived, 0 refused, 1 skipped",
        "skipped notes/picture.png: not a .md file",
    ]
    assert not [line for line in serve_until_listening(root, state) if "plain .md" in line]


def test_in_place_makes_plain_files_documents_and_keeps_documents(tmp_path: Path) -> None:
    root = tmp_path / "root"
    plain_root(root)
    store = Store(root)
    store.publish("/kept.md", b"# Kept\n", {"type": "Note"}, expected=0)
    done = server_import(root, "--root", root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "2 created, 0 updated, 0 unchanged, 0 archived, 0 refused, 1 skipped",
        "skipped notes/picture.png: not a .md file",
    ]
    index = store.load("/index.md")
    assert index is not None and index.body == b"---\ntags: [home]\n---\n# Home\n"
    assert index.meta == {"tags": "home"}  # index.md: no type default
    assert os.readlink(root / "notes/a.md") == "versions/a.md/v1"
    kept = store.load("/kept.md")
    assert kept is not None and kept.number == 1
    again = server_import(root, "--root", root)  # the documents are the store's own now
    assert again.stdout.splitlines()[0] == (
        "0 created, 0 updated, 0 unchanged, 0 archived, 0 refused, 1 skipped"
    )


def test_a_root_inside_the_folder_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n")
    root = tmp_path / "store"
    first = server_import(tmp_path, "--root", root)
    assert first.stdout.splitlines() == [
        "1 created, 0 updated, 0 unchanged, 0 archived, 0 refused, 1 skipped",
        "skipped store/: the content root itself",
    ]
    data = (root / "versions/a.md/v1").read_bytes()
    assert storefmt.parse_version(data).body == b"# A\n"


@pytest.mark.parametrize("prefix", ["docs", "/docs/", "docs/", "/docs"])
def test_the_library_reads_a_prefix_in_any_form_the_command_does(
    tmp_path: Path, prefix: str
) -> None:
    from markproto.server import importer

    folder, root = tmp_path / "notes", tmp_path / "root"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub/a.md").write_bytes(b"# A\n")
    root.mkdir()
    report = importer.run(root, folder, prefix)
    assert report.created == ["/docs/sub/a.md"]
    loaded = Store(root).load("/docs/sub/a.md")
    assert loaded is not None and loaded.body == b"# A\n"
    with pytest.raises(ValueError, match="may not contain"):
        importer.run(root, folder, "/a/../b")
