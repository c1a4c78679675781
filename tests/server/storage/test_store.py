"""The on-disk store: layout, write rules, legacy migration, retention, recovery, escapes."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from markproto import durable
from markproto.protocol import storefmt
from markproto.server.storage.layout import ARCHIVE_FILE
from markproto.server.storage.recovery import recover
from markproto.server.storage.rooted import CUT_HEAD
from markproto.server.storage.store import (
    Archived,
    Collision,
    Conflict,
    Missing,
    Store,
    Version,
    Written,
)

META = {"importance": "0.7", "tags": "alpha,wire", "type": "Note"}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path)


def written(outcome: object) -> Written:
    assert isinstance(outcome, Written), outcome
    return outcome


def numbers(store: Store, path: str) -> list[int]:
    history = store.history(path)
    assert history is not None
    return [entry.version for entry in history.entries]


def chain_holds(store: Store, path: str) -> bool:
    history = store.history(path)
    return history is not None and store.chain_valid(history)


def test_documents_with_the_same_metadata_share_its_keys_and_short_values(store: Store) -> None:
    """Every document's metadata dict lives as long as it is current (snapshot, catalog, link
    index), and a vault's notes repeat the same keys and short values: each is one string,
    whether the version was just written or read back; a long value is the document's own."""
    long = "A description long enough to be this document's own"
    meta = {**META, "description": long}
    a = written(store.publish("/a.md", b"a", meta, expected=0)).version
    b = written(store.publish("/b.md", b"b", {**meta, "description": long + "!"}, 0)).version
    for version in (a, b, store.load("/a.md"), store.load("/b.md")):
        assert version is not None and version.meta["type"] == "Note"
        assert version.meta["type"] is a.meta["type"]
        assert next(key for key in version.meta if key == "importance") is next(
            key for key in a.meta if key == "importance"
        )
    read = store.load("/a.md")
    assert read is not None and read.meta == a.meta and read.meta["description"] == long
    assert read.meta["description"] is not a.meta["description"]


def test_first_publish_lays_out_the_reference_format(store: Store, tmp_path: Path) -> None:
    first = written(store.publish("/docs/a.md", b"# Alpha\n\nFirst body.\n", META, expected=0))
    assert first.created and first.version.number == 1
    assert os.readlink(tmp_path / "docs/a.md") == "versions/a.md/v1"
    data = (tmp_path / "docs/versions/a.md/v1").read_bytes()
    assert storefmt.etag(data) == first.version.etag
    assert first.version.etag == "94e05cf0cc64c6e22e485312b29407d06ab5a85989f6b2ce566638405b4ad0ee"
    assert not list((tmp_path / "docs").rglob(".tmp-*"))


def test_versions_chain_and_history(store: Store) -> None:
    for n in range(1, 6):
        store.publish("/a.md", f"body {n}\n".encode(), {}, expected=n - 1)
    assert numbers(store, "/a.md") == [1, 2, 3, 4, 5]
    assert chain_holds(store, "/a.md")
    loaded = store.load("/a.md", 2)
    assert loaded is not None and loaded.body == b"body 2\n"
    assert store.load("/a.md", 6) is None


def test_conflict_comes_before_the_noop_and_archived(store: Store) -> None:
    store.publish("/a.md", b"x", META, expected=None)
    assert store.publish("/a.md", b"x", META, expected=0) == Conflict(1)
    same = written(store.publish("/a.md", b"x", META, expected=1))
    assert not same.created and same.version.number == 1
    store.set_archived("/a.md", True)
    assert store.publish("/a.md", b"y", META, expected=5) == Conflict(1)
    assert store.publish("/a.md", b"y", META, expected=1) == Archived()


def test_archive_keeps_version_files_byte_identical(store: Store, tmp_path: Path) -> None:
    store.publish("/a.md", b"x", META, expected=0)
    before = (tmp_path / "versions/a.md/v1").read_bytes()
    archived = store.set_archived("/a.md", True)
    assert isinstance(archived, Version) and archived.archived
    assert (tmp_path / "versions/a.md/v1").read_bytes() == before
    assert (tmp_path / "versions/a.md" / ARCHIVE_FILE).exists()
    live = store.set_archived("/a.md", False)
    assert isinstance(live, Version) and not live.archived
    assert store.load("/a.md") is not None and not store.load("/a.md").archived  # type: ignore[union-attr]


def test_append_adds_a_newline_only_when_missing(store: Store) -> None:
    store.publish("/a.md", b"line", {"retention": "5", "type": "Note"}, expected=0)
    more = written(store.append("/a.md", b"more\n", {}, expected=1))
    assert more.version.body == b"line\nmore\n"
    assert "retention" not in more.version.meta
    again = written(store.append("/a.md", b"last\n", {"tags": "x"}, expected=2))
    assert again.version.body == b"line\nmore\nlast\n"
    assert again.version.meta == {"type": "Note", "tags": "x"}
    assert store.append("/a.md", b"z", {}, expected=2) == Conflict(3)
    assert store.append("/b.md", b"z", {}, expected=1) == Missing()


def test_retention_prunes_the_oldest(store: Store) -> None:
    for n in range(1, 5):
        store.publish("/a.md", f"{n}".encode(), {}, expected=None)
    pruning = written(store.publish("/a.md", b"5", {"retention": "2"}, expected=None))
    assert pruning.pruned == (1, 2, 3)
    assert numbers(store, "/a.md") == [4, 5]
    assert chain_holds(store, "/a.md")


@pytest.mark.parametrize(
    ("existing", "target"),
    [
        ("/docs/a.md/inner.md", "/docs/a.md"),  # a directory where the document would go
        ("/docs/a.md", "/docs/a.md/b.md"),  # a document above
    ],
)
def test_document_directory_collisions(store: Store, existing: str, target: str) -> None:
    store.publish(existing, b"x", {}, expected=None)
    assert isinstance(store.publish(target, b"y", {}, expected=None), Collision)


def test_reserved_and_plain_file_collisions(store: Store, tmp_path: Path) -> None:
    reserved = store.publish("/versions/a.md", b"x", {}, expected=None)
    assert reserved == Collision('the name "versions" is reserved for version history')
    (tmp_path / "plain.md").write_text("not versioned")
    plain = store.publish("/plain.md", b"x", {}, expected=None)
    assert plain == Collision("/plain.md exists but is not a versioned document")
    assert store.load("/plain.md") is None  # flat files without history are not served


def test_legacy_flat_layout_is_read_and_migrated(store: Store, tmp_path: Path) -> None:
    v1 = storefmt.emit_version(1, None, {"title": "Old"}, b"one\n")
    v2 = storefmt.emit_version(2, storefmt.hash_ref(v1), {"title": "Old"}, b"two\n")
    (tmp_path / "versions").mkdir()
    (tmp_path / "versions/old.md.v1").write_bytes(v1)
    (tmp_path / "versions/old.md.v2").write_bytes(v2)
    os.symlink("versions/old.md.v2", tmp_path / "old.md")
    loaded = store.load("/old.md")
    assert loaded is not None and loaded.number == 2 and loaded.body == b"two\n"
    assert numbers(store, "/old.md") == [1, 2]
    third = written(store.publish("/old.md", b"three\n", {"title": "Old"}, expected=2))
    assert third.version.number == 3
    assert os.readlink(tmp_path / "old.md") == "versions/old.md/v3"
    assert sorted(os.listdir(tmp_path / "versions")) == ["old.md"]
    assert (tmp_path / "versions/old.md/v1").read_bytes() == v1
    assert chain_holds(store, "/old.md")


def test_recovery_removes_only_unacknowledged_leftovers(store: Store, tmp_path: Path) -> None:
    store.publish("/a.md", b"1", {}, expected=0)
    store.publish("/a.md", b"2", {}, expected=1)
    vdir = tmp_path / "versions/a.md"
    # An interrupted write: v3 linked but the pointer never swapped, plus temporaries.
    (vdir / "v3").write_bytes(storefmt.emit_version(3, "sha256-" + "0" * 64, {}, b"3"))
    (vdir / ".tmp-v3-0123456789ab").write_bytes(b"partial")
    os.symlink("versions/a.md/v3", tmp_path / ".tmp-abcdefabcdef")
    # An interrupted first write: history without a pointer.
    (tmp_path / "versions/b.md").mkdir()
    (tmp_path / "versions/b.md/v1").write_bytes(storefmt.emit_version(1, None, {}, b"b"))
    removed = recover(store.layout)
    assert len(removed) == 4
    assert sorted(os.listdir(vdir)) == ["v1", "v2"]
    assert not (tmp_path / "versions/b.md").exists()
    assert not (tmp_path / ".tmp-abcdefabcdef").exists()
    third = written(store.publish("/a.md", b"3", {}, expected=2))  # the next write is not blocked
    assert third.version.number == 3 and chain_holds(store, "/a.md")


def test_a_first_version_cut_short_is_never_served(store: Store, tmp_path: Path) -> None:
    # A new document's v1 is made in place: a crash mid-write leaves it torn, with no pointer.
    (tmp_path / "versions/c.md").mkdir(parents=True)
    (tmp_path / "versions/c.md/v1").write_bytes(b"---\nversion: 1\narch")
    assert store.load("/c.md") is None and store.history("/c.md") is None
    assert recover(store.layout) == ["versions/c.md/v1"]
    assert not (tmp_path / "versions/c.md").exists()
    again = written(store.publish("/c.md", b"c\n", {}, expected=0))
    assert again.version.number == 1 and store.load("/c.md") == again.version


@pytest.mark.parametrize("batched", [False, True])
def test_a_torn_first_version_does_not_block_the_next_publish(
    store: Store, tmp_path: Path, batched: bool
) -> None:
    # A writer killed mid-write (an import beside a server) left a torn v1 and more debris, and
    # no recovery has run since: the next first write of that path clears it and succeeds.
    vdir = tmp_path / "versions/e.md"
    vdir.mkdir(parents=True)
    (vdir / "v1").write_bytes(b"---\nversion: 1\narch")
    (vdir / "v2").write_bytes(b"stale")
    (vdir / ".tmp-v2-0123456789ab").write_bytes(b"partial")
    (vdir / "archived").write_bytes(b"true\n")
    with store.batch() if batched else contextlib.nullcontext():
        first = written(store.publish("/e.md", b"e\n", {}, expected=0))
    assert first.version.number == 1
    assert store.load("/e.md") == first.version and not first.version.archived
    assert sorted(os.listdir(vdir)) == ["v1"]
    second = written(store.publish("/e.md", b"e2\n", {}, expected=1))
    assert second.version.number == 2 and chain_holds(store, "/e.md")


def test_a_pointer_to_a_missing_file_takes_a_whole_first_version(
    store: Store, tmp_path: Path
) -> None:
    os.symlink("versions/d.md/v1", tmp_path / "d.md")  # names a file that is not there
    first = written(store.publish("/d.md", b"d\n", {}, expected=0))
    assert first.version.number == 1
    loaded = store.load("/d.md")
    assert loaded is not None and loaded.body == b"d\n"
    assert sorted(os.listdir(tmp_path / "versions/d.md")) == ["v1"]


def test_symlinks_never_lead_out_of_the_root(store: Store, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "versions/secret.md").mkdir(parents=True)
    (outside / "versions/secret.md/v1").write_bytes(storefmt.emit_version(1, None, {}, b"s"))
    os.symlink("versions/secret.md/v1", outside / "secret.md")
    os.symlink(outside, tmp_path / "linked")
    os.symlink("/etc/passwd", tmp_path / "passwd.md")
    assert store.load("/linked/secret.md") is None
    assert store.load("/passwd.md") is None
    assert [p for kind, p in store.layout.walk() if kind == "doc" and store.load(p)] == []
    linked = store.publish("/linked/new.md", b"x", {}, expected=None)
    assert linked == Collision("/linked is not a directory")


def test_a_failed_write_leaves_no_temporary_behind(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.publish("/a.md", b"1", {}, expected=0)

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        store.publish("/a.md", b"2", {}, expected=1)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "versions/a.md")) == ["v1"]
    assert written(store.publish("/a.md", b"2", {}, expected=1)).version.number == 2


# -- group commit and adoption -------------------------------------------------------------------


def test_a_batch_makes_its_writes_current_only_at_its_commit(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[str] = []
    real_sync = durable.sync_filesystem
    monkeypatch.setattr(
        durable, "sync_filesystem", lambda f, **k: (syncs.append(f), real_sync(f, **k))
    )
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    with store.batch():
        for n in range(5):
            written(store.publish(f"/docs/{n}.md", b"x", {}, expected=0))
        assert store.load("/docs/0.md") is None  # written, not yet current
        assert (tmp_path / "docs/versions/0.md/v1").exists()
    assert fsyncs == [] and len(syncs) == 2  # one flush before the pointers, one after
    assert all(store.load(f"/docs/{n}.md") is not None for n in range(5))
    assert not list(tmp_path.rglob(".tmp-*"))


def test_a_batch_commits_before_a_second_write_to_the_same_path(store: Store) -> None:
    with store.batch():
        written(store.publish("/a.md", b"1", {}, expected=0))
        second = written(store.publish("/a.md", b"2", {}, expected=1))
        store.set_archived("/b.md", True)
        third = written(store.publish("/a.md", b"3", {"retention": "1"}, expected=2))
    assert (second.version.number, third.version.number, third.pruned) == (2, 3, (1, 2))
    assert numbers(store, "/a.md") == [3]


def test_a_batch_opens_each_folder_once_and_a_link_swapped_in_meanwhile_is_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folders a batch walks stay open until its end (one open each, not one per step of
    every write); a folder replaced by a link to outside the root meanwhile is not followed: the
    batch's later writes land in the real folder it opened, and the outside is untouched."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    store = Store(root)
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda name, *a, **k: (opened.append(str(name)), real_open(name, *a, **k))[1]
    )
    with store.batch():
        written(store.publish("/team/notes/0.md", b"x", {}, expected=0))  # makes the folders
        opened.clear()
        for n in range(1, 10):
            written(store.publish(f"/team/notes/{n}.md", b"x", {}, expected=0))
        assert {"team", "notes"}.isdisjoint(opened)
        os.rename(root / "team", root / "moved")
        os.symlink(outside, root / "team")
        written(store.publish("/team/notes/late.md", b"late", {}, expected=0))
    assert list(outside.iterdir()) == []
    assert (root / "moved/notes/late.md").is_symlink()
    assert store.load("/team/notes/0.md") is None  # a link in the way is refused from now on
    assert store.load("/moved/notes/late.md") is not None


def test_adopt_makes_a_plain_file_version_one_in_place(store: Store, tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes/a.md").write_bytes(b"# A\n")
    assert isinstance(store.publish("/notes/a.md", b"# B\n", {}, None, adopt=True), Collision)
    adopted = written(store.publish("/notes/a.md", b"# A\n", {}, expected=0, adopt=True))
    assert adopted.version.number == 1
    assert os.readlink(tmp_path / "notes/a.md") == "versions/a.md/v1"
    loaded = store.load("/notes/a.md")
    assert loaded is not None and loaded.body == b"# A\n"


def test_the_write_lock_excludes_other_processes(store: Store, tmp_path: Path) -> None:
    script = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY);"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"
    )
    with store.exclusive():
        held = subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=False)
    free = subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=False)
    assert (held.returncode, free.returncode) == (1, 0)


def test_the_walk_stops_where_no_document_may_be(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hand-made tree deeper than a document may be (32 segments) is not walked: its
    documents are neither served nor indexed, and the first folder too deep is logged once."""
    for depth in (31, 33):
        folder = tmp_path.joinpath(*[f"d{depth}"] * depth)
        (folder / "versions/x.md").mkdir(parents=True)
        (folder / "versions/x.md/v1").write_bytes(storefmt.emit_version(1, None, {}, b"deep"))
        os.symlink("versions/x.md/v1", folder / "x.md")
    store = Store(tmp_path)
    with caplog.at_level(logging.WARNING, "markproto.server.storage"):
        docs = [path for kind, path in store.layout.walk() if kind == "doc"]
        assert docs == ["/d31" * 31 + "/x.md"]  # 32 segments: the deepest a document may be
        assert [p for k, p in store.layout.walk() if k == "doc"] == docs
    too_deep = [r.getMessage() for r in caplog.records if "deeper than 32" in r.getMessage()]
    assert len(too_deep) == 1 and "/".join(["d33"] * 32) in too_deep[0]


@pytest.mark.parametrize(
    "shape",
    ["frontmatter", "no frontmatter", "frontmatter past the head", "close across the head"],
)
@pytest.mark.parametrize("size", [CUT_HEAD - 200, CUT_HEAD + 1, 3 * CUT_HEAD])
def test_a_version_file_read_in_two_parts_is_the_file_read_whole(
    store: Store, tmp_path: Path, shape: str, size: int
) -> None:
    """A large version file is read as its frontmatter and its body apart (the body held once,
    not as the file and its slice): what it gives is what parsing the whole file gives, for
    any place the frontmatter's close falls."""
    body = b"# Big\n\n" + b"x" * size
    data = storefmt.emit_version(1, None, {"title": "Big"}, body)
    if shape == "no frontmatter":
        data = body
    elif shape == "frontmatter past the head":  # liberal reading: a note line, then the close
        data = b"---\nversion: 1\n" + b"#" * CUT_HEAD + b"\n---\n" + body
    elif shape == "close across the head":
        pad = CUT_HEAD - len(b"---\nversion: 1\n") - 2
        data = b"---\nversion: 1\n" + b"#" * pad + b"\n---\n" + body
    (tmp_path / "versions").mkdir()
    (tmp_path / "versions/big.md.v1").write_bytes(data)
    os.symlink("versions/big.md.v1", tmp_path / "big.md")
    loaded = store.load("/big.md")
    parsed, _ = storefmt.read_version(data, 1)
    assert loaded is not None
    assert (loaded.body, loaded.meta) == (parsed.body, parsed.meta)
    assert loaded.etag == storefmt.etag(data)
    assert loaded.content_hash == storefmt.content_hash(parsed.body)


def test_loading_a_large_version_holds_its_body_about_once(store: Store) -> None:
    body = b"# Big\n\n" + b"kumquat orchard rows\n" * 45_000
    written(store.publish("/big.md", body, {}, expected=0))
    tracemalloc.start()
    try:
        loaded = store.load("/big.md")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert loaded is not None and loaded.body == body
    assert peak < 1.3 * len(body)  # the file and its body slice were 2x


def test_a_version_files_size_is_read_without_its_bytes_and_never_through_a_link(
    store: Store, tmp_path: Path
) -> None:
    """A build orders its work by it; a link planted in the root is not followed."""
    version = written(store.publish("/s/a.md", b"# Sized\n\nbody\n", {}, None)).version
    assert store.file_size(version.file) == (tmp_path / version.file).stat().st_size
    outside = tmp_path.parent / "outside.md"
    outside.write_bytes(b"x" * 5000)
    os.symlink(outside, tmp_path / "s/versions/planted")
    assert store.file_size("s/versions/planted") is None
    assert store.file_size("s/versions/missing") is None
    assert store.file_size("nowhere/at/all") is None
