"""Integration fixtures: a real server on loopback QUIC and a real client connection to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
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


@pytest.fixture
def ask(server: RunningServer, pool: Pool) -> Ask:
    """Send one request over QUIC and parse the response: ``await ask("FETCH", "/a.md")``."""

    async def exchange(
        verb: str, path: str, meta: dict[str, str] | None = None, body: bytes = b""
    ) -> wire.Response:
        data = wire.emit_request(wire.Request(verb, path, meta or {}, body))
        return wire.parse_response(await pool.request(f"localhost:{server.port}", data))

    return exchange
