"""The load, short: 10 concurrent clients (each its own connection) mixing FETCH, LIST, LOOKUP and
PUBLISH until every verb ran and some PUBLISH races ended in ``conflict``; nothing but expected
answers. It runs to that outcome, not for a time, so a loaded machine only makes it longer."""

from __future__ import annotations

from pathlib import Path

from reliability.workloads import EXPECTED, LoadReport, mixed_load, seed_load_root
from support.server import WRITE_TOKEN, running_server


def enough(report: LoadReport) -> bool:
    """Every verb of the mix ran, writes succeeded and raced, and a few hundred were answered."""
    publish = report.statuses.get("PUBLISH", {})
    return (
        set(report.statuses) == set(EXPECTED)
        and publish.get("created", 0) > 0
        and publish.get("conflict", 0) > 0
        and report.total > 200
    )


async def test_mixed_load_answers_only_what_is_expected(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    seed_load_root(root)
    async with running_server(root) as server:
        report = await mixed_load(
            server.authority,
            server.cert,
            clients=10,
            seconds=120.0,
            token=WRITE_TOKEN,
            until=enough,
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
