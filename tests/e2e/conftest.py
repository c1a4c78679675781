"""Integration fixtures: a real server on loopback QUIC and a real client connection to it."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from support.exchange import Remote, ask
from support.server import RunningServer, running_server

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import wire

Ask = Callable[..., Awaitable[wire.Response]]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root") as running:
        yield running


@pytest.fixture
async def pool(server: RunningServer) -> AsyncIterator[Pool]:
    async with Pool(Trust(cafile=str(server.cert))) as client:
        yield client


@pytest.fixture(name="ask")
def ask_fixture(server: RunningServer, pool: Pool) -> Ask:
    """``support.exchange.ask`` bound to the server over QUIC: ``await ask("FETCH", "/a.md")``."""
    return functools.partial(ask, Remote(pool, f"localhost:{server.port}"))
