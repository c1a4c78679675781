"""The soak, short: a few thousand sequential requests on one connection must leave no
per-stream state behind in the transport or in aioquic (the bench measures RSS over 40,000)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from reliability.workloads import SOAK_ROTATION, seed_load_root, sequential
from support.quicclient import connect
from support.server import running_server

REQUESTS = 2_100  # 300 turns of the rotation


async def eventually(condition: Callable[[], bool], limit: float = 30.0) -> None:
    """Wait for ``condition``; ``limit`` only bounds a broken server (the assert says what)."""
    deadline = time.monotonic() + limit
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert condition()


async def test_sequential_requests_leave_no_per_stream_state(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    seed_load_root(root, docs=4)
    async with running_server(root) as server:
        transport = server.app.server
        assert transport is not None
        client = await connect("127.0.0.1", server.port, cafile=server.cert)
        statuses: Counter[str] = Counter()
        try:
            await sequential(client, REQUESTS, statuses)
            # the acknowledgements land (however slowly): every stream but the last is finished
            await eventually(lambda: transport.usage().unacknowledged <= 1)
            usage = transport.usage()
            assert usage.connections == 1
            assert (usage.buffered, usage.partial, usage.running, usage.discarding) == (0, 0, 0, 0)
        finally:
            client.hang_up()
        turns = REQUESTS // len(SOAK_ROTATION)
        assert statuses == {"ok": 6 * turns, "not-found": turns}
        await eventually(lambda: not transport.usage().connections)  # its state went with it
