"""No byte is read from or written outside the content root, whatever links the tree holds.

Each shape plants links (a folder, a version file, a pointer, an archive flag, a temporary) that
lead to a sentinel tree outside the root holding a valid version with a word found nowhere else.
Then the server's whole life runs over it through its public surfaces: the startup walk with
recovery, every verb through the dispatcher (reads, LOOKUP in both modes, PUBLISH, APPEND, ARCHIVE
and unarchive), a change scan and a restart. The sentinel must come out unchanged byte for byte
(names, contents, link targets, and each folder's mtime, which any entry created or removed in
it would move), and the word must appear in no answer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from markproto.protocol import storefmt, wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content
from markproto.server.storage.store import Store
from markproto.server.transport import Peer

TOKEN = "confined-token"
SECRET = b"zebraquartz"
"""A word only the sentinel holds: no answer may ever carry it."""
PEER = Peer("192.0.2.1", 1)


def version(number: int, body: bytes, archived: bool = False) -> bytes:
    data = storefmt.emit_version(number, None if number == 1 else "sha256-" + "0" * 64, {}, body)
    return data.replace(b"archived: false", b"archived: true") if archived else data


def sentinel(outside: Path) -> None:
    """A valid tree of its own: a folder with a pointer, a history, a flag and a loose file."""
    body = b"# Outside\n\n" + SECRET + b" lives here\n"
    (outside / "tree/versions/x.md").mkdir(parents=True)
    (outside / "tree/versions/x.md/v1").write_bytes(version(1, body))
    (outside / "tree/versions/x.md/v2").write_bytes(version(2, body + b"two\n"))
    os.symlink("versions/x.md/v1", outside / "tree/x.md")
    (outside / "flag").write_bytes(b"true\n")
    (outside / "loose").write_bytes(body)


def picture(top: Path) -> dict[str, object]:
    """Everything about a tree a write would change: names, bytes, link targets, folder mtimes."""
    seen: dict[str, object] = {".": top.stat().st_mtime_ns}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder, name)
            rel = str(path.relative_to(top))
            if path.is_symlink():
                seen[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                seen[rel] = path.stat().st_mtime_ns
            else:
                seen[rel] = path.read_bytes()
    return seen


def folder_link(root: Path, outside: Path) -> list[str]:
    """The document folder itself is a link out."""
    os.symlink(outside / "tree", root / "p")
    return ["p"]


def versions_link(root: Path, outside: Path) -> list[str]:
    """A real folder whose ``versions`` folder is a link out, under a well-formed pointer."""
    (root / "p").mkdir()
    os.symlink(outside / "tree/versions", root / "p/versions")
    os.symlink("versions/x.md/v1", root / "p/x.md")
    return ["p/versions"]


def history_link(root: Path, outside: Path) -> list[str]:
    """The issue's shape: ``p/versions/x.md`` is a link out holding a valid v1."""
    (root / "p/versions").mkdir(parents=True)
    os.symlink(outside / "tree/versions/x.md", root / "p/versions/x.md")
    os.symlink("versions/x.md/v1", root / "p/x.md")
    return ["p/versions/x.md"]


def file_link(root: Path, outside: Path) -> list[str]:
    """A real history whose current version file is a link out."""
    (root / "p/versions/x.md").mkdir(parents=True)
    os.symlink(outside / "tree/versions/x.md/v1", root / "p/versions/x.md/v1")
    os.symlink("versions/x.md/v1", root / "p/x.md")
    return ["p/versions/x.md/v1"]


def pointer_links(root: Path, outside: Path) -> list[str]:
    """Pointers that lead out: absolute, and relative through ``..``."""
    (root / "p").mkdir()
    os.symlink(outside / "tree/versions/x.md/v1", root / "p/x.md")
    os.symlink("versions/y.md/../../../outside/tree/versions/x.md/v1", root / "p/y.md")
    os.symlink("../outside/tree/x.md", root / "p/z.md")
    return ["p/x.md", "p/y.md", "p/z.md"]


def flag_link(root: Path, outside: Path) -> list[str]:
    """A live document whose archive flag is a link to a file saying ``true``."""
    store = Store(root)
    store.publish("/p/x.md", b"# Live\n", {}, None)
    store.close()
    os.symlink(outside / "flag", root / "p/versions/x.md/archived")
    return ["p/versions/x.md/archived"]


def temporary_links(root: Path, outside: Path) -> list[str]:
    """Links named like the store's temporaries, in a folder, a history and ``versions``."""
    store = Store(root)
    store.publish("/p/x.md", b"# Live\n", {}, None)
    store.close()
    os.symlink(outside / "loose", root / "p/versions/x.md/.tmp-v2-0123456789ab")
    os.symlink(outside / "tree", root / "p/.tmp-0123456789ab")
    os.symlink(outside / "tree/versions", root / "p/versions/.tmp-abcdefabcdef")
    return []  # recovery removes these links (never their targets) before anything reads them


def fifo_file(root: Path, outside: Path) -> list[str]:
    """A FIFO where a version file should be: opening it must not hang the server."""
    (root / "p/versions/x.md").mkdir(parents=True)
    os.mkfifo(root / "p/versions/x.md/v1")
    os.symlink("versions/x.md/v1", root / "p/x.md")
    return []


SHAPES: dict[str, Callable[[Path, Path], list[str]]] = {
    "folder": folder_link,
    "versions folder": versions_link,
    "history folder": history_link,
    "file": file_link,
    "pointer": pointer_links,
    "flag": flag_link,
    "temporary": temporary_links,
    "fifo": fifo_file,
}


@pytest.fixture
def planted(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path, list[str]]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    sentinel(outside)
    Store(root).publish("/q/real.md", b"# Real\n\nin the root\n", {}, None)
    refused = SHAPES[request.param](root, outside)
    return root, outside, refused


class Server:
    """The server's content, indexes and dispatcher over one root (a start, or a restart)."""

    def __init__(self, root: Path) -> None:
        self.lookup = Lookup()
        self.content = Content.open(root, [self.lookup])
        auth = Grants([Grant("w", hash_token(TOKEN), ("/**",), frozenset({"publish"}))])
        self.dispatcher = Dispatcher(Context(self.content, lookup=self.lookup, grants=auth))
        self.answers: list[tuple[str, wire.Response]] = []

    async def ask(self, verb: str, path: str, body: bytes = b"", **meta: str) -> wire.Response:
        request = wire.Request(verb, path, {"auth": TOKEN, **meta}, body)
        out = self.dispatcher.handle(wire.emit_request(request), PEER)
        got = wire.parse_response(out if isinstance(out, bytes) else await out)
        self.answers.append((verb, got))
        return got

    async def every_verb(self) -> None:
        for path in ("/p/x.md", "/p/y.md", "/p/z.md", "/p/x.md/v1", "/p/x.md/v2"):
            await self.ask("FETCH", path)
            await self.ask("VERSIONS", path)
        for folder in ("/", "/p", "/q"):
            await self.ask("LIST", folder, **{"include-archived": "true"})
            await self.ask("FETCH", folder)
        for match in ("catalog", "body"):
            await self.ask("LOOKUP", "/", query=SECRET.decode(), match=match)
            await self.ask("LOOKUP", "/", query="outside", match=match)
        for path in ("/p/x.md", "/p/y.md", "/p/new.md", "/p/.tmp-0123456789ab/x.md"):
            await self.ask("PUBLISH", path, b"# Mine\n")
            await self.ask("APPEND", path, b"more\n", **{"expected-version": "1"})
            await self.ask("ARCHIVE", path)
            await self.ask("PUBLISH", path, b"# Mine\n", archived="false")
            await self.ask("FETCH", path)
        await self.content.rescan()
        await self.ask("FETCH", "/p/x.md")
        await self.ask("LOOKUP", "/", query=SECRET.decode(), match="body")

    def close(self) -> None:
        self.content.close()


@pytest.mark.parametrize("planted", list(SHAPES), indirect=True)
async def test_no_byte_leaves_the_root(
    planted: tuple[Path, Path, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    root, outside, refused = planted
    before = picture(outside)
    caplog.set_level(logging.WARNING, "markproto.server.storage")
    for _ in range(2):  # a start, then a restart over what the first left
        server = Server(root)
        try:
            await server.every_verb()
            assert (await server.ask("FETCH", "/q/real.md")).status == "ok"
        finally:
            server.close()
        for verb, answer in server.answers:
            assert b"internal error" not in answer.body, (verb, answer)
            if verb == "LOOKUP":  # its heading repeats the query
                assert answer.meta["matches"] == "0", answer
            else:
                assert SECRET not in answer.body and SECRET.decode() not in str(answer.meta)
        assert picture(outside) == before
    logged = [r.getMessage() for r in caplog.records if r.name == "markproto.server.storage"]
    for name in refused:
        mentions = [line for line in logged if f" {name} in " in line]
        assert 1 <= len(mentions) <= 2, (name, logged)  # at most once a start, not per request


@pytest.mark.parametrize("planted", ["flag"], indirect=True)
async def test_a_linked_flag_is_not_read_and_archiving_replaces_the_link(
    planted: tuple[Path, Path, list[str]],
) -> None:
    root, _, _ = planted
    server = Server(root)
    try:
        assert (await server.ask("FETCH", "/p/x.md")).status == "ok"  # the link said "true"
        assert (await server.ask("ARCHIVE", "/p/x.md")).status == "ok"
        assert (await server.ask("FETCH", "/p/x.md")).status == "archived"
    finally:
        server.close()
    flag = root / "p/versions/x.md/archived"
    assert not flag.is_symlink() and flag.read_bytes() == b"true\n"


@pytest.mark.parametrize("planted", ["temporary"], indirect=True)
async def test_recovery_removes_linked_temporaries_not_their_targets(
    planted: tuple[Path, Path, list[str]],
) -> None:
    root, outside, _ = planted
    Server(root).close()
    assert not list(root.rglob(".tmp-*"))
    assert (outside / "loose").exists() and (outside / "tree/versions/x.md/v1").exists()
