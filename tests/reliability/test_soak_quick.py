"""The soak, short: a few thousand sequential requests on one connection must leave no
per-stream state behind in the transport or in aioquic (the bench measures RSS over 40,000)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from reliability.workloads import SOAK_ROTATION, seed_load_root, sequential
from support.quicclient import connect
from support.server import running_server

REQUESTS = 2_100  # 300 turns of the rotation


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
            await asyncio.sleep(0.1)  # the last acknowledgement lands: its stream is finished
            usage = transport.usage()
            assert usage.connections == 1 and usage.unacknowledged <= 1  # at most the last
            assert (usage.buffered, usage.partial, usage.running, usage.discarding) == (0, 0, 0, 0)
        finally:
            client.hang_up()
        turns = REQUESTS // len(SOAK_ROTATION)
        assert statuses == {"ok": 6 * turns, "not-found": turns}
        for _ in range(40):
            if not transport.usage().connections:
                break
            await asyncio.sleep(0.05)
        assert transport.usage().connections == 0  # its own state went with its close
