"""Hostile clients against a real server on loopback: slow senders, unused streams, oversized
requests and a flood from one address. The server must reset what never completes, refuse what is
too big, rate-limit the flood with a parseable ``rate-limited``, and keep answering an honest
client on another address with ``ok`` throughout. Behaviour only; the latencies are the bench's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from reliability.workloads import (
    LoadReport,
    flood,
    honest,
    oversized,
    seed_load_root,
    slow_loris,
    unused,
)
from support.server import RunningServer, running_server

TIMEOUT = 1.0
"""The server's request timeout here: slow streams are reset after 1 to 1.25 s."""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    root = tmp_path / "root"
    root.mkdir()
    seed_load_root(root, docs=4)
    async with running_server(root, rate_limit=50.0, request_timeout=TIMEOUT) as running:
        yield running


def served(report: LoadReport) -> None:
    assert report.errors == []
    assert report.statuses["FETCH"]["ok"] >= 5


async def settled(server: RunningServer) -> None:
    """Once every attacker hung up, no request bytes and no per-stream entry may remain."""
    transport = server.app.server
    assert transport is not None
    for _ in range(50):
        if not transport.usage().connections:
            break
        await asyncio.sleep(0.05)
    usage = transport.usage()
    assert (usage.buffered, usage.partial, usage.running) == (0, 0, 0)


async def test_slow_senders_are_reset_at_the_timeout_and_others_served(
    server: RunningServer,
) -> None:
    attack = asyncio.create_task(slow_loris(server.port, server.cert, 2.6, connections=2))
    report = await honest(server.port, server.cert, 2.0)
    outcomes = await attack
    served(report)
    assert outcomes["opened"] > 2 * 40  # the reset streams were replaced by new ones
    assert outcomes["stream reset"] >= 2 * 32  # every stream the credit let through, at least
    assert set(outcomes) <= {"opened", "stream reset"}
    await settled(server)


async def test_unused_streams_are_reset_and_others_served(server: RunningServer) -> None:
    attack = asyncio.create_task(unused(server.port, server.cert, 2.5, connections=8))
    report = await honest(server.port, server.cert, 1.5)
    outcomes = await attack
    served(report)
    assert outcomes == {"opened": 8 * 32, "stream reset": 8 * 32}
    await settled(server)


async def test_oversized_requests_are_refused_and_others_served(server: RunningServer) -> None:
    attack = asyncio.create_task(oversized(server.port, server.cert, 2.0))  # ~2 a second
    report = await honest(server.port, server.cert, 1.0)
    outcomes = await attack
    served(report)
    assert outcomes["server-error"] >= 2  # both kinds, parsed
    assert set(outcomes) == {"server-error"}
    await settled(server)


async def test_a_flood_is_rate_limited_and_others_served(server: RunningServer) -> None:
    attack = asyncio.create_task(flood(server.port, server.cert, 1.0, rate=1000))
    report = await honest(server.port, server.cert, 1.0)
    outcomes = await attack
    served(report)
    assert set(outcomes) == {"ok", "rate-limited"}  # every answer arrived and parsed
    assert outcomes["rate-limited"] > outcomes["ok"] >= 100  # the burst, then the rate
    await settled(server)
