"""WATCH over real QUIC (SPEC §5.8): hints for every kind of change, exact resumes, a restart's
resync, auth filtering and revocation, the drain's ``closing``, limits, heartbeats past the request
timeout, and a fuzz of WATCH requests; through the library (`Client.watch`, `Client.changes`,
`SyncClient.watch`) and, where the exact blocks matter, block by block."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from support.server import WRITE_TOKEN, RunningServer, TokenSpec, running_server, write_tokens
from support.watching import RawWatch

from markproto.client import (
    Client,
    Cursor,
    Pool,
    Resync,
    StatusError,
    SyncClient,
    Tokens,
    Trust,
    WatchEvent,
)
from markproto.client.watch import Notice, Watch
from markproto.protocol import wire
from markproto.protocol.watch import Control
from markproto.server.storage.store import Store

READ_TOKEN = "test-read-token"
TOKENS = {
    "writer": TokenSpec(WRITE_TOKEN),
    "reader": TokenSpec(READ_TOKEN, paths=("/secret/**",), ops=("read",)),
}
FAST = {"watch_heartbeat": 0.2}


def client_for(server: RunningServer, token: str | None = None) -> Client:
    overrides = {server.authority: token} if token else {}
    return Client(Pool(Trust(cafile=str(server.cert))), tokens=Tokens(overrides=overrides))


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root", tokens=TOKENS, **FAST) as running:
        yield running


@pytest.fixture
async def writer(server: RunningServer) -> AsyncIterator[Client]:
    async with client_for(server, WRITE_TOKEN) as client:
        yield client


@pytest.fixture
async def watcher(server: RunningServer) -> AsyncIterator[Client]:
    async with client_for(server) as client:
        yield client


async def take(watch: Watch, n: int, timeout: float = 5.0) -> list[Notice]:
    async with asyncio.timeout(timeout):
        return [await anext(watch) for _ in range(n)]


async def quiet(watch: Watch, seconds: float = 0.5) -> bool:
    """Nothing more arrives for a while."""
    try:
        async with asyncio.timeout(seconds):
            await anext(watch)
    except TimeoutError:
        return True
    return False


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def summary(notices: list[Notice]) -> list[tuple[str, str, int]]:
    out = []
    for notice in notices:
        assert isinstance(notice, WatchEvent), notice
        out.append((notice.op, notice.path, notice.version))
    return out


async def test_hints_arrive_for_every_kind_of_change(
    server: RunningServer, writer: Client, watcher: Client
) -> None:
    base = server.url
    async with watcher.watch(f"{base}/docs/") as watch:
        await writer.publish(f"{base}/docs/a.md", b"# A\n", expected_version=0, meta={"agent": "w"})
        await writer.append(f"{base}/docs/a.md", b"more\n")
        await writer.archive(f"{base}/docs/a.md")
        await writer.publish(f"{base}/docs/a.md", b"", expected_version=None)  # unarchive
        await writer.publish(f"{base}/elsewhere.md", b"# E\n", expected_version=0)
        behind = Store(server.root)  # a sync tool, behind the server's back
        behind.publish("/docs/b.md", b"# B from disk\n", {}, 0)
        await server.app.rescan()
        behind.publish("/docs/b.md", b"# B again\n", {}, 1)
        await server.app.reload()  # SIGHUP
        notices = await take(watch, 6)
        assert summary(notices) == [
            ("publish", "/docs/a.md", 1),
            ("append", "/docs/a.md", 2),
            ("archive", "/docs/a.md", 2),
            ("publish", "/docs/a.md", 2),
            ("publish", "/docs/b.md", 1),
            ("publish", "/docs/b.md", 2),
        ]
        first, fetched = notices[0], await watcher.fetch(f"{base}/docs/a.md/v1")
        assert isinstance(first, WatchEvent) and first.agent == "w"
        assert first.hash == fetched.meta["content-hash"]
        assert [n.cursor.seq for n in notices if n.cursor] == [1, 2, 3, 4, 6, 7]
        assert await quiet(watch)


async def test_a_resume_delivers_exactly_the_missed_events(
    server: RunningServer, writer: Client, watcher: Client
) -> None:
    base = server.url
    async with watcher.watch(f"{base}/docs") as watch:
        await writer.publish(f"{base}/docs/1.md", b"1\n", expected_version=0)
        (seen,) = await take(watch, 1)
        cursor = watch.cursor
    assert isinstance(seen, WatchEvent) and cursor == seen.cursor
    for name in ("2", "3"):
        await writer.publish(f"{base}/docs/{name}.md", b"x\n", expected_version=0)
        await writer.publish(f"{base}/other/{name}.md", b"x\n", expected_version=0)
    changes = await watcher.changes(f"{base}/docs", since=cursor)
    assert summary(list(changes.events)) == [
        ("publish", "/docs/2.md", 1),
        ("publish", "/docs/3.md", 1),
    ]
    assert changes.complete and not changes.resync and changes.cursor == Cursor(cursor.epoch, 5)
    async with watcher.watch(f"{base}/docs", since=str(cursor)) as watch:
        missed = await take(watch, 2)
        assert summary(missed) == [("publish", "/docs/2.md", 1), ("publish", "/docs/3.md", 1)]
        await writer.publish(f"{base}/docs/4.md", b"x\n", expected_version=0)
        assert summary(await take(watch, 1)) == [("publish", "/docs/4.md", 1)]
        assert await quiet(watch)
    fresh = await watcher.changes(f"{base}/docs")
    assert fresh.events == () and fresh.cursor == Cursor(cursor.epoch, 6)


async def test_a_restart_gives_resync_and_the_watch_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with running_server(root, tokens=TOKENS, **FAST) as first:
        port = first.port
        async with client_for(first, WRITE_TOKEN) as writer:
            await writer.publish(f"{first.url}/a.md", b"1\n", expected_version=0)
        async with client_for(first) as reader:
            old = (await reader.changes(f"{first.url}/")).cursor
        reader = client_for(first)
        watch = await reader.watch(f"{first.url}/", since=old).start()
        await writer_publish(first, "/b.md")
        assert summary(await take(watch, 1)) == [("publish", "/b.md", 1)]
        await first.app.stop(timeout=2.0)  # the watch hears `closing` and keeps trying
    async with running_server(root, tokens=TOKENS, port=port, **FAST) as second:
        (resync,) = await take(watch, 1, timeout=20)
        assert isinstance(resync, Resync) and resync.cursor is not None
        assert old is not None and resync.cursor.epoch != old.epoch
        await writer_publish(second, "/c.md")
        assert summary(await take(watch, 1)) == [("publish", "/c.md", 1)]
        await watch.aclose()
        await reader.close()
        async with client_for(second) as late:
            stale = await late.changes(f"{second.url}/", since=old)
        assert stale.resync and stale.events == ()


async def writer_publish(server: RunningServer, path: str) -> None:
    async with client_for(server, WRITE_TOKEN) as writer:
        assert (await writer.publish(f"{server.url}{path}", b"x\n", expected_version=0)).ok


async def test_subscribers_see_only_what_they_may_read_and_revocation_ends_them(
    server: RunningServer, writer: Client, watcher: Client
) -> None:
    base = server.url
    async with client_for(server, READ_TOKEN) as reader:
        anonymous = await watcher.watch(f"{base}/").start()
        secret = await reader.watch(f"{base}/secret").start()
        everything = await reader.watch(f"{base}/").start()
        await writer.publish(f"{base}/secret/s.md", b"s\n", expected_version=0)
        await writer.publish(f"{base}/public.md", b"p\n", expected_version=0)
        assert summary(await take(anonymous, 1)) == [("publish", "/public.md", 1)]
        assert summary(await take(secret, 1)) == [("publish", "/secret/s.md", 1)]
        assert [n.path for n in await take(everything, 2)] == ["/secret/s.md", "/public.md"]  # type: ignore[union-attr]
        with pytest.raises(StatusError) as refused:
            await watcher.watch(f"{base}/secret").start()
        assert refused.value.status == "unauthorized"

        assert server.tokens_file is not None
        write_tokens(server.tokens_file, {"writer": TOKENS["writer"]})  # the reader is revoked
        await server.app.reload()
        for revoked in (secret, everything):
            with pytest.raises(StatusError) as ended:
                await take(revoked, 1)
            assert ended.value.status == "unauthorized"
        await writer.publish(f"{base}/public2.md", b"p\n", expected_version=0)
        assert summary(await take(anonymous, 1)) == [("publish", "/public2.md", 1)]
        await anonymous.aclose()


async def test_the_drain_ends_every_subscription_with_closing(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "root", tokens=TOKENS) as server,
        client_for(server) as client,
    ):
        streams = [await RawWatch.open(client.pool, server.authority, p) for p in ("/", "/a")]
        for raw in streams:
            ack = await raw.next()
            assert isinstance(ack, Control) and ack.status == "ok"
        assert server.app.server is not None
        assert server.app.server.usage().streaming == 2
        drained = asyncio.create_task(server.app.stop(timeout=5.0))
        for raw in streams:
            closing = await raw.next()
            assert isinstance(closing, Control) and closing.status == "closing"
            assert closing.cursor is not None and closing.cursor.seq == 0
            assert await raw.ended()
        assert await drained  # every stream finished and acknowledged in time


async def test_subscriptions_are_limited_per_connection_and_in_all(tmp_path: Path) -> None:
    limits = {"watch_connection_limit": 2, "watch_limit": 3}
    async with (
        running_server(tmp_path / "root", tokens=TOKENS, **limits) as server,
        client_for(server) as one,
        client_for(server) as two,
    ):
        a = [await RawWatch.open(one.pool, server.authority, "/") for _ in range(3)]
        assert [getattr(await raw.next(), "status", None) for raw in a[:2]] == ["ok", "ok"]
        assert await a[2].next() == wire.error_response(
            "rate-limited", "too many subscriptions on this connection"
        )
        b = [await RawWatch.open(two.pool, server.authority, "/") for _ in range(2)]
        assert getattr(await b[0].next(), "status", None) == "ok"
        assert await b[1].next() == wire.error_response(
            "rate-limited", "too many subscriptions on this server"
        )
        a[0].close()  # STOP_SENDING: the server forgets it and the slot is free again
        assert server.app.watch is not None
        await eventually(lambda: len(server.app.watch) == 2)  # type: ignore[arg-type]
        again = await RawWatch.open(two.pool, server.authority, "/")
        assert getattr(await again.next(), "status", None) == "ok"
        assert (await one.fetch(f"{server.url}/health")).ok  # requests still have streams


async def test_a_watch_outlives_the_request_timeout_on_heartbeats(tmp_path: Path) -> None:
    settings = {"request_timeout": 0.3, "watch_heartbeat": 0.2}
    async with (
        running_server(tmp_path / "root", tokens=TOKENS, **settings) as server,
        client_for(server) as client,
    ):
        raw = await RawWatch.open(client.pool, server.authority, "/docs")
        blocks = [await raw.next() for _ in range(5)]  # the acknowledgement and 4 heartbeats
        assert all(isinstance(b, Control) and b.status == "ok" for b in blocks)
        assert server.app.server is not None
        usage = server.app.server.usage()
        assert (usage.streaming, usage.running, usage.partial) == (1, 0, 0)
        raw.close()
        await eventually(lambda: server.app.server.usage().streaming == 0)  # type: ignore[union-attr]


async def test_a_server_with_watch_off_answers_as_the_reference_without_it(
    tmp_path: Path,
) -> None:
    async with (
        running_server(tmp_path / "root", tokens=TOKENS, watch_limit=0) as server,
        client_for(server) as client,
    ):
        with pytest.raises(StatusError) as refused:
            await anext(client.watch(f"{server.url}/"))
        assert refused.value.status == "bad-request"
        assert refused.value.message == "unsupported verb: WATCH"
        manifest = (await client.manifest(server.url)).body
        assert b"- watch" not in manifest  # not seeded here: a test root is not first-run


async def test_the_blocking_client_watches_too(server: RunningServer, writer: Client) -> None:
    def follow() -> list[Notice]:
        with SyncClient(client_for(server)) as sync, sync.watch(f"{server.url}/") as watch:
            return [next(watch), next(watch)]

    job = asyncio.create_task(asyncio.to_thread(follow))
    await asyncio.sleep(0.5)
    await writer.publish(f"{server.url}/x.md", b"x\n", expected_version=0)
    await writer.append(f"{server.url}/x.md", b"y\n")
    got = await asyncio.wait_for(job, 10)
    assert summary(got) == [("publish", "/x.md", 1), ("append", "/x.md", 2)]


async def test_fuzzed_watch_requests_are_acknowledged_or_refused(
    server: RunningServer, writer: Client, watcher: Client
) -> None:
    await writer.publish(f"{server.url}/docs/a.md", b"a\n", expected_version=0)
    epoch = (await watcher.changes(f"{server.url}/")).cursor
    assert epoch is not None
    rng = random.Random(16)
    sinces = [
        "",
        "x",
        "a:b",
        ":1",
        f"{epoch.epoch}:0",
        f"{epoch.epoch}:1",
        f"{epoch.epoch}:99",
        "z:1",
    ]
    paths = ["/", "/docs", "/docs/", "/docs/a.md", "/secret", "/nowhere/x", "/a b", "/%2e%2e"]
    statuses: set[str] = set()
    for _ in range(60):
        meta = {"since": rng.choice(sinces)}
        if rng.random() < 0.5:
            meta["auth"] = rng.choice([READ_TOKEN, "bogus", ""])
        meta[rng.choice(["x", "page-size", "query"])] = "1"
        raw = await RawWatch.open(watcher.pool, server.authority, rng.choice(paths), meta)
        first = await raw.next()
        assert first is not None
        status = first.status
        assert status in {
            "ok",
            "resync",
            "bad-request",
            "unauthorized",
            "not-permitted",
            "not-found",
        }
        statuses.add(status)
        raw.close()
    assert {"ok", "resync", "bad-request", "unauthorized"} <= statuses
    assert (await watcher.fetch(f"{server.url}/docs/a.md")).ok
