"""The request pipeline (SPEC §4): parse failures, ``..``, canonical paths, health, the write gate
in its exact order, rate limiting, the sync/async split, logging, and faults that must never
escape as anything but ``internal error``."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from support.exchange import PEER, ask, error, send

from markproto.protocol import wire
from markproto.protocol.errors import MalformedRequest
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.protocol.limits import MAX_BODY, MAX_REQUEST_LINE
from markproto.server import dispatch
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content

WRITER = "writer-token"
HASH = "sha256-" + "ab" * 32
WRITES = {"PUBLISH": "publishing", "APPEND": "appending", "ARCHIVE": "archiving"}


@pytest.fixture
def content(tmp_path: Path) -> Iterator[Content]:
    served = Content.open(tmp_path)
    yield served
    served.close()


def grants() -> Grants:
    past = datetime.now(UTC) - timedelta(seconds=1)
    return Grants(
        [
            Grant("writer", hash_token(WRITER), ("/docs/**",), frozenset({"publish"})),
            Grant("reader", hash_token("reader"), ("/**",), frozenset({"read"})),
            Grant("old", hash_token("old"), ("/**",), frozenset({"publish"}), past),
        ]
    )


# -- parse failures --------------------------------------------------------------------------------


async def test_grammar_errors_are_bad_request(content: Content) -> None:
    d = Dispatcher(Context(content))
    for data in (b"BOGUS /x\n", b"fetch /x\n", b"FETCH x\n", b"FETCH\n", b"FETCH /a\n---\nx: y\n"):
        assert await send(d, data) == error("bad-request", "bad request"), data


async def test_size_and_read_errors_are_server_error(content: Content) -> None:
    d = Dispatcher(Context(content))
    long_line = b"FETCH /" + b"a" * MAX_REQUEST_LINE + b"\n"
    for data in (b"", long_line):
        got = await send(d, data)
        assert got == error("server-error", "could not read request")
        assert got.body == b"\n# Server error\n\ncould not read request\n"


# -- paths and health ------------------------------------------------------------------------------


async def test_dotdot_is_not_found_before_auth(content: Content) -> None:
    d = Dispatcher(Context(content, grants=grants()))  # every read is protected
    for raw in ("/docs/../secret.md", "/..", "/a/../../b"):
        for verb in ("FETCH", "LIST", "PUBLISH"):
            assert await ask(d, verb, raw) == error("not-found", f"{raw} not found")


async def test_encoded_dotdot_stays_a_literal_name(content: Content) -> None:
    d = Dispatcher(Context(content))
    raw = "/docs/%2e%2e/x.md"
    assert await ask(d, "FETCH", raw) == error("not-found", f"{raw} not found")


async def test_messages_use_the_canonical_path(content: Content) -> None:
    d = Dispatcher(Context(content))
    assert await ask(d, "FETCH", "//a/./b.md") == error("not-found", "/a/b.md not found")


async def test_health_comes_before_auth(content: Content) -> None:
    d = Dispatcher(Context(content, grants=grants()))
    health = b"---\nstatus: ok\n---\n# Health Check\n\nServer is healthy.\n"
    assert d.handle(b"FETCH /health\n", PEER) == health
    assert d.handle(b"FETCH //health/\n", PEER) == health
    assert (await ask(d, "LIST", "/health")).status == "unauthorized"


# -- the write gate --------------------------------------------------------------------------------


async def test_write_gate_order(content: Content) -> None:
    big = b"x" * (MAX_BODY + 1)
    read_only = Dispatcher(Context(content, grants=grants(), read_only=True))
    no_store = Dispatcher(Context(content))
    guarded = Dispatcher(Context(content, grants=grants()))
    for verb, activity in WRITES.items():
        oversize_hash = wire.Request(verb, "/" + HASH, {"auth": WRITER}, big)
        got = read_only.respond(oversize_hash)
        assert got == wire.error_response("not-permitted", "server is read-only")
        got = no_store.respond(oversize_hash)
        assert got == wire.error_response(
            "bad-request", "paths matching /sha256-<hash> are reserved"
        )
        got = no_store.respond(wire.Request(verb, "/docs/a.md", {}, big))
        assert got == wire.error_response("server-error", "content exceeds size limit")
        assert await ask(no_store, verb, "/docs/a.md", {"auth": WRITER}) == error(
            "not-permitted", f"{activity} requires auth configuration"
        )
        unauthorized = error("unauthorized", "authentication required")
        for token in ({}, {"auth": ""}, {"auth": "nope"}, {"auth": "old"}):
            assert await ask(guarded, verb, "/docs/a.md", token) == unauthorized
        forbidden = error("not-permitted", "insufficient permissions")
        assert await ask(guarded, verb, "/other/a.md", {"auth": WRITER}) == forbidden
        assert await ask(guarded, verb, "/docs/a.md", {"auth": "reader"}) == forbidden


async def test_an_unserved_verb_never_reaches_a_handler(content: Content) -> None:
    """An unknown verb is a grammar error on the wire, and no Request can carry it; WATCH on a
    server configured without it is a verb without a handler."""
    d = Dispatcher(Context(content))
    assert await send(d, b"WAIT /\n") == error("bad-request", "bad request")
    with pytest.raises(MalformedRequest):
        wire.Request("WAIT", "/", {}, b"")
    assert await send(d, b"WATCH /\n") == error("bad-request", "unsupported verb: WATCH")


# -- sync and async, logging ----------------------------------------------------------------------


async def test_reads_are_synchronous_and_writes_awaitable(content: Content) -> None:
    d = Dispatcher(Context(content, grants=grants()))
    assert isinstance(d.handle(b"FETCH /docs/a.md\n", PEER), bytes)
    publish = b"PUBLISH /docs/a.md\n---\nauth: writer-token\n---\nhello\n"
    pending = d.handle(publish, PEER)
    assert inspect.isawaitable(pending)
    response = wire.parse_response(await pending)
    assert response.status == "created" and response.meta["version"] == "1"
    assert isinstance(d.handle(b"PUBLISH /docs/a.md\n", PEER), bytes)  # refused at the gate


async def test_every_request_is_logged(content: Content, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str, str, str]] = []

    def record(verb: str, path: str, status: str, duration_ms: float, peer_ip: str) -> None:
        assert duration_ms >= 0
        seen.append((verb, path, status, peer_ip))

    monkeypatch.setattr(dispatch, "log_request", record)
    d = Dispatcher(Context(content, grants=grants()))
    await send(d, b"FETCH /docs//a.md\n")
    await send(d, b"FETCH /x/../y\n")
    await send(d, b"nonsense\n")
    await send(d, b"PUBLISH /docs/a.md\n---\nauth: writer-token\n---\nhi\n")
    assert seen == [
        ("FETCH", "/docs/a.md", "unauthorized", PEER.host),
        ("FETCH", "/x/../y", "not-found", PEER.host),
        ("", "", "bad-request", PEER.host),
        ("PUBLISH", "/docs/a.md", "created", PEER.host),
    ]


# -- faults ----------------------------------------------------------------------------------------


async def test_a_failing_read_is_an_internal_error(
    content: Content, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await content.publish("/a.md", b"a", {}, None)
    (tmp_path / "versions/a.md/v1").write_bytes(b"---\n---\n" + b"a" * (2 << 20))  # on fire
    d = Dispatcher(Context(content))
    with caplog.at_level(logging.ERROR, logger="markproto.server.dispatch"):
        got = await send(d, b"FETCH /a.md\n")
    assert got == error("server-error", "internal error")
    assert b"version" not in got.body
    assert any(r.exc_info and "/a.md" in str(r.exc_info[1]) for r in caplog.records)


async def test_a_failing_write_is_an_internal_error(
    content: Content, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(fd: int) -> None:
        raise OSError("the disk fell off")

    monkeypatch.setattr(os, "fsync", broken)
    d = Dispatcher(Context(content, grants=grants()))
    with caplog.at_level(logging.ERROR, logger="markproto.server.dispatch"):
        got = await ask(d, "PUBLISH", "/docs/a.md", {"auth": WRITER}, b"x")
    assert got == error("server-error", "internal error")
    assert any(r.exc_info for r in caplog.records)


_FUZZ_KEYS = (
    "auth",
    "page-size",
    "include-archived",
    "cursor",
    "if-none-match",
    "if-modified-since",
    "expected-version",
    "query",
    "limit",
    "match",
    "title",
    "tags",
    "version",
)
_FUZZ_VALUES = hs.one_of(
    hs.sampled_from([WRITER, "reader", "", "0", "1", "2", "true", "body", "AQAABS9kb2NzYS5tZA"]),
    hs.text(max_size=12),
)
_FUZZ_PATH = hs.lists(
    hs.sampled_from(["docs", "a.md", "b.md", "..", ".", "", "v1", "v+2", HASH, "index.md", "x y"])
    | hs.text(max_size=6),
    max_size=4,
).flatmap(lambda parts: hs.sampled_from(["/" + "/".join(parts), "/" + "/".join(parts) + ".md"]))


def _fuzz_bytes(verb: str, path: str, meta: dict[str, str], body: bytes) -> bytes:
    """A request line with any path (a Request cannot carry an invalid one, the wire can), then
    the metadata and body as a client writes them."""
    rest = wire.emit_request(wire.Request(verb, "/", meta, body)).partition(b"\n")[2]
    return f"{verb} {path}\n".encode("utf-8", "surrogateescape") + rest


_FUZZ_REQUEST = hs.builds(
    lambda verb, path, meta, auth, body: _fuzz_bytes(verb, path, meta | auth, body),
    hs.sampled_from(sorted(wire.VERBS)),
    _FUZZ_PATH,
    hs.dictionaries(hs.sampled_from(_FUZZ_KEYS), _FUZZ_VALUES, max_size=4),
    hs.sampled_from([{}, {"auth": WRITER}, {"auth": "reader"}]),
    hs.binary(max_size=40),
)


@pytest.fixture(scope="module")
def fuzz_dispatcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dispatcher]:
    """A guarded server with a document, so fuzzed requests reach every handler, writes too."""
    lookup = Lookup()
    content = Content.open(tmp_path_factory.mktemp("fuzz"), [lookup])
    auth = Grants(
        [
            Grant("writer", hash_token(WRITER), ("/**",), frozenset({"publish"})),
            Grant("reader", hash_token("reader"), ("/docs/b.md",), frozenset({"read"})),
        ]
    )
    d = Dispatcher(Context(content, lookup=lookup, grants=auth))
    seed = b"PUBLISH /docs/a.md\n---\nauth: writer-token\n---\n# A\n"
    asyncio.run(_wait(d.handle(seed, PEER)))
    yield d
    content.close()


@settings(max_examples=400, deadline=None)
@given(data=hs.one_of(hs.binary(max_size=300), _FUZZ_REQUEST))
def test_any_bytes_get_a_parseable_response(fuzz_dispatcher: Dispatcher, data: bytes) -> None:
    out = fuzz_dispatcher.handle(data, PEER)
    if not isinstance(out, bytes):
        out = asyncio.run(_wait(out))
    response = wire.parse_response(out)
    assert response.status and b"internal error" not in response.body


async def _wait(pending: object) -> bytes:
    assert inspect.isawaitable(pending)
    result = await pending
    assert isinstance(result, bytes)
    return result
