"""Storage faults against a real server: a content root that fills up (a 2 MiB tmpfs) and one on a
read-only mount. Writes must be refused with a clear ``server-error``, reads must go on, nothing
acknowledged may be lost and nothing half-written served, before or after a restart. (The kill -9
storm is tests/e2e/test_crash.py; the bench runs it with 50 kills.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability.workloads import full_disk, mount_refusal, read_only_root

refusal = mount_refusal()
pytestmark = pytest.mark.skipif(refusal is not None, reason=refusal or "")


async def test_a_full_disk_refuses_writes_clearly_and_loses_nothing(tmp_path: Path) -> None:
    report = await full_disk(tmp_path, size="2m", doc_bytes=150_000, refusals=4)
    assert report.problems == []
    assert len(report.acknowledged) >= 5  # the disk took writes before it filled
    assert report.refusals == {"insufficient storage": 4}
    assert report.created_after_space_returned == 3  # no restart needed once space is back
    assert report.left_after_restart == 0  # startup recovery removed what failed writes left


async def test_a_read_only_root_serves_reads_and_refuses_writes_clearly(tmp_path: Path) -> None:
    assert await read_only_root(tmp_path) == []
