"""Crash safety: SIGKILL the server during a write storm; nothing acknowledged is ever lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.crash import write_storm


@pytest.mark.slow
async def test_kill_9_during_writes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    report = await write_storm(tmp_path, kills=4)
    assert report.kills == 4
    assert report.acknowledged > 0
    assert report.problems == []
