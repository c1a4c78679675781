"""Hostile clients against a real server on loopback: a flood, oversized uploads, never-finished
streams, a slow sender and idle connections, each from its own address, while a well-behaved
client on another address keeps asking. The server must refuse or reset each attacker the way
SPEC §1.3 says, hold the flood to its rate, answer the well-behaved client ``ok`` every time, and
hold nothing once the attackers are gone.

Behaviour only, never timing: each attack runs until it reached the outcome under test (with a
generous bound, so a broken server fails instead of hanging), the well-behaved client until the
attack ends, and every count asserted follows from the server's rules whatever the machine's
speed. The latencies are the bench's (tests/bench/bench_hostile.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from reliability import attacks
from reliability.attacks import Done, reaching
from reliability.workloads import LoadReport, seed_load_root
from support.server import WRITE_TOKEN, RunningServer, running_server
from support.watching import RawWatch

from markproto.client import Pool, Trust
from markproto.protocol import wire
from markproto.protocol.watch import Control, WatchEvent

TIMEOUT = 1.0
"""The server's request timeout here: never-finished streams are reset after 1 to 1.25 s."""
RATE, BURST = 50.0, 100
IDLE_TIMEOUT = 30.0
"""The server's idle timeout here: a connection whose CONNECTION_CLOSE was lost (a loaded
machine drops datagrams on loopback too) is gone this long after its last packet."""


@asynccontextmanager
async def serving(
    tmp_path: Path,
    idle_timeout: float = IDLE_TIMEOUT,
    request_timeout: float = TIMEOUT,
    **settings: object,
) -> AsyncIterator[RunningServer]:
    root = tmp_path / "root"
    root.mkdir()
    seed_load_root(root, docs=4)
    async with running_server(
        root,
        rate_limit=RATE,
        rate_burst=BURST,
        request_timeout=request_timeout,
        idle_timeout=idle_timeout,
        **settings,
    ) as running:
        yield running


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with serving(tmp_path) as running:
        yield running


@pytest.fixture
async def impatient(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """A server that closes a connection after 5 s without traffic: long enough that a loaded
    machine stalling this one event loop (server, attacker and well-behaved client alike) for a
    second or two never makes the well-behaved client's connection look idle."""
    async with serving(tmp_path, idle_timeout=5.0) as running:
        yield running


@pytest.fixture
async def patient(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """A server with the default request timeout (10 s): in one busy process, a megabyte takes
    about a second to arrive."""
    async with serving(tmp_path, request_timeout=10.0) as running:
        yield running


async def under(
    server: RunningServer, attack: Callable[[int, Path, Done], Awaitable[Counter[str]]], done: Done
) -> tuple[Counter[str], LoadReport]:
    """Run ``attack`` until ``done``, with the well-behaved client asking all along."""
    finished = asyncio.Event()

    async def attacking() -> Counter[str]:
        try:
            return await attack(server.port, server.cert, done)
        finally:
            finished.set()

    outcomes, report = await asyncio.gather(
        attacking(),
        attacks.honest(server.port, server.cert, lambda n: finished.is_set() and n["ok"] >= 5),
    )
    return outcomes, report


async def settled(server: RunningServer) -> None:
    """Once every attacker hung up, no request bytes and no per-stream entry may remain: a
    connection ends by its close or, where that datagram was lost, by the idle timeout."""
    transport = server.app.server
    assert transport is not None
    deadline = time.monotonic() + IDLE_TIMEOUT + 15.0
    while transport.usage().connections and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    usage = transport.usage()
    assert (usage.connections, usage.buffered, usage.partial, usage.queued, usage.running) == (
        0,
        0,
        0,
        0,
        0,
    )


def served(report: LoadReport) -> None:
    """Every request of the well-behaved client was answered ``ok``."""
    assert report.errors == []
    assert report.statuses["FETCH"]["ok"] >= 5


async def test_a_flood_is_held_to_its_rate_and_others_served(server: RunningServer) -> None:
    started = time.monotonic()
    outcomes, report = await under(
        server, attacks.flood, reaching(lambda c: c["rate-limited"] >= 1 and c["ok"] >= BURST)
    )
    elapsed = time.monotonic() - started
    served(report)
    assert set(outcomes) <= {"ok", "rate-limited", "no answer yet"}
    assert outcomes["rate-limited"] >= 1 and outcomes["ok"] >= BURST
    # Each ok spent a token: never more than the burst and the rate allow, however fast it asks.
    assert outcomes["ok"] <= BURST + RATE * elapsed + 1
    # A limited stream's credit comes back only for a token, so refusals cannot run away: at
    # most the credit it started with (4 connections x 32) and one for each stream served.
    assert outcomes["rate-limited"] <= 4 * 32 + outcomes["ok"]
    await settled(server)


@pytest.mark.slow
async def test_oversized_uploads_are_refused_and_others_served(patient: RunningServer) -> None:
    kinds = len(attacks.oversized_requests())
    outcomes, report = await under(
        patient,
        attacks.oversized,
        reaching(lambda c: c["server-error"] + c["stream reset"] >= kinds),
    )
    served(report)
    # Refused each time: could not read request (parsed, or while arriving), or, on a machine
    # so loaded that an upload cannot arrive within the request timeout, reset at it.
    assert set(outcomes) <= {"server-error", "stream reset"}
    assert outcomes["server-error"] + outcomes["stream reset"] >= kinds
    await settled(patient)


async def test_never_finished_streams_are_reset_and_others_served(server: RunningServer) -> None:
    outcomes, report = await under(
        server, attacks.unused, reaching(lambda c: c["stream reset"] >= 200)
    )
    served(report)
    # Each reset at the timeout (or, past the burst, refused for the rate), none answered.
    assert set(outcomes) <= {"opened", "stream reset", "rate-limited"}
    assert outcomes["stream reset"] >= 200
    await settled(server)


async def test_a_slow_sender_is_reset_at_the_timeout_and_others_served(
    server: RunningServer,
) -> None:
    outcomes, report = await under(
        server,
        lambda port, cert, done: attacks.slow_sender(port, cert, done, every=0.2),
        reaching(lambda c: c["stream reset"] >= 32),
    )
    served(report)
    assert set(outcomes) == {"opened", "stream reset"}  # bytes keep coming, and still reset
    await settled(server)


async def test_idle_connections_are_closed_and_others_served(impatient: RunningServer) -> None:
    outcomes, report = await under(
        impatient, attacks.idle, reaching(lambda c: c["closed by the server"] >= 20)
    )
    served(report)  # it kept asking, so its own connection was never idle
    assert set(outcomes) == {"connected", "closed by the server"}
    assert outcomes["closed by the server"] >= 20
    await settled(impatient)


@pytest.mark.slow
async def test_every_attack_at_once_and_others_served(server: RunningServer) -> None:
    outcomes, report = await under(
        server,
        attacks.everything,
        reaching(
            lambda c: (
                c["flood: rate-limited"] >= 1
                and c["oversized: server-error"] + c["oversized: stream reset"] >= 1
                and c["unused: stream reset"] >= 200
                and c["slow: stream reset"] >= 32
            )
        ),
    )
    served(report)
    assert outcomes["flood: rate-limited"] >= 1, outcomes
    uploads = {k for k in outcomes if k.startswith("oversized: ")}
    assert uploads and uploads <= {"oversized: server-error", "oversized: stream reset"}
    assert outcomes["unused: stream reset"] >= 200, outcomes
    assert outcomes["slow: stream reset"] >= 32, outcomes
    assert outcomes["idle: connected"] >= 20, outcomes
    await settled(server)


async def test_a_watch_is_no_request_and_outlives_a_flood_from_its_own_address(
    tmp_path: Path,
) -> None:
    """A WATCH subscription is a stream its handler kept, not a request in progress: it holds no
    turn and no request timeout applies to it, and its own address flooding (refused for its
    rate) neither starves nor resets it; what changes still reaches it."""
    async with (
        serving(tmp_path, watch_heartbeat=0.2) as server,
        Pool(Trust(cafile=str(server.cert))) as pool,  # from 127.0.0.1, as the flood
    ):
        raw = await RawWatch.open(pool, server.authority, "/load")
        ack = await raw.next(30.0)
        assert isinstance(ack, Control) and ack.status == "ok"
        started = time.monotonic()
        outcomes = await attacks.flood(
            server.port,
            server.cert,
            reaching(
                lambda c: (
                    c["rate-limited"] >= 1
                    and c["ok"] >= BURST
                    and time.monotonic() - started > 3 * TIMEOUT  # past the request timeout
                )
            ),
        )
        assert outcomes["rate-limited"] >= 1
        transport = server.app.server
        assert transport is not None
        usage = transport.usage()
        assert (usage.streaming, usage.queued, usage.running) == (1, 0, 0)
        writer = await attacks.dial(attacks.HONEST_SOURCE, server.port, server.cert)
        try:
            body = wire.Request("PUBLISH", "/load/new.md", {"auth": WRITE_TOKEN}, b"# New\n")
            answer = await writer.request(wire.emit_request(body), timeout=30.0)
            assert wire.parse_response(answer).status == "created"
        finally:
            writer.hang_up()
        while isinstance(block := await raw.next(30.0), Control):
            assert block.status == "ok"  # heartbeats all along: never reset, never refused
        assert isinstance(block, WatchEvent)
        assert (block.op, block.path, block.version) == ("publish", "/load/new.md", 1)
        raw.close()
