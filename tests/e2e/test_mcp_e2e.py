"""``mark mcp`` as an MCP client runs it: a child process speaking newline-delimited JSON-RPC on
stdin and stdout, with the ``initialize`` handshake of a pre-2026 client, against a live server on
loopback. It measures the tool list as served and ends the session by closing stdin."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from support.server import WRITE_TOKEN, RunningServer

SCHEMA_BUDGET = 10 * 1024
CREATED = re.compile(r"status: created\nversion: 1\nmodified: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n")
DOC = "# Alpha\n\nFirst body.\n\n## Details\n\nThe papaya reverts.\n"


class Session:
    """JSON-RPC requests and notifications over a child's stdin and stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin, self.stdout = proc.stdin, proc.stdout
        self.next_id = 0

    async def send(self, method: str, params: dict[str, Any] | None = None) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        self.stdin.write(json.dumps(message).encode() + b"\n")
        await self.stdin.drain()

    async def request(self, method: str, params: dict[str, Any] | None = None) -> bytes:
        """The raw response line: what a client receives, byte for byte."""
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        self.stdin.write(json.dumps(message).encode() + b"\n")
        await self.stdin.drain()
        while True:
            line = await asyncio.wait_for(self.stdout.readline(), 30)
            assert line, "the bridge closed stdout"
            if json.loads(line).get("id") == self.next_id:
                return line

    async def call(self, tool: str, **arguments: Any) -> tuple[bool, str]:
        line = await self.request("tools/call", {"name": tool, "arguments": arguments})
        result = json.loads(line)["result"]
        assert [part["type"] for part in result["content"]] == ["text"]
        assert "structuredContent" not in result
        return result["isError"], result["content"][0]["text"]


async def test_a_stdio_session_against_a_live_server(server: RunningServer, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
    env["MARK_HOME"] = str(tmp_path / "home")
    command = [sys.executable, "-m", "markproto.client.cli", "mcp"]
    with (tmp_path / "stderr").open("wb") as errors:
        proc = await asyncio.create_subprocess_exec(
            *command,
            "-host",
            server.url,
            "-token",
            WRITE_TOKEN,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
            env=env,
            limit=1 << 20,
        )
        try:
            rpc = Session(proc)
            hello = json.loads(
                await rpc.request(
                    "initialize",
                    {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "e2e", "version": "1"},
                    },
                )
            )["result"]
            assert hello["protocolVersion"] == "2025-06-18"
            assert hello["serverInfo"]["name"] == "markproto"
            assert hello["instructions"].startswith(f"Connected to {server.url}; use bare paths")
            await rpc.send("notifications/initialized")

            listed = await rpc.request("tools/list")
            assert len(listed) < SCHEMA_BUDGET
            names = [tool["name"] for tool in json.loads(listed)["result"]["tools"]]
            assert len(names) == 12
            assert {"mark_lookup", "mark_changes", "mark_explore"} <= set(names)

            error, created = await rpc.call(
                "mark_publish",
                url="/notes/alpha.md",
                body=DOC,
                expected_version=0,
                metadata={"tags": "fruit"},
            )
            assert not error
            assert CREATED.fullmatch(created), created
            error, found = await rpc.call(
                "mark_lookup", url="/notes/", query="papaya", match="body", limit=3
            )
            assert not error
            assert found.startswith("status: ok\nmatches: 1\nmatch: body\n\n")
            assert "| /notes/alpha.md#details | 0.50 | Alpha › Details | fruit |" in found
            assert await rpc.call("mark_fetch", url="/notes/alpha.md#details") == (
                False,
                "status: ok\nversion: 1\ntitle: Alpha\ntags: fruit\n\n"
                "## Details\n\nThe papaya reverts.\n",
            )
            assert await rpc.call("mark_fetch", url="mark://127.0.0.1:1/a.md") == (
                True,
                "Error executing tool mark_fetch: 127.0.0.1:1: unreachable (connection refused)",
            )
            assert proc.stdin is not None
            proc.stdin.close()
            assert await asyncio.wait_for(proc.wait(), 30) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    log = (tmp_path / "stderr").read_text()
    assert f"mark: {server.authority}: pinned certificate sha256:" in log
    assert "(loopback)" in log
