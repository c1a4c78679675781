"""``mark-server import``: a folder straight into a content root, run as the installed command;
in place over a root of plain files; and the start-up warning about such files."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import shared_path
from support.server import running_server

from markproto.protocol import storefmt
from markproto.server.storage.store import Store


def server_import(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
    return subprocess.run(
        [sys.executable, "-m", "markproto.server.cli", "import", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


def test_a_corpus_into_a_new_root_then_again(tmp_path: Path) -> None:
    corpus = shared_path("corpus", "prometheus-docs")
    root = tmp_path / "new-root"
    first = server_import(corpus, "--root", root, "--prefix", "/prom/")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[:3] == [
        "71 created, 0 updated, 0 unchanged, 0 archived, 0 refused, 2 skipped",
        "skipped LICENSE: not a .md file",
        "skipped NOTICE: not a .md file",
    ]
    store = Store(root)
    doc = store.load("/prom/docs/specs/prw/remote_write_spec_2_0.md")
    assert doc is not None and doc.meta["sort-rank"] == "2"
    assert doc.body == (corpus / "docs/specs/prw/remote_write_spec_2_0.md").read_bytes()
    again = server_import(corpus, "--root", root, "--prefix", "/prom", "--json")
    report = json.loads(again.stdout)
    assert (again.returncode, len(report["unchanged"]), report["created"]) == (0, 71, [])
    assert report["root"] == str(root)


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


async def test_start_up_warns_about_plain_files_with_the_command(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    plain_root(root)
    with caplog.at_level(logging.WARNING, logger="markproto.server"):
        async with running_server(root):
            pass
    warnings = [r.getMessage() for r in caplog.records if "plain .md" in r.getMessage()]
    assert warnings == [
        "2 plain .md files in the content root are not served (they have no version history);"
        f" make them documents in place with: mark-server import {root} --root {root}"
    ]


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
