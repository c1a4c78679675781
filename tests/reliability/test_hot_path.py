"""The two changes the wire benchmark asked for on the FETCH hot path (server/dispatch.py and
server/responses.py): the request log's cost policy, and a current version's response built and
encoded once, in the dispatcher's cache. Both must be invisible on the wire and in what an
operator can learn."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.exchange import PEER, publish

from markproto.protocol import wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.responses import ResponseCache, document
from markproto.server.storage.content import Content

WRITE = b"PUBLISH /a.md\n---\nauth: w\n---\n# A\n"


def dispatcher_for(root: Path, cache: ResponseCache | None = None) -> Dispatcher:
    grants = Grants([Grant("w", hash_token("w"), ("/**",), frozenset({"publish"}))])
    return Dispatcher(Context(Content.open(root), grants=grants), cache=cache)


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[Dispatcher]:
    d = dispatcher_for(tmp_path)
    yield d
    d.ctx.content.close()


async def write(d: Dispatcher, path: str, body: bytes) -> None:
    assert (await publish(d, path, body, {"auth": "w"})).status == "created"


def fetched(d: Dispatcher, path: str) -> bytes:
    data = d.handle(f"FETCH {path}\n".encode(), PEER)
    assert isinstance(data, bytes)
    return data


# -- request log ------------------------------------------------------------------------------


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, object]]]:
    keep = ("verb", "path", "status", "fetch", "list")
    return [
        (r.getMessage(), {k: getattr(r, k) for k in keep if hasattr(r, k)})
        for r in caplog.records
        if r.name == "markproto.request"
    ]


async def test_at_info_successful_reads_are_summarized_and_the_rest_logged(
    dispatcher: Dispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="markproto.request")
    await write(dispatcher, "/a.md", b"# A\n")
    for _ in range(3):
        fetched(dispatcher, "/a.md")
    dispatcher.handle(b"LIST /\n", PEER)
    dispatcher.handle(b"FETCH /missing.md\n", PEER)
    dispatcher.handle(b"FETCH /a.md\n---\nif-none-match: nope\n---\n", PEER)
    assert records(caplog) == [
        ("request", {"verb": "PUBLISH", "path": "/a.md", "status": "created"}),
        ("request", {"verb": "FETCH", "path": "/missing.md", "status": "not-found"}),
    ]
    caplog.clear()
    dispatcher.log_summary()
    assert records(caplog) == [("reads served", {"fetch": 4, "list": 1})]
    caplog.clear()
    dispatcher.log_summary()  # nothing served since: nothing to say
    assert records(caplog) == []


async def test_at_debug_every_request_is_logged(
    dispatcher: Dispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="markproto.request")
    dispatcher.handle(b"FETCH /health\n", PEER)
    dispatcher.handle(b"LIST /\n", PEER)
    assert [r[1]["status"] for r in records(caplog)] == ["ok", "ok"]
    caplog.clear()
    dispatcher.log_summary()
    assert records(caplog) == []


# -- FETCH response reuse -----------------------------------------------------------------------


async def test_a_reused_response_is_the_fresh_one_and_follows_new_versions(
    dispatcher: Dispatcher,
) -> None:
    await write(dispatcher, "/a.md", b"# A\n\none\n")
    first = fetched(dispatcher, "/a.md")
    assert fetched(dispatcher, "/a.md") == first
    current = dispatcher.ctx.content.current("/a.md")
    assert current is not None
    doc = dispatcher.ctx.content.read(current)
    assert doc is not None
    assert first == wire.emit_response(document(doc))  # what encoding afresh gives
    await write(dispatcher, "/a.md", b"# A\n\ntwo\n")
    second = wire.parse_response(fetched(dispatcher, "/a.md"))
    assert (second.meta["version"], second.body) == ("2", b"# A\n\ntwo\n")


async def test_equal_versions_of_two_documents_keep_their_own_modified_time(
    tmp_path: Path,
) -> None:
    d = dispatcher_for(tmp_path)
    await write(d, "/a.md", b"# Same\n")
    await write(d, "/b.md", b"# Same\n")
    d.ctx.content.close()
    os.utime(tmp_path / "b.md", (1_000_000_000, 1_000_000_000), follow_symlinks=True)
    d = dispatcher_for(tmp_path)  # a fresh snapshot reads the new mtime
    a, b = (wire.parse_response(fetched(d, p)) for p in ("/a.md", "/b.md"))
    d.ctx.content.close()
    assert a.meta["etag"] == b.meta["etag"]  # the same version file bytes...
    assert b.meta["modified"] == "2001-09-09T01:46:40Z" != a.meta["modified"]  # ...other times


async def test_small_responses_are_reused_and_large_ones_encoded_afresh(
    dispatcher: Dispatcher,
) -> None:
    await write(dispatcher, "/a.md", b"# A\n")
    await write(dispatcher, "/big.md", b"# Big\n\n" + b"x" * (100 << 10) + b"\n")
    small = fetched(dispatcher, "/a.md")
    assert fetched(dispatcher, "/a.md") == small
    assert (len(dispatcher.cache), dispatcher.cache.size) == (1, len(small))
    big = fetched(dispatcher, "/big.md")
    assert fetched(dispatcher, "/big.md") == big
    assert wire.parse_response(big).body.startswith(b"# Big\n")
    assert (len(dispatcher.cache), dispatcher.cache.size) == (1, len(small))  # not kept


async def test_reused_responses_stay_within_their_byte_budget(tmp_path: Path) -> None:
    d = dispatcher_for(tmp_path, ResponseCache(max_bytes=4000))
    try:
        for i in range(20):
            await write(d, f"/d{i}.md", f"# D{i}\n\n".encode() + b"y" * 500)
        for _ in range(2):
            for i in range(20):
                assert wire.parse_response(fetched(d, f"/d{i}.md")).body.startswith(
                    f"# D{i}\n".encode()
                )
        assert 0 < d.cache.size <= 4000
        assert 0 < len(d.cache) <= 5
    finally:
        d.ctx.content.close()
