"""The bridge's change notifications over a real server: a document or folder subscribed as an
MCP resource gets ``notifications/resources/updated`` (``resources/subscribe`` in the legacy
handshake era, a ``subscriptions/listen`` stream in the 2026 one), and ``mark_changes`` says what
changed since a cursor."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as MCPClient
from mcp.shared.exceptions import MCPError
from support.server import WRITE_TOKEN, RunningServer, TokenSpec, running_server

from markproto.client import Client, Pool, Tokens, Trust
from markproto.client import mcp as bridge
from markproto.protocol.url import parse_url

READ_TOKEN = "test-read-token"
TOKENS = {
    "writer": TokenSpec(WRITE_TOKEN),
    "reader": TokenSpec(READ_TOKEN, paths=("/secret/**",), ops=("read",)),
}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root", tokens=TOKENS) as running:
        yield running


@pytest.fixture
async def writer(server: RunningServer) -> AsyncIterator[Client]:
    tokens = Tokens(overrides={server.authority: WRITE_TOKEN})
    async with Client(Pool(Trust(cafile=str(server.cert))), tokens=tokens) as client:
        yield client


def bridge_client(server: RunningServer) -> Client:
    return Client(Pool(Trust(cafile=str(server.cert))))


class Inbox:
    """The notifications a session received."""

    def __init__(self) -> None:
        self.updated: asyncio.Queue[str] = asyncio.Queue()

    async def __call__(self, message: Any) -> None:
        if getattr(message, "method", "") == "notifications/resources/updated":
            self.updated.put_nowait(message.params.uri)

    async def next(self, timeout: float = 5.0) -> str:
        return await asyncio.wait_for(self.updated.get(), timeout)


async def changes(mcp: MCPClient, **args: object) -> tuple[dict[str, str], list[str]]:
    result = await mcp.call_tool("mark_changes", args)
    text = result.content[0].text  # type: ignore[union-attr]
    assert result.is_error is False, text
    head, _, body = text.partition("\n\n")
    return dict(line.split(": ", 1) for line in head.splitlines()), body.splitlines()


async def test_legacy_subscriptions_get_resource_updates(
    server: RunningServer, writer: Client
) -> None:
    host = parse_url(server.url)
    folder, other = f"{host.identity}/docs/", f"{host.identity}/other.md"
    inbox = Inbox()
    client = bridge_client(server)
    async with (
        client,
        MCPClient(bridge.build_server(client, [host]), mode="legacy", message_handler=inbox) as mcp,
    ):
        capabilities = mcp.server_capabilities
        assert capabilities.resources is not None and capabilities.resources.subscribe
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated (2026)
            await mcp.subscribe_resource(folder)
            await mcp.subscribe_resource(other)
            await writer.publish(f"{server.url}/docs/a.md", b"# A\n", expected_version=0)
            assert await inbox.next() == folder
            await writer.publish(f"{server.url}/other.md", b"# O\n", expected_version=0)
            assert await inbox.next() == other
            await mcp.unsubscribe_resource(folder)
            await writer.append(f"{server.url}/docs/a.md", b"more\n")
            await writer.append(f"{server.url}/other.md", b"more\n")
            assert await inbox.next() == other  # the folder's update never comes
            assert inbox.updated.empty()
            with pytest.raises(MCPError, match="authentication required"):
                await mcp.subscribe_resource(f"{host.identity}/secret/")


async def test_listen_streams_get_resource_updates(server: RunningServer, writer: Client) -> None:
    host = parse_url(server.url)
    doc = f"{host.identity}/docs/a.md"
    client = bridge_client(server)
    async with (
        client,
        MCPClient(bridge.build_server(client, [host]), mode="auto") as mcp,
        mcp.listen(resource_subscriptions=[doc]) as stream,
    ):
        await writer.publish(f"{server.url}/docs/b.md", b"# B\n", expected_version=0)
        await writer.publish(f"{server.url}/docs/a.md", b"# A\n", expected_version=0)
        first = await asyncio.wait_for(anext(stream), 5)
        assert first.uri == doc  # type: ignore[union-attr]
        # The SDK's listener folds updates of one URI not yet taken into one (a level trigger).
        await writer.append(f"{server.url}/docs/a.md", b"more\n")
        second = await asyncio.wait_for(anext(stream), 5)
        assert second.uri == doc  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mark_changes_reports_what_changed_since_a_cursor(
    server: RunningServer, writer: Client, mode: str
) -> None:
    host = parse_url(server.url)
    client = bridge_client(server)
    async with client, MCPClient(bridge.build_server(client, [host]), mode=mode) as mcp:
        start, lines = await changes(mcp, url="/docs")
        assert lines == [] and "cursor" in start and "pass it as since" in start["note"]
        await writer.publish(
            f"{server.url}/docs/a.md", b"# A\n", expected_version=0, meta={"agent": "bot"}
        )
        await writer.append(f"{server.url}/docs/a.md", b"more\n")
        await writer.publish(f"{server.url}/elsewhere.md", b"x\n", expected_version=0)
        after, lines = await changes(mcp, url="/docs", since=start["cursor"])
        assert lines == ["publish /docs/a.md v1 by bot", "append /docs/a.md v2 by bot"]
        assert after["cursor"].endswith(":3") and "complete" not in after
        again, lines = await changes(mcp, url="/docs", since=after["cursor"])
        assert lines == ["(no changes)"] and again["cursor"] == after["cursor"]
        stale, lines = await changes(mcp, url="/docs", since="oldepoch:1")
        assert stale["resync"] == "true" and "re-read" in stale["note"]
        result = await mcp.call_tool("mark_changes", {"url": "/docs", "since": "nope"})
        assert result.is_error and "not a WATCH cursor" in result.content[0].text  # type: ignore[union-attr]
        denied = await mcp.call_tool("mark_changes", {"url": "/secret"})
        assert denied.is_error and "unauthorized" in denied.content[0].text  # type: ignore[union-attr]
