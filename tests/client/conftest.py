"""Fixtures of the MCP bridge tests: both SDK client modes, and a live server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.server import RunningServer, running_server


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    """The SDK client's ``auto`` mode (the 2026 direct dispatcher) or ``legacy`` (the JSON-RPC
    stream loop with the ``initialize`` handshake that stdio clients use)."""
    return str(request.param)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """A live server with the default token (``WRITE_TOKEN`` publishes everywhere)."""
    async with running_server(tmp_path / "root") as running:
        yield running
