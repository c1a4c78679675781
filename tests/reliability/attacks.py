"""Hostile clients and the well-behaved one they must not hurt, shared by the quick tests
(tests/reliability/test_hostile.py: each attack until it reached its outcome) and the bench
(tests/bench/bench_hostile.py: each one, and all at once, for a fixed time): the same code at two
sizes.

Every attack runs from its own loopback address (any 127.x.y.z is loopback on Linux), so the
server's per-address rate and byte budget tell the attackers apart from each other and from the
well-behaved client on `HONEST_SOURCE`. An attack ends when its ``done`` says so (`lasting` a
time, or `reaching` an outcome), and returns how each of its streams or connections ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from reliability.workloads import LoadReport
from support.quicclient import QuicClient, StreamResetError, connect

from markproto.protocol import wire

Done = Callable[[Counter[str]], bool]
"""Asked with the outcomes so far: has the attack gone on long enough?"""

HONEST_SOURCE = "127.0.0.2"
SOURCES = {
    "flood": "127.0.0.1",
    "oversized": "127.0.0.3",
    "unused": "127.0.0.4",
    "slow": "127.0.0.5",
    "idle": "127.0.0.6",
}
HONEST_REQUEST = wire.emit_request(wire.Request("FETCH", "/load/doc1.md", {}, b""))
PARTIAL = b"PUBLISH /load/slow.md\n---\nauth: nobody\nexpected-version: 0\n"
"""A request cut short: a slow sender's first bytes."""
_POLL = 0.05


def lasting(seconds: float) -> Done:
    """Done ``seconds`` from now."""
    deadline = time.monotonic() + seconds
    return lambda _: time.monotonic() >= deadline


def reaching(goal: Callable[[Counter[str]], bool], limit: float = 60.0) -> Done:
    """Done once ``goal`` holds (or, so a broken server fails instead of hanging, after
    ``limit`` seconds: the test's assertions then say what was missing)."""
    deadline = time.monotonic() + limit
    return lambda outcomes: goal(outcomes) or time.monotonic() >= deadline


async def until(done: Done, outcomes: Counter[str]) -> None:
    while not done(outcomes):
        await asyncio.sleep(_POLL)


def ended(waiter: asyncio.Future[bytes]) -> str:
    """How the server ended a stream: a parsed status, a reset, or nothing yet."""
    if not waiter.done():
        return "no answer yet"
    if waiter.cancelled():
        return "cancelled"
    exc = waiter.exception()
    if isinstance(exc, StreamResetError):
        return "stream reset"
    if exc is not None:
        return type(exc).__name__
    return wire.parse_response(waiter.result()).status


async def exchange(client: QuicClient, request: bytes) -> str:
    """One request on a new stream, however long its answer takes: how the server ended it."""
    sid = client.open()
    client.send(sid, request)
    waiter = client._waiters[sid]
    try:
        with contextlib.suppress(StreamResetError, ConnectionError):
            await asyncio.shield(waiter)
    finally:
        if waiter.done():
            del client._waiters[sid]
    return ended(waiter)


async def dial(source: str, port: int, cert: Path) -> QuicClient:
    return await connect("127.0.0.1", port, cafile=cert, source=source)


async def honest(port: int, cert: Path, done: Done, every: float = 0.05) -> LoadReport:
    """The well-behaved client: one FETCH every ``every`` seconds (20/s by default, well under
    any sane rate), one at a time, each one's latency recorded under ``FETCH``."""
    report = LoadReport()
    client = await dial(HONEST_SOURCE, port, cert)
    outcomes: Counter[str] = Counter()
    try:
        while not done(outcomes):
            started = time.perf_counter()
            try:
                data = await client.request(HONEST_REQUEST, timeout=10.0)
            except (TimeoutError, ConnectionError, StreamResetError) as exc:
                report.errors.append(f"FETCH: {type(exc).__name__}")
                continue
            status = wire.parse_response(data).status
            report.record("FETCH", status, (time.perf_counter() - started) * 1000)
            outcomes[status] += 1
            await asyncio.sleep(every)
    finally:
        client.hang_up()
    return report


async def flood(
    port: int,
    cert: Path,
    done: Done,
    *,
    rate: float = 2000.0,
    connections: int = 4,
    streams: int = 32,
    outcomes: Counter[str] | None = None,
) -> Counter[str]:
    """One address keeping ``streams`` FETCH in flight on each of ``connections``, a new one as
    soon as one is answered, at most ``rate`` a second in all, whatever the answers say."""
    outcomes = Counter() if outcomes is None else outcomes
    clients = [await dial(SOURCES["flood"], port, cert) for _ in range(connections)]
    started, sent = time.monotonic(), itertools.count()

    async def worker(client: QuicClient) -> None:
        while True:
            wait = started + next(sent) / rate - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            outcomes[await exchange(client, HONEST_REQUEST)] += 1

    workers = [asyncio.create_task(worker(c)) for c in clients for _ in range(streams)]
    try:
        await until(done, outcomes)
    finally:
        await _stop(workers)
        for client in clients:
            outcomes["no answer yet"] += len(client._waiters)
            client.hang_up()
    return outcomes


def oversized_requests() -> list[bytes]:
    """Uploads of 1 to 2.5 MiB: a PUBLISH one byte over the body limit with 60 KiB of metadata
    (under the transport's cap, so the parser refuses it), and PUBLISH of 1.5 and 2.5 MiB (over
    the cap: refused while they arrive, and asked to stop)."""
    meta = {f"x-pad-{i}": "v" * 1000 for i in range(60)}
    head = wire.emit_request(wire.Request("PUBLISH", "/load/big.md", meta, b""))
    return [
        head + b"a" * ((1 << 20) + 1),
        b"PUBLISH /load/bigger.md\n" + b"b" * (3 << 19),
        b"PUBLISH /load/huge.md\n" + b"c" * (5 << 19),
    ]


async def oversized(
    port: int,
    cert: Path,
    done: Done,
    *,
    connections: int = 2,
    outcomes: Counter[str] | None = None,
) -> Counter[str]:
    """``connections`` connections sending oversized uploads back to back, each waiting for its
    answer (or reset) before the next."""
    outcomes = Counter() if outcomes is None else outcomes
    requests = oversized_requests()
    clients = [await dial(SOURCES["oversized"], port, cert) for _ in range(connections)]

    async def uploader(client: QuicClient, first: int) -> None:
        for i in itertools.count(first):
            outcomes[await exchange(client, requests[i % len(requests)])] += 1

    workers = [asyncio.create_task(uploader(c, i)) for i, c in enumerate(clients)]
    try:
        await until(done, outcomes)
    finally:
        await _stop(workers)
        for client in clients:
            client.hang_up()
    return outcomes


async def _trickle(
    port: int,
    cert: Path,
    done: Done,
    source: str,
    streams: int,
    first: bytes,
    every: float | None,
    outcomes: Counter[str] | None,
) -> Counter[str]:
    """``streams`` streams that never finish: ``first`` bytes, then a byte every ``every``
    seconds (None: silence). A stream the server ends is replaced at once by a new one."""
    outcomes = Counter() if outcomes is None else outcomes
    clients = [await dial(source, port, cert) for _ in range(-(-streams // 32))]
    open_: list[tuple[QuicClient, int]] = []

    def start(client: QuicClient) -> None:
        sid = client.open()
        client.send(sid, first, fin=False)
        open_.append((client, sid))
        outcomes["opened"] += 1

    for i in range(streams):
        start(clients[i // 32])
    last = time.monotonic()
    try:
        while not done(outcomes):
            await asyncio.sleep(_POLL)
            tick = every is not None and time.monotonic() - last >= every
            last = time.monotonic() if tick else last
            current, open_ = open_, []  # start() adds to the new list
            for client, sid in current:
                waiter = client._waiters[sid]
                if waiter.done():
                    outcomes[ended(waiter)] += 1
                    del client._waiters[sid]
                    start(client)
                    continue
                if tick:
                    client.send(sid, b"x", fin=False)
                open_.append((client, sid))
    finally:
        for client in clients:
            client.hang_up()
    return outcomes


async def unused(
    port: int,
    cert: Path,
    done: Done,
    *,
    streams: int = 200,
    outcomes: Counter[str] | None = None,
) -> Counter[str]:
    """``streams`` never-finished streams: one byte each, then silence."""
    return await _trickle(port, cert, done, SOURCES["unused"], streams, b"F", None, outcomes)


async def slow_sender(
    port: int,
    cert: Path,
    done: Done,
    *,
    streams: int = 32,
    every: float = 1.0,
    outcomes: Counter[str] | None = None,
) -> Counter[str]:
    """A slow sender: a request's first line and headers on each of ``streams`` streams, then a
    byte every ``every`` seconds, never a FIN."""
    return await _trickle(port, cert, done, SOURCES["slow"], streams, PARTIAL, every, outcomes)


async def idle(
    port: int,
    cert: Path,
    done: Done,
    *,
    connections: int = 20,
    outcomes: Counter[str] | None = None,
) -> Counter[str]:
    """``connections`` connections that handshake and then say nothing; one the server closes
    is dialled again."""
    outcomes = Counter() if outcomes is None else outcomes
    clients = []
    try:
        for _ in range(connections):
            clients.append(await dial(SOURCES["idle"], port, cert))
            outcomes["connected"] += 1
        while not done(outcomes):
            await asyncio.sleep(_POLL)
            for i, client in enumerate(clients):
                if client.terminated.done():
                    outcomes["closed by the server"] += 1
                    clients[i] = await dial(SOURCES["idle"], port, cert)
                    outcomes["connected"] += 1
    finally:
        for client in clients:
            client.hang_up()
    return outcomes


class Attack(Protocol):
    def __call__(
        self, port: int, cert: Path, done: Done, *, outcomes: Counter[str] | None = None
    ) -> Awaitable[Counter[str]]: ...


ATTACKS: dict[str, Attack] = {
    "flood": flood,
    "oversized": oversized,
    "unused": unused,
    "slow": slow_sender,
    "idle": idle,
}


async def everything(
    port: int, cert: Path, done: Done, *, outcomes: Counter[str] | None = None
) -> Counter[str]:
    """Every attack at once, each from its own address. Outcomes are prefixed with the attack
    (``flood: ok``), and ``done`` sees them all together."""
    outcomes = Counter() if outcomes is None else outcomes
    each = {name: Counter[str]() for name in ATTACKS}

    def merged(_: Counter[str]) -> bool:
        outcomes.clear()
        for name, counts in each.items():
            outcomes.update({f"{name}: {k}": v for k, v in counts.items()})
        return done(outcomes)

    await asyncio.gather(
        *(attack(port, cert, merged, outcomes=each[name]) for name, attack in ATTACKS.items())
    )
    merged(outcomes)
    return outcomes


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
