"""An import's plan (``markproto.tree.plan``): by content hash, what is created, updated, left
alone, refused and archived, and the report people and ``--json`` read."""

from __future__ import annotations

from markproto.protocol import digests
from markproto.tree.plan import Action, Report, State, plan
from markproto.tree.source import Skipped, Source


def source(path: str, body: bytes = b"x") -> Source:
    return Source(path, path.removeprefix("/p/"), body, {}, ())


def test_by_content_hash() -> None:
    found = [
        source("/p/new.md"),
        source("/p/same.md", b"same"),
        source("/p/changed.md", b"new"),
        source("/p/archived.md"),
        Skipped("big.md", "over 1 MiB (2000000 bytes)"),
    ]
    existing = {
        "/p/same.md": State(3, digests.hash_ref(b"same")),
        "/p/changed.md": State(2, digests.hash_ref(b"old")),
        "/p/archived.md": State(1, "", archived=True),
        "/p/gone.md": State(4, "sha256-x"),
        "/p/big.md": State(1, "sha256-y"),
        "/p/sub/in-skipped.md": State(1, "sha256-z"),
    }
    found.append(Skipped("sub/", "a hidden name (the server never lists it)"))
    writes, report = plan(found, existing, "/p", archive_missing=True)
    assert [(s.path, s.action, s.expected) for s in writes] == [
        ("/p/new.md", Action.CREATE, 0),
        ("/p/changed.md", Action.UPDATE, 2),
        ("/p/gone.md", Action.ARCHIVE, 4),
    ]
    assert report.unchanged == ["/p/same.md"]
    assert report.refused == [("/p/archived.md", "document is archived; unarchive first")]
    assert [rel for rel, _ in report.skipped] == ["big.md", "sub/"]


def test_without_archive_missing_nothing_is_archived() -> None:
    writes, report = plan([], {"/p/gone.md": State(1, "h")}, "/p")
    assert writes == [] and report.writes == 0


def test_a_dry_run_reports_the_writes_as_made() -> None:
    writes, report = plan([source("/p/new.md")], {}, "/p", dry_run=True)
    assert [s.path for s in writes] == report.created == ["/p/new.md"]
    assert report.summary().startswith("dry run: 1 to create")


def test_the_report() -> None:
    report = Report(created=["/a.md"], refused=[("/b.md", "why")], skipped=[("c.txt", "not")])
    report.notes.append(("a.md", "frontmatter key 'x' left out: not text"))
    assert report.lines() == [
        "1 created, 0 updated, 0 unchanged, 0 archived, 1 refused, 1 skipped",
        "refused /b.md: why",
        "skipped c.txt: not",
        "note a.md: frontmatter key 'x' left out: not text",
    ]
    report.dry_run = True
    assert report.summary().startswith("dry run: 1 to create, 0 to update, 0 unchanged")
    assert report.as_json()["refused"] == [{"path": "/b.md", "reason": "why"}]
