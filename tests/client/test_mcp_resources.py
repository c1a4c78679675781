"""The bridge's prompts and resources through the SDK's client, against a live server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from mcp.shared.exceptions import MCPError
from support.agent import live_client, session
from support.server import WRITE_TOKEN, RunningServer

from markproto.client import Client, Tokens
from markproto.protocol import wire
from markproto.protocol.url import MarkURL, parse_url

QUIC = "# QUIC notes\n\nIntro.\n\n## Flow control\n\nThe receive window doubles.\n"


def writer(server: RunningServer) -> Client:
    return live_client(server, Tokens(None, {parse_url(server.url).authority: WRITE_TOKEN}))


# --- prompts -----------------------------------------------------------------------------------


async def test_the_three_prompts_and_their_arguments(server: RunningServer, mode: str) -> None:
    async with session(writer(server), parse_url(server.url), mode) as agent:
        listed = {p.name: p for p in (await agent.mcp.list_prompts()).prompts}
        assert {
            name: [(a.name, a.required) for a in prompt.arguments or []]
            for name, prompt in listed.items()
        } == {
            "orient": [("url", True)],
            "recall": [("subject", True)],
            "whats-new": [("since", False)],
        }
        assert all(prompt.description for prompt in listed.values())

        async def text(name: str, **args: str) -> str:
            got = await agent.mcp.get_prompt(name, args)
            assert [m.role for m in got.messages] == ["user"]
            return got.messages[0].content.text  # type: ignore[union-attr]

        orient = await text("orient", url="/notes/quic.md")
        assert orient.startswith("Orient yourself around /notes/quic.md. Call mark_explore on it")
        assert "url#anchor" in orient and "never infer" in orient
        recall = await text("recall", subject="flow control")
        assert 'query "flow control", match "body", limit 3 and budget 1200' in recall
        assert "try once more with fewer or broader words" in recall
        week_ago = (datetime.now(UTC).date() - timedelta(7)).isoformat()
        assert f'filter "modified-after={week_ago}"' in await text("whats-new")
        assert 'filter "modified-after=2025-01-31"' in await text("whats-new", since="2025-01-31")
        with pytest.raises(MCPError, match="since: 'last week' is not a date like 2025-01-31"):
            await agent.mcp.get_prompt("whats-new", {"since": "last week"})
        with pytest.raises(MCPError, match=r"^url: required$"):
            await agent.mcp.get_prompt("orient", {})
        with pytest.raises(
            MCPError, match=r"^no prompt 'x' \(prompts: orient, recall, whats-new\)$"
        ):
            await agent.mcp.get_prompt("x", {})


# --- resources ---------------------------------------------------------------------------------


async def test_resources_are_a_template_the_hub_the_manifest_and_the_top_documents(
    server: RunningServer, mode: str
) -> None:
    host = parse_url(server.url)
    base = host.identity
    async with session(writer(server), host, mode) as agent:
        for path in ("/a.md", "/b.md", "/index.md", "/docs/c.md"):
            await agent.call("mark_publish", url=path, body=QUIC, expected_version=0)
        templates = (await agent.mcp.list_resource_templates()).resource_templates
        assert [(t.uri_template, t.mime_type) for t in templates] == [
            (f"{base}/{{+path}}", "text/markdown")
        ]
        listed = (await agent.mcp.list_resources()).resources
        assert [(str(r.uri), r.name) for r in listed] == [
            (f"{base}/index.md", "Index hub"),
            (f"{base}/.well-known/agent-manifest.md", "Agent manifest"),
            (f"{base}/a.md", "a.md"),
            (f"{base}/b.md", "b.md"),
        ]
        hub = (await agent.mcp.read_resource(f"{base}/index.md")).contents[0]
        assert (hub.text, hub.mime_type) == (QUIC, "text/markdown")  # type: ignore[union-attr]
        with pytest.raises(MCPError, match=r"agent-manifest\.md: not found"):
            await agent.mcp.read_resource(f"{base}/.well-known/agent-manifest.md")


async def test_resource_reads_are_whole_or_one_section_never_cut(
    server: RunningServer, mode: str
) -> None:
    host = parse_url(server.url)
    big = QUIC + "".join(f"## Part {i}\n\n{'lorem ipsum ' * 50}\n\n" for i in range(100))
    async with session(writer(server), host, mode) as agent:
        await agent.call("mark_publish", url="/big.md", body=big, expected_version=0)
        whole = (await agent.mcp.read_resource(f"{host.identity}/big.md")).contents[0]
        assert whole.text == big  # type: ignore[union-attr]
        part = (await agent.mcp.read_resource(f"{host.identity}/big.md#flow-control")).contents[0]
        assert part.text.startswith("## Flow control\n\nThe receive window doubles.\n")  # type: ignore[union-attr]
        with pytest.raises(MCPError, match=r"no section #nope \(sections: #quic-notes, "):
            await agent.mcp.read_resource(f"{host.identity}/big.md#nope")
        with pytest.raises(MCPError, match="not found"):
            await agent.mcp.read_resource(f"{host.identity}/missing.md")


async def test_several_servers_each_have_their_resources_and_an_unreachable_one_lists_none(
    server: RunningServer, mode: str
) -> None:
    host = parse_url(server.url)
    closed = parse_url("mark://127.0.0.1:1")
    client = writer(server)
    client.attempts = 1
    async with session(client, [host, closed], mode) as agent:
        await agent.call("mark_publish", url="/a.md", body=QUIC, expected_version=0)
        templates = (await agent.mcp.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == [
            f"{host.identity}/{{+path}}",
            "mark://127.0.0.1:1/{+path}",
        ]
        uris = [str(r.uri) for r in (await agent.mcp.list_resources()).resources]
        assert uris == [
            f"{host.identity}/index.md",
            f"{host.identity}/.well-known/agent-manifest.md",
            "mark://127.0.0.1:1/index.md",
            "mark://127.0.0.1:1/.well-known/agent-manifest.md",
            f"{host.identity}/a.md",
        ]
        with pytest.raises(MCPError, match="unreachable"):
            await agent.mcp.read_resource("mark://127.0.0.1:1/a.md")


async def test_without_host_one_template_names_the_server(server: RunningServer, mode: str) -> None:
    async with session(writer(server), None, mode) as agent:
        await agent.call("mark_publish", url=f"{server.url}/a.md", body=QUIC, expected_version=0)
        templates = (await agent.mcp.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["mark://{host}/{+path}"]
        assert (await agent.mcp.list_resources()).resources == []
        read = await agent.mcp.read_resource(f"{server.url}/a.md#flow-control")
        assert read.contents[0].text == "## Flow control\n\nThe receive window doubles.\n"  # type: ignore[union-attr]


class BinaryPool:
    """A pool whose server answers every FETCH with bytes that are not text."""

    async def request(self, authority: str, data: bytes) -> bytes:
        return wire.emit_response(wire.Response("ok", {"version": "1"}, b"\x89PNG\xff\x00"))

    async def close(self) -> None:
        pass


async def test_a_body_that_is_not_text_is_described_not_sent(mode: str) -> None:
    client = Client(BinaryPool(), attempts=1)  # type: ignore[arg-type]
    host: MarkURL = parse_url("mark://example.org")
    async with session(client, host, mode) as agent:
        read = await agent.mcp.read_resource("mark://example.org/logo.png")
        assert read.contents[0].text == "(6 bytes that are not UTF-8 text: not shown)"  # type: ignore[union-attr]
