"""``mark mcp`` as a child process driven by the official MCP SDK's client over stdio, against two
live servers: every tool, prompt and resource once, with the error cases an agent meets (bad
arguments, the wrong kind of path, a body over the limit) and the refusals that are results, not
errors (conflict, archived, not-permitted)."""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as MCPClient
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from support.server import WRITE_TOKEN, RunningServer, TokenSpec, running_server

from markproto.client import TokenStore

DOCS_TOKEN = "test-docs-token"
TOKENS = {"writer": TokenSpec(WRITE_TOKEN), "docs": TokenSpec(DOCS_TOKEN, paths=("/docs/**",))}
SCHEMA_BUDGET = 10 * 1024
DOC = "# Alpha\n\nFirst body.\n\n## Details\n\nThe papaya reverts.\n"
FRAME = re.compile(r"^>>> (\S+)$", re.M)


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    async with (
        running_server(tmp_path / "one", tokens=TOKENS) as one,
        running_server(tmp_path / "two", tokens=TOKENS) as two,
    ):
        yield one, two


class Agent:
    """Calls as an agent makes them: the text of a result, or of a tool error."""

    def __init__(self, mcp: MCPClient) -> None:
        self.mcp = mcp

    async def call(self, tool: str, **args: Any) -> str:
        result = await self.mcp.call_tool(tool, args)
        text: str = result.content[0].text  # type: ignore[union-attr]
        assert result.is_error is False, text
        return text

    async def fail(self, tool: str, **args: Any) -> str:
        result = await self.mcp.call_tool(tool, args)
        text: str = result.content[0].text  # type: ignore[union-attr]
        assert result.is_error is True, text
        assert "\n" not in text
        return text.removeprefix(f"Error executing tool {tool}: ")


def fields(text: str) -> dict[str, str]:
    head = text.partition("\n\n")[0]
    return dict(line.split(": ", 1) for line in head.splitlines())


async def test_every_tool_prompt_and_resource_over_stdio(
    servers: tuple[RunningServer, RunningServer], tmp_path: Path
) -> None:
    one, two = servers
    home = tmp_path / "home"
    TokenStore(home / "tokens.toml").add(two.authority, WRITE_TOKEN)  # -token is for one only
    bridge = StdioServerParameters(
        command=sys.executable,
        args=["-m", "markproto.client.cli", "mcp", "-host", one.url, "-host", two.url],
        env={"MARK_HOME": str(home), "MARK_AUTH": DOCS_TOKEN},
    )
    async with MCPClient(bridge) as mcp:
        await _tools(Agent(mcp), one, two)
        await _prompts(mcp)
        await _resources(mcp, one)


async def _tools(agent: Agent, one: RunningServer, two: RunningServer) -> None:
    listed = await agent.mcp.list_tools()
    assert [tool.name for tool in listed.tools] == [
        "mark_fetch",
        "mark_list",
        "mark_versions",
        "mark_discover",
        "mark_lookup",
        "mark_lookup_all",
        "mark_explore",
        "mark_backlinks",
        "mark_graph",
        "mark_publish",
        "mark_append",
        "mark_archive",
        "mark_changes",
    ]
    assert len(listed.model_dump_json(by_alias=True, exclude_none=True)) <= SCHEMA_BUDGET

    # mark_publish: create, carry metadata over, merge a conflict; refusals are results.
    meta = {"tags": "fruit", "importance": "0.8"}
    created = await agent.call(
        "mark_publish", url="/docs/alpha.md", body=DOC, expected_version=0, metadata=meta
    )
    assert fields(created)["status"] == "created"
    second = await agent.call(
        "mark_publish", url="/docs/alpha.md", body=DOC + "\nMore.\n", expected_version=1
    )
    assert fields(second)["kept"] == "importance, tags, type (metadata of v1)"
    merged = await agent.call(
        "mark_publish",
        url="/docs/alpha.md",
        body=DOC.replace("First", "The first"),
        expected_version=1,
        on_conflict="merge",
    )
    assert fields(merged)["merged"] == "your edit of v1 and server v2, clean: published"
    conflict = await agent.call("mark_publish", url="/docs/alpha.md", body="x", expected_version=1)
    assert fields(conflict)["status"] == "conflict"
    refused = await agent.call("mark_publish", url="/elsewhere.md", body="x", expected_version=0)
    assert fields(refused)["status"] == "not-permitted"
    assert (
        await agent.fail(
            "mark_publish", url="/docs/huge.md", body="x" * 1_200_000, expected_version=0
        )
        == "body is 1,200,000 bytes; a document holds at most 1,048,576 (1 MiB)"
    )
    assert await agent.fail("mark_publish", url="/docs/a.md", body="x", expected_version="one") == (
        "expected_version: should be a valid integer, unable to parse string as an integer "
        "(got 'one')"
    )

    # mark_append keeps the catalog keys.
    appended = await agent.call("mark_append", url="/docs/alpha.md", body="Appended.\n")
    assert fields(appended)["version"] == "4"

    # mark_fetch: the lean envelope with tags, one section, an unknown anchor.
    fetched = await agent.call("mark_fetch", url="/docs/alpha.md#details")
    assert fetched.startswith("status: ok\nversion: 4\ntitle: Alpha\ntags: fruit\n\n## Details\n")
    assert (await agent.fail("mark_fetch", url="/docs/alpha.md#nope")).startswith(
        f"url: {one.url}/docs/alpha.md#nope: no section #nope (sections: #alpha, #details)"
    )

    # mark_list and mark_versions, and the wrong kind of path for each.
    assert "- [alpha.md](alpha.md)" in await agent.call("mark_list", url="/docs/")
    assert (await agent.fail("mark_list", url="/docs/alpha.md")).startswith(
        "url: /docs/alpha.md is a document, not a folder"
    )
    assert fields(await agent.call("mark_versions", url="/docs/alpha.md"))["total"] == "4"
    assert (await agent.fail("mark_versions", url="/docs/")).startswith(
        "url: /docs/ is a folder, not a document"
    )

    # mark_lookup with budget: the evidence in one call; a document scope is refused.
    found = await agent.call(
        "mark_lookup", url="/docs/", query="papaya", match="body", limit=3, budget=600
    )
    assert FRAME.findall(found) == ["/docs/alpha.md/v4#details"]
    assert (await agent.fail("mark_lookup", url="/docs/alpha.md", query="papaya")).startswith(
        "url: /docs/alpha.md is a document, not a folder"
    )
    assert await agent.fail("mark_lookup", url="/", query="papaya", limit=0) == (
        "limit: should be greater than or equal to 1 (got 0)"
    )

    # mark_explore, mark_backlinks and mark_graph from the server's link index.
    await agent.call(
        "mark_publish",
        url="/docs/index.md",
        body="# Docs\n\nStart with [alpha](alpha.md#details).\n",
        expected_version=0,
    )
    explored = await agent.call("mark_explore", url="/docs/alpha.md")
    assert fields(explored)["backlinks"] == "1"
    assert '## Backlinks (1)\n\n- [Docs](/docs/index.md#docs) "alpha"' in explored
    assert "/docs/index.md" in await agent.call("mark_backlinks", url="/docs/alpha.md")
    graph = await agent.call("mark_graph", url="/docs/index.md", depth=1)
    assert "- /docs/index.md#docs -> [Alpha](/docs/alpha.md#details)" in graph
    assert (await agent.fail("mark_explore", url="/docs/")).startswith(
        "url: /docs/ is a folder, not a document"
    )

    # mark_lookup_all across both servers (the second with its stored token).
    await agent.call(
        "mark_publish",
        url=f"{two.url}/b.md",
        body="# Beta\n\nA papaya ripens.\n",
        expected_version=0,
        metadata={"tags": "fruit"},
    )
    every = await agent.call("mark_lookup_all", query="fruit")
    assert fields(every) == {
        "status": "ok",
        "servers": "2",
        "succeeded": "2",
        "failed": "0",
        "matches": "2",
        "match": "catalog",
    }
    assert f"| {one.url}/docs/alpha.md | 0.80 | Alpha | fruit |" in every
    assert f"| {two.url}/b.md | 0.50 | Beta | fruit |" in every

    # mark_archive; an archived document is a result.
    await agent.call("mark_publish", url="/docs/old.md", body="# Old\n", expected_version=0)
    assert fields(await agent.call("mark_archive", url="/docs/old.md"))["archived"] == "true"
    assert fields(await agent.call("mark_fetch", url="/docs/old.md")) == {"status": "archived"}

    # mark_discover: none on the first server; the second has one.
    assert fields(await agent.call("mark_discover")) == {"status": "not-found"}
    await agent.call(
        "mark_publish",
        url=f"{two.url}/.well-known/agent-manifest.md",
        body="# Two\n\nThe second server.\n",
        expected_version=0,
    )
    discovered = await agent.call("mark_discover", url=two.url)
    assert discovered.startswith("status: ok\nversion: 1\ntitle: Two\n\n# Two\n")


async def _prompts(mcp: MCPClient) -> None:
    names = [prompt.name for prompt in (await mcp.list_prompts()).prompts]
    assert names == ["orient", "recall", "whats-new"]
    for name, args in (
        ("orient", {"url": "/docs/alpha.md"}),
        ("recall", {"subject": "papaya"}),
        ("whats-new", {"since": "2025-01-31"}),
    ):
        prompt = await mcp.get_prompt(name, args)
        assert prompt.messages[0].role == "user"
    with pytest.raises(MCPError, match="since: 'soon' is not a date"):
        await mcp.get_prompt("whats-new", {"since": "soon"})


async def _resources(mcp: MCPClient, one: RunningServer) -> None:
    templates = [t.uri_template for t in (await mcp.list_resource_templates()).resource_templates]
    assert templates[0] == f"{one.url}/{{+path}}"
    uris = [str(r.uri) for r in (await mcp.list_resources()).resources]
    assert f"{one.url}/index.md" in uris and f"{one.url}/.well-known/agent-manifest.md" in uris
    read = await mcp.read_resource(f"{one.url}/docs/alpha.md#details")
    assert read.contents[0].text.startswith("## Details\n\nThe papaya reverts.\n")  # type: ignore[union-attr]
    with pytest.raises(MCPError, match="not found"):
        await mcp.read_resource(f"{one.url}/index.md")
