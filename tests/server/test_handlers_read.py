"""FETCH, LIST and VERSIONS through the dispatcher, over a real store: every message, every path
kind, read auth on every spelling of a path, and the LIST page rules."""

from __future__ import annotations

import base64
import hashlib
import inspect
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.exchange import PEER, ask, error

from markproto.protocol import bodies, storefmt, times, wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.protocol.limits import MAX_BODY
from markproto.protocol.status import Status
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.storage.content import Content
from markproto.server.storage.snapshot import CurrentVersion
from markproto.server.storage.store import Written

READER = "reader-token"
PUBLISHER = "publisher-token"


@pytest.fixture
def content(tmp_path: Path) -> Iterator[Content]:
    served = Content.open(tmp_path)
    yield served
    served.close()


def grants(*extra: Grant) -> Grants:
    """A reader for /secret, a publish-only token there too, and whatever the test adds."""
    return Grants(
        [
            Grant("reader", hash_token(READER), ("/secret/**",), frozenset({"read"})),
            Grant("pub", hash_token(PUBLISHER), ("/**",), frozenset({"publish"})),
            *extra,
        ]
    )


def dispatcher(content: Content, auth: Grants | None = None) -> Dispatcher:
    return Dispatcher(Context(content, grants=auth))


async def put(content: Content, path: str, body: bytes, **meta: str) -> CurrentVersion:
    written = await content.publish(path, body, meta, None)
    current = content.current(path)
    assert isinstance(written, Written) and written.created and current is not None
    return current


# -- FETCH: documents ------------------------------------------------------------------------------


async def test_fetch_document_metadata(content: Content) -> None:
    doc = await put(content, "/docs/a.md", b"# A\n", title="A", tags="x,y", importance="0.7")
    got = await ask(dispatcher(content), "FETCH", "/docs/a.md")
    assert got.status == Status.OK
    assert got.body == b"# A\n"
    assert got.meta == {
        "title": "A",
        "tags": "x,y",
        "importance": "0.7",
        "modified": times.format_time(doc.modified),
        "etag": doc.etag,
        "version": "1",
        "content-hash": storefmt.content_hash(b"# A\n"),
    }


async def test_fetch_skips_stored_keys_a_publisher_may_not_set(content: Content) -> None:
    # A store written by other software can hold keys the rules refuse; none of them is served,
    # and none can replace a server key.
    stored = {"etag": "evil", "auth": "tok", "Bad_Key": "x", "fine": "kept"}
    await content.publish("/a.md", b"x", stored, None)
    got = await ask(dispatcher(content), "FETCH", "/a.md")
    assert got.meta["fine"] == "kept"
    assert "auth" not in got.meta and "Bad_Key" not in got.meta
    assert got.meta["etag"] != "evil" and got.meta["version"] == "1"


async def test_fetch_missing_and_canonical_message(content: Content) -> None:
    d = dispatcher(content)
    assert await ask(d, "FETCH", "/docs//missing.md") == error(
        "not-found", "/docs/missing.md not found"
    )


async def test_fetch_archived(content: Content) -> None:
    await put(content, "/docs/b.md", b"b")
    await content.set_archived("/docs/b.md", True)
    got = await ask(dispatcher(content), "FETCH", "/docs/b.md")
    assert got == error("archived", "/docs/b.md is archived")
    assert got.body == b"\n# Archived\n\n/docs/b.md is archived\n"


async def test_conditional_requests(content: Content) -> None:
    doc = await put(content, "/a.md", b"a")
    d = dispatcher(content)
    later = (doc.modified + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    earlier = (doc.modified - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    not_modified = wire.Response("not-modified", {}, b"")
    assert await ask(d, "FETCH", "/a.md", {"if-none-match": doc.etag}) == not_modified
    assert await ask(d, "FETCH", "/a.md", {"if-modified-since": later}) == not_modified
    same = times.format_time(doc.modified)
    assert await ask(d, "FETCH", "/a.md", {"if-modified-since": same}) == not_modified
    assert (await ask(d, "FETCH", "/a.md", {"if-modified-since": earlier})).status == "ok"
    # A stale etag does not decide: the date still may.
    stale = {"if-none-match": "0" * 64, "if-modified-since": later}
    assert await ask(d, "FETCH", "/a.md", stale) == not_modified
    for ignored in ("garbage", "2999-01-01", "2999-01-01 00:00:00Z", "2999-13-01T00:00:00Z"):
        assert (await ask(d, "FETCH", "/a.md", {"if-modified-since": ignored})).status == "ok"
    raw = d.handle(b"FETCH /a.md\n---\nif-none-match: " + doc.etag.encode() + b"\n---\n", PEER)
    assert raw == b"---\nstatus: not-modified\n---\n"


# -- FETCH: version paths --------------------------------------------------------------------------


async def test_version_paths(content: Content) -> None:
    for n in range(1, 4):
        await content.publish("/docs/a.md", f"v{n}\n".encode(), {}, n - 1)
    d = dispatcher(content)
    for spelling in ("/docs/a.md/v1", "/docs/a.md/v+1", "/docs/a.md/v01"):
        got = await ask(d, "FETCH", spelling)
        assert got.body == b"v1\n" and got.meta["version"] == "1"
        assert got.meta["current-version"] == "3"
    assert (await ask(d, "FETCH", "/docs/a.md/v+3")).body == b"v3\n"
    assert await ask(d, "FETCH", "/docs/a.md/v9") == error("not-found", "/docs/a.md/v9 not found")
    # v0 and v-1 are not versions: they are names, and nothing is there.
    assert await ask(d, "FETCH", "/docs/a.md/v0") == error("not-found", "/docs/a.md/v0 not found")
    missing = await ask(d, "FETCH", "/docs/nope.md/v1")
    assert missing == error("not-found", "/docs/nope.md/v1 not found")


async def test_version_paths_honour_conditional_keys(content: Content) -> None:
    for n in range(1, 3):
        await content.publish("/a.md", f"v{n}\n".encode(), {}, n - 1)
    d = dispatcher(content)
    first = await ask(d, "FETCH", "/a.md/v1")
    unchanged = await ask(d, "FETCH", "/a.md/v1", {"if-none-match": first.meta["etag"]})
    assert unchanged == wire.Response("not-modified", {}, b"")
    since = await ask(d, "FETCH", "/a.md/v1", {"if-modified-since": first.meta["modified"]})
    assert since.status == "not-modified"
    other = await ask(d, "FETCH", "/a.md/v2", {"if-none-match": first.meta["etag"]})
    assert other.status == "ok"


async def test_version_of_an_archived_document_is_served(content: Content) -> None:
    await put(content, "/a.md", b"a")
    await content.set_archived("/a.md", True)
    got = await ask(dispatcher(content), "FETCH", "/a.md/v1")
    assert got.status == "ok" and got.body == b"a" and got.meta["current-version"] == "1"


async def test_version_base_that_is_a_directory_is_a_plain_path(content: Content) -> None:
    await put(content, "/api/v2/x.md", b"x")
    got = await ask(dispatcher(content), "FETCH", "/api/v2")
    assert got.status == "ok"
    assert bodies.parse_index(got.body) == [bodies.IndexEntry("x.md", False)]


# -- FETCH: hash paths -----------------------------------------------------------------------------


async def test_hash_fetch(content: Content) -> None:
    doc = await put(content, "/a.md", b"same")
    d = dispatcher(content)
    got = await ask(d, "FETCH", "/" + doc.content_hash)
    assert got.body == b"same" and got.meta["content-hash"] == doc.content_hash
    miss = "sha256-" + "0" * 64
    assert await ask(d, "FETCH", "/" + miss) == error(
        "not-found", f"content not found for hash {miss}"
    )
    # Uppercase hex is not a hash path, just a missing name.
    upper = "/" + doc.content_hash.upper()
    assert await ask(d, "FETCH", upper) == error("not-found", f"{upper} not found")
    await content.set_archived("/a.md", True)
    gone = await ask(d, "FETCH", "/" + doc.content_hash)
    assert gone == error("not-found", f"content not found for hash {doc.content_hash}")


async def test_hash_fetch_checks_read_auth_on_the_resolved_path(content: Content) -> None:
    hidden = await put(content, "/secret/a.md", b"shared")
    d = dispatcher(content, grants())
    path = "/" + hidden.content_hash
    refused = error("not-found", f"content not found for hash {hidden.content_hash}")
    assert await ask(d, "FETCH", path) == refused
    assert await ask(d, "FETCH", path, {"auth": PUBLISHER}) == refused
    assert (await ask(d, "FETCH", path, {"auth": READER})).body == b"shared"
    # With a public twin, a tokenless fetch gets the twin, the reader the first it may read.
    twin = await put(content, "/zz.md", b"shared")
    assert (await ask(d, "FETCH", path)).meta["etag"] == twin.etag
    assert (await ask(d, "FETCH", path, {"auth": READER})).meta["etag"] == hidden.etag


# -- FETCH: directories ----------------------------------------------------------------------------


async def test_directory_fetch_lists_without_an_index(content: Content) -> None:
    await put(content, "/docs/a.md", b"a")
    await put(content, "/docs/sub/c.md", b"c")
    await put(content, "/docs/old.md", b"o")
    await content.set_archived("/docs/old.md", True)
    d = dispatcher(content)
    got = await ask(d, "FETCH", "/docs/")
    body = b"\n# Index of /docs/\n\n- [a.md](a.md)\n- [sub/](sub/)\n"
    digest = hashlib.sha256(body).hexdigest()
    assert got == wire.Response(
        "ok", {"entries": "2", "etag": digest, "content-hash": "sha256-" + digest}, body
    )
    not_modified = await ask(d, "FETCH", "/docs", {"if-none-match": digest})
    assert not_modified == wire.Response("not-modified", {}, b"")
    shown = await ask(d, "FETCH", "/docs", {"include-archived": "true"})
    assert [e.name for e in bodies.parse_index(shown.body)] == ["a.md", "old.md", "sub"]


async def test_directory_fetch_serves_a_live_index(content: Content) -> None:
    await put(content, "/docs/index.md", b"# Docs\n")
    await put(content, "/docs/a.md", b"a")
    d = dispatcher(content)
    got = await ask(d, "FETCH", "/docs")
    assert got.body == b"# Docs\n" and got.meta["version"] == "1"
    await content.set_archived("/docs/index.md", True)
    listing = await ask(d, "FETCH", "/docs")
    assert [e.name for e in bodies.parse_index(listing.body)] == ["a.md"]


async def test_directory_fetch_caps_at_1000_entries(tmp_path: Path) -> None:
    root = lay_out(tmp_path / "root", [f"/big/{n:04d}.md" for n in range(1001)])
    with opened(root) as content:
        got = await ask(dispatcher(content), "FETCH", "/big")
    assert got.meta["entries"] == "1000"
    assert got.body.endswith(bodies.TRUNCATED_NOTE)
    assert "complete" not in got.meta and "next-cursor" not in got.meta
    assert bodies.parse_index(got.body)[-1].name == "0999.md"


# -- read auth -------------------------------------------------------------------------------------


async def test_read_auth_matrix(content: Content) -> None:
    await put(content, "/secret/a.md", b"s")
    await put(content, "/open.md", b"o")
    d = dispatcher(content, grants())
    unauthorized = error("unauthorized", "authentication required")
    forbidden = error("not-permitted", "insufficient permissions")
    for verb, path in [
        ("FETCH", "/secret/a.md"),
        ("FETCH", "/secret/a.md/v1"),
        ("FETCH", "/secret"),
        ("FETCH", "/secret/missing.md"),
        ("LIST", "/secret"),
        ("VERSIONS", "/secret/a.md"),
    ]:
        assert await ask(d, verb, path) == unauthorized, (verb, path)
        assert await ask(d, verb, path, {"auth": "bogus"}) == unauthorized, (verb, path)
        assert await ask(d, verb, path, {"auth": PUBLISHER}) == forbidden, (verb, path)
        assert (await ask(d, verb, path, {"auth": READER})).status != "unauthorized"
    assert (await ask(d, "FETCH", "/secret/a.md", {"auth": READER})).body == b"s"
    # Public paths ignore the token entirely, even a bogus one.
    assert (await ask(d, "FETCH", "/open.md", {"auth": "bogus"})).body == b"o"


async def test_expired_reader_is_unauthorized(content: Content) -> None:
    await put(content, "/vault/a.md", b"v")
    past = datetime.now(UTC) - timedelta(days=1)
    auth = grants(Grant("old", hash_token("old"), ("/vault/**",), frozenset({"read"}), past))
    got = await ask(dispatcher(content, auth), "FETCH", "/vault/a.md", {"auth": "old"})
    assert got == error("unauthorized", "authentication required")


async def test_directory_pattern_guards_the_bare_folder(content: Content) -> None:
    await put(content, "/team/a.md", b"t")
    auth = grants(Grant("team", hash_token("team"), ("/team/",), frozenset({"read"})))
    d = dispatcher(content, auth)
    assert (await ask(d, "LIST", "/team")).status == "unauthorized"
    assert (await ask(d, "LIST", "/team", {"auth": "team"})).status == "ok"


async def test_index_md_needs_its_own_read_auth(content: Content) -> None:
    await put(content, "/d/index.md", b"i")
    auth = grants(Grant("idx", hash_token("idx"), ("/d/index.md",), frozenset({"read"})))
    d = dispatcher(content, auth)
    assert await ask(d, "FETCH", "/d") == error("unauthorized", "authentication required")
    assert (await ask(d, "FETCH", "/d", {"auth": "idx"})).body == b"i"


async def test_manifest_is_always_public(content: Content) -> None:
    manifest = "/.well-known/agent-manifest.md"
    await put(content, manifest, b"# Site\n")
    everything = grants(Grant("all", hash_token("all"), ("/**",), frozenset({"read"})))
    d = dispatcher(content, everything)
    assert (await ask(d, "FETCH", manifest)).body == b"# Site\n"
    assert (await ask(d, "FETCH", "/.well-known/other.md")).status == "unauthorized"


# -- LIST ------------------------------------------------------------------------------------------


async def test_list_entries_and_exclusions(content: Content) -> None:
    await put(content, "/docs/b.md", b"b")
    await put(content, "/docs/a.md", b"a")
    await put(content, "/docs/sub/c d.md", b"c")
    await put(content, "/docs/old/x.md", b"x")
    await put(content, "/docs/.hidden.md", b"h")
    await put(content, "/docs/Z.md", b"z")
    await content.set_archived("/docs/old/x.md", True)
    d = dispatcher(content)
    got = await ask(d, "LIST", "/docs/")
    assert got.meta == {"entries": "4", "complete": "true"}
    assert got.body == (
        b"\n# Index of /docs/\n\n- [Z.md](Z.md)\n- [a.md](a.md)\n- [b.md](b.md)\n- [sub/](sub/)\n"
    )
    shown = await ask(d, "LIST", "/docs", {"include-archived": "true"})
    assert [e.name for e in bodies.parse_index(shown.body)] == [
        "Z.md",
        "a.md",
        "b.md",
        "old",
        "sub",
    ]
    explicit = await ask(d, "LIST", "/docs", {"include-archived": "false"})
    assert explicit.meta["entries"] == "4"
    root = await ask(d, "LIST", "/")
    assert root.body == b"\n# Index of /\n\n- [docs/](docs/)\n"


async def test_list_paging_round_trips_the_cursor(content: Content) -> None:
    names = [f"{c}.md" for c in "abcde"]
    for name in names:
        await put(content, f"/p/{name}", b"x")
    d = dispatcher(content)
    seen: list[str] = []
    meta: dict[str, str] = {"page-size": "2"}
    pages = 0
    while True:
        got = await ask(d, "LIST", "/p", meta)
        pages += 1
        entries = bodies.parse_index(got.body)
        assert got.meta["entries"] == str(len(entries))
        seen += [e.name for e in entries]
        if got.meta["complete"] == "true":
            assert "next-cursor" not in got.meta
            assert not got.body.endswith(bodies.TRUNCATED_NOTE)
            break
        assert got.body.endswith(bodies.TRUNCATED_NOTE)
        meta["cursor"] = got.meta["next-cursor"]
    assert seen == names and pages == 3
    first = await ask(d, "LIST", "/p", {"page-size": "1"})
    assert first.meta["next-cursor"] == _cursor(b"\x01\x00\x00\x02/pa.md")


async def test_list_cursor_errors(content: Content) -> None:
    await put(content, "/p/a.md", b"x")
    await put(content, "/q/a.md", b"x")
    d = dispatcher(content)
    cases = {
        "!!!": "invalid LIST cursor",
        _cursor(b"\x01\x00\x00"): "invalid LIST cursor",
        _cursor(b"\x02\x00\x00\x02/pa.md"): "unsupported LIST cursor",
        _cursor(b"\x01\x02\x00\x02/pa.md"): "unsupported LIST cursor",
        _cursor(b"\x01\x00\x00\x02/qa.md"): "LIST cursor does not match this request",
        _cursor(b"\x01\x01\x00\x02/pa.md"): "LIST cursor does not match this request",
        "A" * 11000: "LIST cursor exceeds limit",
    }
    for value, message in cases.items():
        assert await ask(d, "LIST", "/p", {"cursor": value}) == error("bad-request", message)


async def test_list_cursor_naming_a_name_that_is_not_utf8(content: Content) -> None:
    """Names are bytes to the reference, so a cursor may carry any byte after its path: 0xff
    sorts after every UTF-8 name, which leaves an empty last page (not an internal error)."""
    await put(content, "/docs/a.md", b"x")
    d = dispatcher(content)
    got = await ask(d, "LIST", "/docs", {"cursor": "AQAABS9kb2Nz_w"})
    assert got.status == "ok"
    assert (got.meta["entries"], got.meta["complete"]) == ("0", "true")
    assert bodies.parse_index(got.body) == []
    before = _cursor(b"\x01\x00\x00\x05/docs" + b"a-\xff")  # sorts before a.md
    got = await ask(d, "LIST", "/docs", {"cursor": before})
    assert [entry.name for entry in bodies.parse_index(got.body)] == ["a.md"]


async def test_list_parameter_errors(content: Content) -> None:
    d = dispatcher(content)
    size = error("bad-request", "page-size must be between 1 and 1000")
    for bad in ("0", "1001", "abc", "1.5", " 5"):
        assert await ask(d, "LIST", "/", {"page-size": bad}) == size
    flag = error("bad-request", "include-archived must be true or false")
    for bad in ("yes", "TRUE", "1"):
        assert await ask(d, "LIST", "/", {"include-archived": bad}) == flag
    assert (await ask(d, "LIST", "/", {"page-size": "+1000"})).status == "ok"


async def test_list_checks_auth_then_keys_then_existence(content: Content) -> None:
    await put(content, "/secret/a.md", b"a")
    d = dispatcher(content, grants())
    # The reference's order: read auth, hash path, include-archived, page-size, cursor, existence.
    denied = await ask(d, "LIST", "/secret", {"page-size": "0", "include-archived": "x"})
    assert denied.status == "unauthorized"
    both = await ask(d, "LIST", "/nowhere", {"page-size": "0", "include-archived": "x"})
    assert both == error("bad-request", "include-archived must be true or false")
    size = await ask(d, "LIST", "/nowhere", {"page-size": "0", "cursor": "!"})
    assert size == error("bad-request", "page-size must be between 1 and 1000")
    bad_cursor = await ask(d, "LIST", "/nowhere", {"cursor": "AQAABS9kb2NzYS5tZA"})
    assert bad_cursor == error("bad-request", "LIST cursor does not match this request")


async def test_list_not_found(content: Content) -> None:
    doc = await put(content, "/docs/a.md", b"a")
    d = dispatcher(content)
    assert await ask(d, "LIST", "/nowhere") == error("not-found", "/nowhere not found")
    assert await ask(d, "LIST", "/docs/a.md") == error("not-found", "/docs/a.md not found")
    hashed = "/" + doc.content_hash
    assert await ask(d, "LIST", hashed) == error("not-found", f"{hashed} not found")


async def test_list_omits_unreadable_entries_without_counting_them(content: Content) -> None:
    for name in ("a.md", "b.md", "c.md"):
        await put(content, f"/mix/{name}", b"x")
    await put(content, "/mix/hid/d.md", b"x")
    auth = grants(Grant("b", hash_token("b"), ("/mix/b.md", "/mix/hid/**"), frozenset({"read"})))
    d = dispatcher(content, auth)
    got = await ask(d, "LIST", "/mix", {"page-size": "2"})
    assert got.meta == {"entries": "2", "complete": "true"}
    assert [e.name for e in bodies.parse_index(got.body)] == ["a.md", "c.md"]
    full = await ask(d, "LIST", "/mix", {"auth": "b"})
    assert [e.name for e in bodies.parse_index(full.body)] == ["a.md", "b.md", "c.md", "hid"]


async def test_list_stops_before_one_mebibyte(tmp_path: Path) -> None:
    long = "*" * 249  # escaped as \* in the label and %2A in the link: ~1.25 KB a line
    root = lay_out(tmp_path / "root", [f"/wide/{n:03d}{long}.md" for n in range(1000)])
    with opened(root) as content:
        d = dispatcher(content)
        got = await ask(d, "LIST", "/wide")
        count = int(got.meta["entries"])
        assert 0 < count < 1000 and got.meta["complete"] == "false"
        assert len(got.body) <= MAX_BODY
        line = bodies.index_line(bodies.IndexEntry(f"{count:03d}{long}.md", False))
        assert len(got.body) + len(line) > MAX_BODY
        rest = await ask(d, "LIST", "/wide", {"cursor": got.meta["next-cursor"]})
    assert bodies.parse_index(rest.body)[0].name == f"{count:03d}{long}.md"
    assert rest.meta["entries"] == str(1000 - count) and rest.meta["complete"] == "true"


# -- VERSIONS --------------------------------------------------------------------------------------


async def test_versions(content: Content) -> None:
    for n in range(1, 4):
        await content.publish("/docs/a b.md", f"v{n}".encode(), {}, n - 1)
    await content.set_archived("/docs/a b.md", True)
    got = await ask(dispatcher(content), "VERSIONS", "/docs/a b.md")
    assert got.meta == {"total": "3", "current": "3", "chain-valid": "true"}
    assert [e.version for e in bodies.parse_history(got.body)] == [3, 2, 1]
    assert b"(%2Fdocs%2Fa%20b.md/v3)" in got.body


async def test_versions_not_found(content: Content) -> None:
    doc = await put(content, "/a.md", b"a")
    d = dispatcher(content)
    assert await ask(d, "VERSIONS", "/b.md") == error("not-found", "/b.md not found")
    assert await ask(d, "VERSIONS", "/") == error("not-found", "/ not found")
    hashed = "/" + doc.content_hash
    assert await ask(d, "VERSIONS", hashed) == error("not-found", f"{hashed} not found")


async def test_versions_broken_chain(content: Content, tmp_path: Path) -> None:
    for n in range(1, 3):
        await content.publish("/a.md", f"v{n}".encode(), {}, n - 1)
    v1 = tmp_path / "versions/a.md/v1"
    v1.write_bytes(v1.read_bytes() + b"tampered")
    got = await ask(dispatcher(content), "VERSIONS", "/a.md")
    assert got.meta["chain-valid"] == "false"
    assert got.meta["chain-error"] == "chain integrity check failed"


async def test_versions_verifies_a_chain_once_and_off_the_event_loop(
    content: Content, tmp_path: Path
) -> None:
    for n in range(1, 4):
        await content.publish("/c.md", f"v{n}".encode(), {}, n - 1)
    d = dispatcher(content)
    first = d.handle(b"VERSIONS /c.md\n", PEER)
    assert inspect.isawaitable(first)  # the version files are read on the reader thread
    assert wire.parse_response(await first).meta["chain-valid"] == "true"
    # Tampered with behind the server's back, mtime kept: the verdict on this exact history
    # stands, and is answered at once, without reading a version file.
    v1 = tmp_path / "versions/c.md/v1"
    stamp = v1.stat()
    v1.write_bytes(v1.read_bytes() + b"tampered")
    os.utime(v1, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    again = d.handle(b"VERSIONS /c.md\n", PEER)
    assert isinstance(again, bytes) and wire.parse_response(again).meta["chain-valid"] == "true"
    # Any new version makes a new history, verified afresh.
    await content.publish("/c.md", b"v4", {}, 3)
    got = await ask(d, "VERSIONS", "/c.md")
    assert (got.meta["total"], got.meta["chain-valid"]) == ("4", "false")


# -- helpers ---------------------------------------------------------------------------------------


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def lay_out(root: Path, docs: Sequence[str]) -> Path:
    """A content root holding ``docs`` (one version each), written in the store format directly:
    quicker than a thousand fsynced publishes, and the bytes are the same."""
    for path in docs:
        folder, name = (root / path.lstrip("/")).parent, path.rsplit("/", 1)[1]
        (folder / "versions" / name).mkdir(parents=True, exist_ok=True)
        (folder / "versions" / name / "v1").write_bytes(storefmt.emit_version(1, None, {}, b"x"))
        os.symlink(f"versions/{name}/v1", folder / name)
    return root


@contextmanager
def opened(root: Path) -> Iterator[Content]:
    content = Content.open(root)
    try:
        yield content
    finally:
        content.close()
