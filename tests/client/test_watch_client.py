"""`Client.watch` keeping its promises against a real server: a slow caller costs bounded memory
and still gets every event once, in order; a silent stream is replaced and resumed without a
gap or a repeat; arguments are checked before anything is sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.server import WRITE_TOKEN, RunningServer, running_server

from markproto.client import Client, MarkError, Pool, Tokens, Trust, UsageError, WatchEvent
from markproto.client import watch as watching


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root") as running:
        yield running


def client_for(server: RunningServer, token: str | None = None) -> Client:
    overrides = {server.authority: token} if token else {}
    return Client(Pool(Trust(cafile=str(server.cert))), tokens=Tokens(overrides=overrides))


async def test_a_slow_caller_gets_every_event_once_in_order(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watching, "MAX_PENDING", 3)  # the stream is dropped past 3 untaken
    async with client_for(server, WRITE_TOKEN) as writer, client_for(server) as reader:
        async with reader.watch(f"{server.url}/") as watch:
            for n in range(12):
                await writer.publish(f"{server.url}/d{n}.md", b"x\n", expected_version=0)
            await asyncio.sleep(0.3)  # everything has arrived; the caller has taken nothing
            got = []
            async with asyncio.timeout(10):
                while len(got) < 12:
                    notice = await anext(watch)
                    assert isinstance(notice, WatchEvent)
                    got.append(notice.path)
        assert got == [f"/d{n}.md" for n in range(12)]


async def test_a_silent_stream_is_replaced_without_a_gap(server: RunningServer) -> None:
    reasons: list[MarkError] = []
    async with client_for(server, WRITE_TOKEN) as writer, client_for(server) as reader:
        watch = reader.watch(f"{server.url}/", stall_timeout=0.3, on_reconnect=reasons.append)
        async with watch:
            await writer.publish(f"{server.url}/a.md", b"x\n", expected_version=0)
            first = await asyncio.wait_for(anext(watch), 5)
            waiting = asyncio.ensure_future(anext(watch))
            await asyncio.sleep(0.8)  # silent past the stall timeout: a new stream from the cursor
            await writer.publish(f"{server.url}/b.md", b"x\n", expected_version=0)
            second = await asyncio.wait_for(waiting, 5)
    assert [getattr(n, "path", None) for n in (first, second)] == ["/a.md", "/b.md"]
    assert reasons and "no WATCH block" in str(reasons[0])
    assert watch.cursor is not None and watch.cursor.seq == 2


async def test_arguments_are_checked_before_anything_is_sent(server: RunningServer) -> None:
    async with client_for(server) as reader:
        with pytest.raises(UsageError, match="not a WATCH cursor"):
            reader.watch(f"{server.url}/", since="yesterday")
        with pytest.raises(UsageError, match="limit"):
            await reader.changes(f"{server.url}/", limit=0)


async def test_a_watch_on_an_unreachable_server_fails_at_once(tmp_path: Path) -> None:
    async with running_server(tmp_path / "root") as gone:
        url, cert = gone.url, gone.cert
    async with Client(Pool(Trust(cafile=str(cert)), dial_timeout=0.5)) as reader:
        with pytest.raises(MarkError):
            await reader.watch(f"{url}/").start()
