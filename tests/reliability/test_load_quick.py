"""The load, short: 10 concurrent clients (each its own connection) mixing FETCH, LIST, LOOKUP and
PUBLISH for a few seconds; nothing but expected answers, PUBLISH races ending in ``conflict``."""

from __future__ import annotations

from pathlib import Path

from reliability.workloads import EXPECTED, mixed_load, seed_load_root
from support.server import WRITE_TOKEN, running_server


async def test_mixed_load_answers_only_what_is_expected(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    seed_load_root(root)
    async with running_server(root) as server:
        report = await mixed_load(
            server.authority, server.cert, clients=10, seconds=3.0, token=WRITE_TOKEN
        )
        transport = server.app.server
        assert transport is not None
        usage = transport.usage()
        assert (usage.buffered, usage.partial, usage.running) == (0, 0, 0)
    assert report.errors == []
    assert set(report.statuses) == set(EXPECTED)  # every verb of the mix ran
    assert report.statuses["PUBLISH"]["created"] > 0
    assert report.statuses["PUBLISH"]["conflict"] > 0  # the races happened, and were refused
    assert report.total > 200
