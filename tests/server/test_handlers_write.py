"""PUBLISH, APPEND and ARCHIVE through the dispatcher, over a real store: each check in the
reference's order, each message, both conflict bodies and the outcomes that are not ``created``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.exchange import ask, error, fetch, publish

from markproto.protocol import bodies, wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.protocol.limits import MAX_BODY
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.storage.content import Content

TOKEN = "write-token"
AUTH = {"auth": TOKEN}


@pytest.fixture
async def d(tmp_path: Path) -> AsyncIterator[Dispatcher]:
    content = Content.open(tmp_path)
    auth = Grants([Grant("w", hash_token(TOKEN), ("/**",), frozenset({"publish"}))])
    yield Dispatcher(Context(content, grants=auth))
    content.close()


def bad(message: str) -> wire.Response:
    return error("bad-request", message)


# -- PUBLISH ---------------------------------------------------------------------------------------


async def test_publish_created_then_noop(d: Dispatcher) -> None:
    first = await publish(d, "/a.md", b"# A\n", AUTH, expected_version="0", tags="x, y")
    assert first.status == "created" and first.meta.keys() == {"modified", "version"}
    assert first.meta["version"] == "1" and not first.body
    again = await publish(d, "/a.md", b"# A\n", AUTH, tags="x,y")  # same persisted form: a no-op
    assert again == wire.Response("ok", first.meta, b"")
    second = await publish(d, "/a.md", b"# A\n", AUTH, tags="x")
    assert second.status == "created" and second.meta["version"] == "2"


async def test_publish_type_default(d: Dispatcher) -> None:
    await publish(d, "/a.md", b"a", AUTH)
    await publish(d, "/t.md", b"t", AUTH, type="Note")
    await publish(d, "/blank.md", b"b", AUTH, type=" ")
    await publish(d, "/d/index.md", b"i", AUTH)
    await publish(d, "/d/log.md", b"l", AUTH)
    assert (await fetch(d, "/a.md", AUTH)).meta["type"] == "Document"
    assert (await fetch(d, "/t.md", AUTH)).meta["type"] == "Note"
    assert (await fetch(d, "/blank.md", AUTH)).meta["type"] == "Document"
    assert "type" not in (await fetch(d, "/d/index.md", AUTH)).meta
    assert "type" not in (await fetch(d, "/d/log.md", AUTH)).meta


async def test_publish_document_checks(d: Dispatcher) -> None:
    md = bad("publish path must end in .md")
    assert await publish(d, "/a.txt", b"x", AUTH) == md
    assert await publish(d, "/a.txt", b"", AUTH) == md  # before the empty-body unarchive
    assert await publish(d, "/a.txt", b"x", AUTH, version="1") == md  # before metadata
    utf8 = bad("document body must be valid UTF-8 text")
    assert await publish(d, "/a.md", b"\xff", AUTH, version="1") == utf8
    assert await publish(d, "/a.md", b"\xed\xa0\x80", AUTH) == utf8  # a surrogate is not UTF-8


async def test_publish_metadata_messages(d: Dispatcher) -> None:
    assert await publish(d, "/a.md", b"x", AUTH, etag="e") == bad('metadata key "etag" is reserved')
    assert await publish(d, "/a.md", b"x", AUTH, Title="t") == bad(
        'metadata key "Title" contains invalid characters'
    )
    assert await publish(d, "/a.md", b"x", AUTH, note="a\nb") == bad(
        'metadata value for key "note" contains newlines'
    )
    many = {f"k{n}": "v" for n in range(51)}
    assert await publish(d, "/a.md", b"x", AUTH, **many) == bad("too many metadata keys (max 50)")
    assert await publish(d, "/a.md", b"x", AUTH, note="v" * 1021) == bad(
        "metadata too large (max 1024 bytes)"
    )
    store_key = await publish(d, "/a.md", b"x", AUTH, previous_hash="sha256-x")
    assert store_key.status == "bad-request"
    assert store_key.body.startswith(b"\n# Bad request\n\ninvalid publisher metadata: ")
    retention = await publish(d, "/a.md", b"x", AUTH, retention="0")
    assert retention.body.startswith(b"\n# Bad request\n\ninvalid publisher metadata: ")
    for value in ("abc", "-1", "1.0"):
        got = await publish(d, "/a.md", b"x", AUTH, expected_version=value)
        assert got == bad("invalid expected-version"), value
    # The metadata rules come before expected-version.
    assert await publish(d, "/a.md", b"x", AUTH, etag="e", expected_version="z") == bad(
        'metadata key "etag" is reserved'
    )
    assert (await fetch(d, "/a.md", AUTH)).status == "not-found"


async def test_publish_conflicts(d: Dispatcher) -> None:
    await publish(d, "/a.md", b"1", AUTH)
    await publish(d, "/a.md", b"2", AUTH)
    stale = await publish(d, "/a.md", b"2", AUTH, expected_version="1")  # before the no-op
    assert stale == wire.Response(
        "conflict", {"your-version": "1", "server-version": "2"}, bodies.conflict_body(1, 2)
    )
    assert stale.body.endswith(b"Please fetch the latest version and reapply your edits.\n")
    exists = await publish(d, "/a.md", b"3", AUTH, expected_version="0")
    assert exists == wire.Response(
        "conflict", {"your-version": "0", "server-version": "2"}, bodies.exists_conflict_body(2)
    )
    ahead = await publish(d, "/new.md", b"x", AUTH, expected_version="4")
    assert ahead.meta == {"your-version": "4", "server-version": "0"}
    assert (await publish(d, "/a.md", b"3", AUTH, expected_version="+2")).meta["version"] == "3"


async def test_publish_archived_and_unarchive(d: Dispatcher) -> None:
    await publish(d, "/a.md", b"a", AUTH)
    assert await publish(d, "/a.md", b"", AUTH) == wire.Response("ok", {"version": "1"}, b"")
    await ask(d, "ARCHIVE", "/a.md", AUTH)
    refused = await publish(d, "/a.md", b"b", AUTH)
    assert refused == error("archived", "document is archived; unarchive first")
    assert await publish(d, "/a.md", b"", AUTH) == wire.Response("ok", {"version": "1"}, b"")
    assert (await fetch(d, "/a.md", AUTH)).body == b"a"
    assert await publish(d, "/none.md", b"", AUTH) == error("not-found", "/none.md not found")


async def test_publish_collisions(d: Dispatcher) -> None:
    await publish(d, "/docs/a.md", b"a", AUTH)
    under = await publish(d, "/docs/a.md/b.md", b"b", AUTH)
    assert under == bad("/docs/a.md is a document, not a directory")
    await publish(d, "/x.md/y.md", b"y", AUTH)
    assert await publish(d, "/x.md", b"x", AUTH) == bad("/x.md is a directory")
    reserved = await publish(d, "/docs/versions/a.md", b"v", AUTH)
    assert reserved == bad('the name "versions" is reserved for version history')
    too_long = await publish(d, "/" + "a" * 300 + ".md", b"x", AUTH)
    assert too_long == bad("path segment longer than 255 bytes")


async def test_publish_deeper_than_32_segments_creates_nothing(
    d: Dispatcher, tmp_path: Path
) -> None:
    deep = await publish(d, "/a" * 2000 + "/x.md", b"x", AUTH)
    assert deep == bad("path has more than 32 segments")
    assert list(tmp_path.iterdir()) == []
    assert (await publish(d, "/a" * 31 + "/x.md", b"x", AUTH)).status == "created"


async def test_publish_into_new_nested_folders(d: Dispatcher) -> None:
    assert (await publish(d, "/a/b/c/d.md", b"x", AUTH)).status == "created"
    root = await ask(d, "LIST", "/", AUTH)
    assert bodies.parse_index(root.body) == [bodies.IndexEntry("a", True)]


async def test_publish_retention(d: Dispatcher) -> None:
    for n in range(4):
        await publish(d, "/r.md", str(n).encode(), AUTH, retention="2")
    got = await ask(d, "VERSIONS", "/r.md", AUTH)
    assert got.meta["total"] == "2" and got.meta["current"] == "4"


# -- APPEND ----------------------------------------------------------------------------------------


async def test_append_order_of_checks(d: Dispatcher) -> None:
    assert await ask(d, "APPEND", "/a.txt", AUTH, b"") == bad("publish path must end in .md")
    assert await ask(d, "APPEND", "/a.md", AUTH, b"\xff") == bad(
        "document body must be valid UTF-8 text"
    )
    empty = error("server-error", "append requires a body")
    assert await ask(d, "APPEND", "/a.md", AUTH, b"", etag="x") == empty
    assert await ask(d, "APPEND", "/a.md", AUTH, b"x", etag="x") == bad(
        'metadata key "etag" is reserved'
    )
    required = bad("APPEND requires expected-version metadata")
    assert await ask(d, "APPEND", "/a.md", AUTH, b"x") == required
    assert await ask(d, "APPEND", "/a.md", AUTH, b"x", expected_version="") == required
    invalid = bad("invalid expected-version for APPEND (must be >= 1)")
    for value in ("0", "-2", "x"):
        assert await ask(d, "APPEND", "/a.md", AUTH, b"x", expected_version=value) == invalid
    assert await ask(d, "APPEND", "/a.md", AUTH, b"x", expected_version="1") == error(
        "not-found", "/a.md not found"
    )
    # The request's store-level keys are checked before expected-version, as the reference does.
    retention = await ask(d, "APPEND", "/a.md", AUTH, b"x", retention="0")
    assert retention.status == "bad-request"
    assert retention.body.startswith(b"\n# Bad request\n\ninvalid publisher metadata: ")


async def test_append_separator_and_metadata_merge(d: Dispatcher) -> None:
    await publish(d, "/a.md", b"abc", AUTH, title="A", retention="5", type="Note")
    got = await ask(d, "APPEND", "/a.md", AUTH, b"def", expected_version="1", title="B")
    assert got.status == "created" and got.meta["version"] == "2"
    doc = await fetch(d, "/a.md", AUTH)
    assert doc.body == b"abc\ndef"
    assert doc.meta["title"] == "B" and doc.meta["type"] == "Note" and "retention" not in doc.meta
    await ask(d, "APPEND", "/a.md", AUTH, b"\nghi\n", expected_version="2")
    assert (await fetch(d, "/a.md", AUTH)).body == b"abc\ndef\n\nghi\n"
    await ask(d, "APPEND", "/a.md", AUTH, b"jkl", expected_version="3")
    assert (await fetch(d, "/a.md", AUTH)).body == b"abc\ndef\n\nghi\njkl"


async def test_append_conflict_archived_and_size(d: Dispatcher) -> None:
    await publish(d, "/a.md", b"a", AUTH)
    stale = await ask(d, "APPEND", "/a.md", AUTH, b"b", expected_version="3")
    assert stale == wire.Response(
        "conflict",
        {"your-version": "3", "server-version": "1"},
        bodies.conflict_body(3, 1, append=True),
    )
    assert b"verify whether your append was applied" in stale.body
    await publish(d, "/big.md", b"x" * (MAX_BODY - 2), AUTH)
    too_big = await ask(d, "APPEND", "/big.md", AUTH, b"yz", expected_version="1")
    assert too_big == error("server-error", "content exceeds size limit")
    await ask(d, "ARCHIVE", "/a.md", AUTH)
    refused = await ask(d, "APPEND", "/a.md", AUTH, b"b", expected_version="1")
    assert refused == error("archived", "document is archived; unarchive first")


async def test_append_merged_metadata_may_fail(d: Dispatcher) -> None:
    await publish(d, "/a.md", b"a", AUTH, note="n" * 900)
    got = await ask(d, "APPEND", "/a.md", AUTH, b"b", expected_version="1", other="o" * 200)
    assert got == bad("metadata too large (max 1024 bytes)")


# -- ARCHIVE ---------------------------------------------------------------------------------------


async def test_archive(d: Dispatcher) -> None:
    first = await publish(d, "/docs/a.md", b"a", AUTH)
    await publish(d, "/docs/a.md", b"b", AUTH)
    digest = (await fetch(d, "/docs/a.md", AUTH)).meta["content-hash"]
    got = await ask(d, "ARCHIVE", "/docs/a.md", AUTH, b"ignored body")
    assert got == wire.Response("ok", {"archived": "true", "version": "2"}, b"")
    assert await ask(d, "ARCHIVE", "/docs/a.md", AUTH) == got
    assert (await fetch(d, "/docs/a.md", AUTH)).status == "archived"
    assert (await fetch(d, "/docs/a.md/v1", AUTH)).meta["etag"] != ""
    assert (await ask(d, "LIST", "/docs", AUTH)).meta["entries"] == "0"
    assert (await fetch(d, "/" + digest, AUTH)).status == "not-found"
    assert (await ask(d, "VERSIONS", "/docs/a.md", AUTH)).meta["total"] == "2"
    assert first.status == "created"


async def test_archive_not_found(d: Dispatcher) -> None:
    await publish(d, "/docs/a.md", b"a", AUTH)
    assert await ask(d, "ARCHIVE", "/docs/b.md", AUTH) == error("not-found", "/docs/b.md not found")
    assert await ask(d, "ARCHIVE", "/docs", AUTH) == error("not-found", "/docs not found")
