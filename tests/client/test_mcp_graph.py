"""The bridge's link tools (``mark_explore``, ``mark_backlinks``, ``mark_graph``) against a live
server: the reference's names and parameters, what each shows, the cursor and the offset that
continue a bounded result, read auth, and a server without links."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
from support.agent import Session, live_client, session, split
from support.server import WRITE_TOKEN, RunningServer, TokenSpec, running_server

from markproto.client import Tokens
from markproto.protocol.url import parse_url

READ_TOKEN = "test-read-token"
TOKENS = {
    "writer": TokenSpec(WRITE_TOKEN),
    "reader": TokenSpec(READ_TOKEN, paths=("/private/**",), ops=("read",)),
}
DOCS = {
    "/docs/a.md": (
        "# Alpha\n\nSee [beta](b.md#body) and <https://x.org>.\n\n## Two\n\n[gone](nope.md)\n"
    ),
    "/docs/b.md": "# Beta\n\n## Body\n\nback to [a](/docs/a)\n",
    "/docs/c.md": "# Gamma\n\n[[a]] and [[b#Body|beta's body]]\n",
    "/private/p.md": "# Private\n\n[a](/docs/a.md)\n",
}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root", tokens=TOKENS) as running:
        yield running


Connect = Callable[..., AbstractAsyncContextManager[Session]]


@pytest.fixture
def connect(server: RunningServer, mode: str) -> Connect:
    host = parse_url(server.url)

    def open_session(token: str = WRITE_TOKEN) -> AbstractAsyncContextManager[Session]:
        return session(live_client(server, Tokens(None, {host.authority: token})), host, mode)

    return open_session


async def publish(agent: Session) -> None:
    for path, body in DOCS.items():
        meta = {"rel-supersedes": "/docs/c.md"} if path == "/docs/b.md" else None
        await agent.call("mark_publish", url=path, body=body, expected_version=0, metadata=meta)


async def test_explore_shows_outline_links_backlinks_and_siblings(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent)
        text = await agent.call("mark_explore", url="/docs/a.md")
        print(text)
        fields, body = split(text)
        assert (fields["title"], fields["outbound"], fields["backlinks"]) == ("Alpha", "3", "2")
        assert "## Outline\n\n- Alpha (#alpha, 7 lines)\n  - Two (#two, 3 lines)" in body
        assert '- [Beta](/docs/b.md#body) "beta" from #alpha' in body
        assert "- https://x.org (external) from #alpha" in body
        assert '- /docs/nope.md (missing) "gone" from #two' in body
        assert (
            '## Backlinks (2)\n\n- [Beta](/docs/b.md#body) "a"\n- [Gamma](/docs/c.md#gamma)' in body
        )
        assert "## Siblings\n\n- /docs/b.md\n- /docs/c.md" in body
        assert "private" not in body and "next-cursor" not in body


async def test_explore_pages_with_its_cursor(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent)
        first = split(await agent.call("mark_explore", url="/docs/a.md", page_size=1))[1]
        assert first.endswith("next-cursor: 1,1\n")
        second = split(
            await agent.call("mark_explore", url="/docs/a.md", page_size=1, cursor="1,1")
        )[1]
        assert "https://x.org" in second and "https://x.org" not in first
        assert "next-cursor: 2,2" not in second or second.endswith("next-cursor: 2,2\n")
        assert await agent.fail("mark_explore", url="/docs/a.md", cursor="soon") == (
            "cursor: 'soon' is not a next-cursor this tool gave"
        )


async def test_explore_groups_relations_by_document(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent)
        body = split(
            await agent.call("mark_explore", url="/docs/c.md", relations=["supersedes", ""])
        )[1]
        print(body)
        assert "## Relations (2 documents)" in body
        assert (
            '- [Beta](/docs/b.md)\n  - out [link] /docs/c.md#gamma "beta\'s body" x1\n'
            "  - in [supersedes] /docs/b.md x1"
        ) in body


async def test_backlinks_and_graph(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent)
        fields, body = split(await agent.call("mark_backlinks", url="/docs/a.md"))
        assert fields["total"] == "2"
        assert body.startswith("## Backlinks (2)\n\n- [Beta](/docs/b.md#body)")
        fields, body = split(await agent.call("mark_graph", url="/docs/b.md"))
        print(body)
        assert "## Documents (3)" in body and "- [Alpha](/docs/a.md) (depth 1)" in body
        assert "- /docs/b.md#body -> [Alpha](/docs/a.md)" in body
        assert fields["total"] == "7"
        assert '- /docs/c.md#gamma -> [Beta](/docs/b.md#body) "beta\'s body"' in body
        deeper = split(await agent.call("mark_graph", url="/docs/b.md", depth=1))[0]
        assert deeper["total"] == "2"


async def test_a_reader_token_shows_private_links(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent)
    async with connect(READ_TOKEN) as reader:
        body = split(await reader.call("mark_backlinks", url="/docs/a.md"))[1]
        assert "/private/p.md" in body
