"""The MCP bridge in process, as an agent's client sees it: the SDK's own ``Client`` on
``build_server``, in ``auto`` mode (the direct dispatcher of the 2026 protocol) or ``legacy``
(the JSON-RPC stream loop with the ``initialize`` handshake that stdio clients use)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from mcp import Client as MCPClient

from markproto.client import Client, Pool, Tokens, Trust
from markproto.client import mcp as bridge
from markproto.protocol.url import MarkURL
from markproto.server.devcert import fingerprint
from support.server import RunningServer

MARKER = re.compile(
    r"\[truncated: showing characters ([\d,]+)-([\d,]+) of ([\d,]+); (.*)\]\n\Z"
    r"|\[showing characters ([\d,]+)-([\d,]+) of ([\d,]+): the end\]\n\Z"
)


@dataclass
class Session:
    """One SDK client session on the bridge."""

    mcp: MCPClient

    async def call(self, tool: str, **args: object) -> str:
        """The text of a result that is not an error."""
        result = await self.mcp.call_tool(tool, args)
        text = result.content[0].text  # type: ignore[union-attr]
        assert result.is_error is False, text
        assert len(result.content) == 1
        assert result.structured_content is None
        return text

    async def fail(self, tool: str, **args: object) -> str:
        """The message of a tool error, without the SDK's prefix; always one line."""
        result = await self.mcp.call_tool(tool, args)
        text = result.content[0].text  # type: ignore[union-attr]
        assert result.is_error is True, text
        prefix = f"Error executing tool {tool}: "
        assert text.startswith(prefix)
        assert "\n" not in text and "pydantic" not in text, text
        return text.removeprefix(prefix)


@asynccontextmanager
async def session(
    client: Client,
    hosts: MarkURL | Sequence[MarkURL] | None,
    mode: str,
    profile: bridge.Profile = "full",
) -> AsyncIterator[Session]:
    servers = [] if hosts is None else [hosts] if isinstance(hosts, MarkURL) else list(hosts)
    async with client, MCPClient(bridge.build_server(client, servers, profile), mode=mode) as mcp:
        yield Session(mcp)


def live_client(servers: RunningServer | Sequence[RunningServer], tokens: Tokens) -> Client:
    """A client with ``tokens`` that has the servers' certificates pinned (in a ``known_hosts``
    of the first server's state directory: nothing is written to the user's)."""
    running = [servers] if isinstance(servers, RunningServer) else list(servers)
    known_hosts = running[0].state_dir / "known_hosts"
    known_hosts.write_text(
        "".join(f"{s.authority} {fingerprint(s.cert.read_bytes())}\n" for s in running)
    )
    return Client(Pool(Trust(known_hosts=known_hosts)), tokens=tokens, retry_delay=0)


def split(text: str) -> tuple[dict[str, str], str]:
    """An envelope's ``key: value`` lines and its body."""
    head, _, body = text.partition("\n\n")
    fields = dict(line.split(": ", 1) for line in head.splitlines())
    return fields, body
