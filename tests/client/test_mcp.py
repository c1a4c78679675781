"""The MCP bridge in process, through the SDK's own client in both modes: ``auto`` (the direct
dispatcher of the 2026 protocol) and ``legacy`` (the JSON-RPC stream loop with the ``initialize``
handshake that stdio clients use). Most tests run against a real server on loopback; answers a
conforming server never gives (huge tables, unreadable bytes, a write lost in flight) come from a
scripted pool."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from support.agent import MARKER, Session, live_client, session, split
from support.server import WRITE_TOKEN, RunningServer, TokenSpec, running_server

from markproto.client import (
    Client,
    Tokens,
    TokenStore,
    TransportError,
    Unreachable,
)
from markproto.client import mcp as bridge
from markproto.client.cli import main
from markproto.client.results import CATALOG_FALLBACK_NOTE
from markproto.protocol import bodies, mdoutline, wire
from markproto.protocol.url import MarkURL, parse_url

DOCS_TOKEN = "test-docs-token"
TOKENS = {"writer": TokenSpec(WRITE_TOKEN), "docs": TokenSpec(DOCS_TOKEN, paths=("/docs/**",))}
QUIC = "# QUIC notes\n\nIntro.\n\n## Flow control\n\nThe receive window doubles.\n"
TOOLS = {
    "mark_fetch": ["url", "force", "verbose", "offset"],
    "mark_list": ["url", "include_archived", "cursor", "page_size", "verbose", "offset"],
    "mark_versions": ["url", "verbose", "offset"],
    "mark_discover": ["url"],
    "mark_lookup": ["url", "query", "filter", "limit", "match", "budget", "verbose", "offset"],
    "mark_explore": ["url", "direction", "relations", "page_size", "cursor", "verbose"],
    "mark_backlinks": ["url", "verbose", "offset"],
    "mark_graph": ["url", "depth", "verbose", "offset"],
    "mark_publish": ["url", "body", "expected_version", "metadata", "on_conflict"],
    "mark_append": ["url", "body", "expected_version", "metadata"],
    "mark_archive": ["url"],
    "mark_changes": ["url", "since"],
}
"""The tools in the order they are listed (mark_lookup_all follows mark_lookup when there are
several servers)."""
LOOKUP_ALL = ["query", "scope", "filter", "limit", "match", "budget", "verbose"]
SCHEMA_BUDGET = 10 * 1024
"""Bytes of the full profile's tools/list (issue 18), with every tool group registered."""
WRITES = {"mark_publish": (True, True), "mark_append": (False, False), "mark_archive": (True, True)}
"""destructiveHint, idempotentHint of the write tools."""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root", tokens=TOKENS) as running:
        yield running


@pytest.fixture
def host(server: RunningServer) -> MarkURL:
    return parse_url(server.url)


Connect = Callable[[], AbstractAsyncContextManager[Session]]


@pytest.fixture
def connect(server: RunningServer, host: MarkURL, mode: str) -> Connect:
    """The bridge as ``mark mcp -host <server> -token <writer>`` runs it. A context manager, not a
    yield fixture: the SDK's task group must close in the task that opened it."""
    tokens = Tokens(None, {host.authority: WRITE_TOKEN})
    return lambda: session(live_client(server, tokens), host, mode)


# --- the surface ------------------------------------------------------------------------------


async def test_tools_have_the_reference_names_parameters_and_hints(connect: Connect) -> None:
    async with connect() as agent:
        listed = await agent.mcp.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert [
            (name, list(tool.input_schema["properties"])) for name, tool in tools.items()
        ] == list(TOOLS.items())
        assert tools["mark_fetch"].input_schema["required"] == ["url"]
        assert tools["mark_lookup"].input_schema["required"] == ["url", "query"]
        assert tools["mark_publish"].input_schema["required"] == ["url", "body", "expected_version"]
        assert tools["mark_lookup"].input_schema["properties"]["match"]["anyOf"][0]["enum"] == [
            "catalog",
            "body",
        ]
        publish = tools["mark_publish"].input_schema["properties"]
        assert publish["on_conflict"] == {
            "default": "fail",
            "description": publish["on_conflict"]["description"],
            "enum": ["fail", "merge"],
            "type": "string",
        }
        for name, tool in tools.items():
            assert tool.output_schema is None
            assert tool.description and "\n " not in tool.description
            assert "title" not in tool.input_schema
            assert all("title" not in p for p in tool.input_schema["properties"].values())
            hints = tool.annotations
            assert hints is not None
            assert tool.description.endswith("Requires -token.") is (name in WRITES)
            if name in WRITES:
                assert hints.read_only_hint is False
                assert (hints.destructive_hint, hints.idempotent_hint) == WRITES[name]
            else:
                assert (hints.read_only_hint, hints.destructive_hint) == (True, None)
        assert "tags" in publish["metadata"]["description"]
        assert "kept" in publish["metadata"]["description"]


async def test_the_full_tool_list_stays_small_and_lean_leaves_out_the_advanced_tools(
    server: RunningServer, host: MarkURL, mode: str
) -> None:
    other = parse_url("mark://127.0.0.1:1")
    tokens = Tokens(None, {})
    sizes = {}
    for profile in ("full", "lean"):
        async with session(live_client(server, tokens), [host, other], mode, profile) as agent:
            listed = await agent.mcp.list_tools()
            names = [tool.name for tool in listed.tools]
            sizes[profile] = len(listed.model_dump_json(by_alias=True, exclude_none=True))
            if profile == "full":
                assert names == [*[*TOOLS][:5], "mark_lookup_all", *[*TOOLS][5:]]
                lookup_all = next(t for t in listed.tools if t.name == "mark_lookup_all")
                assert list(lookup_all.input_schema["properties"]) == LOOKUP_ALL
                assert lookup_all.input_schema["required"] == ["query"]
            else:
                assert "mark_discover" not in names and "mark_lookup_all" in names
    assert sizes["lean"] < sizes["full"] <= SCHEMA_BUDGET
    async with session(live_client(server, tokens), host, mode) as agent:
        names = [tool.name for tool in (await agent.mcp.list_tools()).tools]
        assert "mark_lookup_all" not in names  # one server: mark_lookup is the whole story


async def test_instructions_name_the_hosts_and_the_cheap_path(
    connect: Connect, host: MarkURL
) -> None:
    async with connect() as agent:
        text = agent.mcp.instructions
        assert text is not None
        assert text.startswith(f"Connected to {host.identity}; use bare paths like /index.md. ")
        for phrase in (
            'match "body"',
            "limit 3",
            "budget 1200",
            ">>> path/vN#anchor",
            "#anchor",
            "never infer",
            "catalog",
            "[truncated",
        ):
            assert phrase in text
    assert bridge.instructions(()).startswith("Use full mark:// URLs like mark://host/index.md.")
    two = bridge.instructions([host, parse_url("mark://b.example")])
    assert f"Connected to {host.identity}; use bare paths like /index.md. " in two
    assert "Also mark://b.example: full URLs, or mark_lookup_all to search them all." in two


# --- reading ----------------------------------------------------------------------------------


async def test_fetch_returns_the_lean_envelope_and_verbose_adds_every_key(
    connect: Connect, host: MarkURL
) -> None:
    async with connect() as agent:
        meta = {"tags": "quic,transport", "importance": "0.8"}
        created = await agent.call(
            "mark_publish", url="/notes/quic.md", body=QUIC, expected_version=0, metadata=meta
        )
        fields, body = split(created)
        assert (fields["status"], fields["version"], body) == ("created", "1", "")
        assert list(fields) == ["status", "version", "modified"]

        assert await agent.call("mark_fetch", url="/notes/quic.md") == (
            f"status: ok\nversion: 1\ntitle: QUIC notes\ntags: quic,transport\n\n{QUIC}"
        )
        fields, body = split(await agent.call("mark_fetch", url="/notes/quic.md", verbose=True))
        assert body == QUIC
        assert list(fields)[:4] == ["status", "version", "title", "tags"]
        assert {"content-hash", "etag", "modified", "importance", "tags", "type"} <= set(fields)
        assert (fields["tags"], fields["importance"]) == ("quic,transport", "0.8")
        # A full URL names the same document.
        assert await agent.call(
            "mark_fetch", url=f"{host.identity}/notes/quic.md"
        ) == await agent.call("mark_fetch", url="/notes/quic.md")


async def test_fetch_anchor_returns_one_section_and_an_unknown_anchor_lists_them(
    connect: Connect, host: MarkURL
) -> None:
    async with connect() as agent:
        await agent.call("mark_publish", url="/notes/quic.md", body=QUIC, expected_version=0)
        assert await agent.call("mark_fetch", url="/notes/quic.md#flow-control") == (
            "status: ok\nversion: 1\ntitle: QUIC notes\n\n"
            "## Flow control\n\nThe receive window doubles.\n"
        )
        assert await agent.fail("mark_fetch", url="/notes/quic.md#flow") == (
            f"url: {host.identity}/notes/quic.md#flow: no section #flow "
            "(sections: #quic-notes, #flow-control)"
        )


async def test_fetch_shows_at_most_ten_tags_unless_verbose(connect: Connect) -> None:
    async with connect() as agent:
        tags = ",".join(f"t{i}" for i in range(13))
        await agent.call(
            "mark_publish", url="/t.md", body="# T\n", expected_version=0, metadata={"tags": tags}
        )
        fields, _ = split(await agent.call("mark_fetch", url="/t.md"))
        assert fields["tags"] == "t0,t1,t2,t3,t4,t5,t6,t7,t8,t9,+3 more"
        fields, _ = split(await agent.call("mark_fetch", url="/t.md", verbose=True))
        assert fields["tags"] == tags


async def test_folder_and_document_tools_refuse_the_other_kind_before_sending(
    connect: Connect,
) -> None:
    async with connect() as agent:
        await agent.call("mark_publish", url="/docs/a.md", body=QUIC, expected_version=0)
        for tool, args in (
            ("mark_list", {}),
            ("mark_lookup", {"query": "window"}),
        ):
            for path in ("/docs/a.md", "/docs/a.md/v1"):
                assert await agent.fail(tool, url=path, **args) == (
                    f"url: {path} is a document, not a folder: {tool} takes a folder such as "
                    "/docs/ (read the document with mark_fetch)"
                )
        assert await agent.fail("mark_versions", url="/docs/") == (
            "url: /docs/ is a folder, not a document: mark_versions takes a document such as "
            "/docs/index.md (list the folder with mark_list)"
        )
        # A folder named like a version is still a folder; a missing one is an answer.
        assert split(await agent.call("mark_list", url="/api/v2"))[0] == {"status": "not-found"}


async def test_fetch_title_is_the_lookup_title(connect: Connect) -> None:
    """One title rule (protocol.document) names a document in a fetch and in a lookup row."""
    cases = [
        ("/t/declared.md", "# Heading\n\ntext\n", {"title": "  Declared  "}, "Declared"),
        ("/t/h1.md", "---\nx: 1\n---\nintro\n  # First h1  \n# Second\n", {}, "First h1"),
        ("/t/own.md", "---\ntitle: Own title\n---\n# Heading\n", {}, "Own title"),
        ("/t/bare.md", "#\n# \t\n# Real\n", {}, "Real"),
        ("/t/plain.md", "no heading at all\n", {}, "plain.md"),
    ]
    async with connect() as agent:
        for path, body, meta, title in cases:
            await agent.call("mark_publish", url=path, body=body, expected_version=0, metadata=meta)
            fields, _ = split(await agent.call("mark_fetch", url=path))
            assert fields["title"] == title, path
        rows = await agent.call("mark_lookup", url="/t/", query="*", verbose=True)
        for path, _, _, title in cases:
            assert f"| {title} |" in rows, path


def big_document() -> str:
    """About 130 KB: sixty short sections and one section of 50,000 characters."""
    part = ("lorem ipsum dolor sit amet " * 6 + "\n") * 4
    sections = "".join(f"## Part {i}\n\n{part}\n" for i in range(60))
    return f"# Big\n\nIntro.\n\n{sections}## Huge\n\n" + "huge line of text\n" * 2_800


async def pages(agent: Session, tool: str, **args: object) -> str:
    """Follow a result's truncation markers to the end; check every page's bound and marker
    and return the body they add up to."""
    whole, offset, total = "", 0, None
    while True:
        text = await agent.call(tool, **args, **({"offset": offset} if offset else {}))
        assert len(text) <= bridge.MAX_RESULT
        _, body = split(text)
        marker = MARKER.search(body)
        assert marker is not None, body[-300:]
        numbers = [int(n.replace(",", "")) for n in marker.groups() if n and n[0].isdigit()]
        start, end, size = numbers
        assert (start, total or size) == (offset, size)
        total = size
        whole += body[: end - start]
        if marker.group(4) is None:
            return whole
        assert f"offset={end}" in marker.group(4)
        offset = end


async def test_a_large_document_comes_as_an_outline_and_force_pages_through_all_of_it(
    connect: Connect, host: MarkURL
) -> None:
    async with connect() as agent:
        doc = big_document()
        await agent.call("mark_publish", url="/big.md", body=doc, expected_version=0)
        size = len(doc.encode())
        assert await agent.call("mark_fetch", url="/big.md") == (
            f"status: ok\nversion: 1\ntitle: Big\nnote: {size:,} bytes, over 8 KB: the outline "
            f"follows. Fetch a section with {host.identity}/big.md#<anchor>, "
            "or everything with force=true."
            f"\n\n{mdoutline.outline(doc)}"
        )
        assert await pages(agent, "mark_fetch", url="/big.md", force=True) == doc
        huge = mdoutline.section(doc, "huge")
        assert huge is not None and len(huge) > bridge.MAX_RESULT
        assert await pages(agent, "mark_fetch", url="/big.md#huge") == huge
        assert "past the end" in await agent.fail("mark_fetch", url="/big.md", offset=size + 1)


async def test_list_versions_and_lookup_carry_their_lean_keys(connect: Connect) -> None:
    async with connect() as agent:
        for name in ("a.md", "b.md"):
            await agent.call(
                "mark_publish",
                url=f"/docs/{name}",
                body=QUIC,
                expected_version=0,
                metadata={"tags": "quic"},
            )
        first = await agent.call("mark_list", url="/docs/", page_size=1)
        fields, body = split(first)
        assert (fields["status"], fields["entries"], fields["complete"]) == ("ok", "1", "false")
        assert list(fields) == ["status", "entries", "complete", "next-cursor"]
        assert body == "# Index of /docs/\n\n- [a.md](a.md)\n\n*...truncated, too many entries*\n"
        second = await agent.call("mark_list", url="/docs/", cursor=fields["next-cursor"])
        assert split(second) == (
            {"status": "ok", "entries": "1", "complete": "true"},
            "# Index of /docs/\n\n- [b.md](b.md)\n",
        )

        fields, body = split(await agent.call("mark_versions", url="/docs/a.md"))
        assert fields == {"status": "ok", "total": "1", "current": "1", "chain-valid": "true"}
        assert body.startswith("# Version History: /docs/a.md\n\n- [v1](")

        found = await agent.call(
            "mark_lookup", url="/docs/", query="receive window", match="body", limit=3
        )
        assert found == (
            "status: ok\nmatches: 2\nmatch: body\n\n"
            '# Lookup matches for "receive window" in /docs\n\n'
            "| Path | Importance | Title | Tags | Snippet |\n"
            "|------|------------|-------|------|---------|\n"
            "| /docs/a.md#flow-control | 0.50 | QUIC notes › Flow control | quic | "
            "The receive window doubles. |\n"
            "| /docs/b.md#flow-control | 0.50 | QUIC notes › Flow control | quic | "
            "The receive window doubles. |\n"
        )
        assert "query must be at least 2" in await agent.fail("mark_lookup", url="/", query="x")


async def test_lookup_shows_ten_tags_unless_verbose(connect: Connect) -> None:
    async with connect() as agent:
        tags = ",".join(f"t{i}" for i in range(13))
        await agent.call(
            "mark_publish",
            url="/tagged.md",
            body="# Tagged\n",
            expected_version=0,
            metadata={"tags": tags},
        )
        lean = await agent.call("mark_lookup", url="/", query="tagged")
        assert "| t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, +3 more |" in lean
        verbose = await agent.call("mark_lookup", url="/", query="tagged", verbose=True)
        assert "| t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12 |" in verbose


# --- writing ----------------------------------------------------------------------------------


async def test_conflict_archived_and_not_permitted_are_results_the_agent_can_act_on(
    server: RunningServer, host: MarkURL, mode: str
) -> None:
    tokens = Tokens(None, {host.authority: DOCS_TOKEN})
    async with session(live_client(server, tokens), host, mode) as agent:
        await agent.call("mark_publish", url="/docs/a.md", body="# A\n", expected_version=0)
        conflict = await agent.call("mark_publish", url="/docs/a.md", body="x", expected_version=0)
        fields, body = split(conflict)
        assert fields == {
            "status": "conflict",
            "your-version": "0",
            "server-version": "1",
            "note": "publish again with on_conflict=merge to merge your edit",
        }
        assert body.startswith("# Version Conflict\n")

        appended = await agent.call("mark_append", url="/docs/a.md", body="more\n")
        assert list(split(appended)[0]) == ["status", "version", "modified"]
        assert split(appended)[0]["version"] == "2"
        assert split(
            await agent.call("mark_append", url="/docs/a.md", body="x\n", expected_version=1)
        )[0] == {"status": "conflict", "your-version": "1", "server-version": "2"}

        archived = await agent.call("mark_archive", url="/docs/a.md")
        assert archived == "status: ok\nversion: 2\narchived: true\n"
        assert await agent.call("mark_fetch", url="/docs/a.md") == (
            "status: archived\n\n# Archived\n\n/docs/a.md is archived\n"
        )
        refused = await agent.call("mark_publish", url="/other.md", body="x", expected_version=0)
        assert split(refused)[0] == {"status": "not-permitted"}
        assert await agent.call("mark_fetch", url="/missing.md") == (
            "status: not-found\n\n# Not found\n\n/missing.md not found\n"
        )


async def test_bad_arguments_are_one_line_tool_errors_naming_the_argument(
    connect: Connect,
) -> None:
    async with connect() as agent:
        assert "must end in .md" in await agent.fail(
            "mark_publish", url="/a.txt", body="x", expected_version=0
        )
        assert "'auth' is set by the client" in await agent.fail(
            "mark_publish", url="/a.md", body="x", expected_version=0, metadata={"auth": "x"}
        )
        assert (
            await agent.fail(
                "mark_publish", url="/a.md", body="x", expected_version=0, metadata={"Bad": "1"}
            )
            == 'metadata: metadata key "Bad" contains invalid characters'
        )
        assert await agent.fail("mark_fetch", url="http://x/a.md") == (
            "url: unsupported scheme 'http': only mark:// URLs are supported"
        )
        assert "non-empty body" in await agent.fail("mark_append", url="/a.md", body="")
        # What the schema refuses: one line per argument, the rule, what was given.
        assert await agent.fail("mark_list", url="/", page_size=0) == (
            "page_size: should be greater than or equal to 1 (got 0)"
        )
        assert await agent.fail("mark_lookup", url="/", query="ab", match="all") == (
            "match: should be 'catalog' or 'body' (got 'all')"
        )
        assert await agent.fail("mark_publish", url="/a.md", body="x") == (
            "expected_version: required"
        )
        assert await agent.fail(
            "mark_publish", url="/a.md", body="x", expected_version=-1, metadata={"tags": 3}
        ) == (
            "expected_version: should be greater than or equal to 0 (got -1); "
            "metadata.tags: should be a valid string (got 3)"
        )
        assert (
            await agent.fail("mark_lookup", url="/", query="ab", budget=100, offset=5)
            == "offset: leave it out with budget (a budgeted result is never cut)"
        )


async def test_a_body_the_server_would_refuse_for_its_size_is_never_sent(
    connect: Connect,
) -> None:
    big = "x" * 1_200_000
    async with connect() as agent:
        assert await agent.fail("mark_publish", url="/big.md", body=big, expected_version=0) == (
            "body is 1,200,000 bytes; a document holds at most 1,048,576 (1 MiB)"
        )
        await agent.call("mark_publish", url="/a.md", body="y" * 1_000_000, expected_version=0)
        assert await agent.fail("mark_append", url="/a.md", body="z" * 60_000) == (
            "the appended document is 1,060,001 bytes; a document holds at most 1,048,576 (1 MiB)"
        )
        fields, _ = split(await agent.call("mark_versions", url="/a.md"))
        assert fields["total"] == "1"


async def test_a_token_added_to_the_store_counts_without_a_restart(
    server: RunningServer, host: MarkURL, mode: str, tmp_path: Path
) -> None:
    store = TokenStore(tmp_path / "tokens.toml")
    async with session(live_client(server, Tokens(store)), host, mode) as agent:
        refused = await agent.fail("mark_publish", url="/a.md", body="# A\n", expected_version=0)
        assert refused.startswith("unauthorized: ")
        assert "-token, or `mark token add`" in refused
        store.add(host.authority, WRITE_TOKEN)
        created = await agent.call("mark_publish", url="/a.md", body="# A\n", expected_version=0)
        assert created.startswith("status: created\n")


# --- without -host, discover ----------------------------------------------------------------


async def test_without_host_urls_are_full_and_discover_needs_one(
    server: RunningServer, host: MarkURL, mode: str
) -> None:
    tokens = Tokens(None, {host.authority: WRITE_TOKEN})
    async with session(live_client(server, tokens), None, mode) as agent:
        assert "names no server" in await agent.fail("mark_fetch", url="/a.md")
        assert await agent.fail("mark_discover") == "url: required without -host (give mark://host)"
        assert split(await agent.call("mark_discover", url=server.url))[0] == {
            "status": "not-found"
        }
        manifest = "# Test site\n\n## Description\n\nFor the bridge.\n"
        await agent.call(
            "mark_publish",
            url=f"{server.url}/.well-known/agent-manifest.md",
            body=manifest,
            expected_version=0,
        )
        assert await agent.call("mark_discover", url=server.url + "/ignored") == (
            f"status: ok\nversion: 1\ntitle: Test site\n\n{manifest}"
        )


# --- a scripted pool: answers a live server will not give -------------------------------------

Answer = Callable[[wire.Request], bytes]


class ScriptedPool:
    """Stands in for ``connection.Pool``: every request is answered by ``answer`` (or it raises)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[wire.Request] = []

    async def request(self, authority: str, data: bytes) -> bytes:
        request = wire.parse_request(data)
        self.requests.append(request)
        return self.answer(request)

    async def close(self) -> None:
        pass


def respond(status: str, meta: dict[str, str] | None = None, body: bytes = b"") -> Answer:
    return lambda request: wire.emit_response(wire.Response(status, meta or {}, body))


@asynccontextmanager
async def scripted(answer: Answer, mode: str) -> AsyncIterator[Session]:
    client = Client(ScriptedPool(answer), attempts=1, rate_wait=0.0)  # type: ignore[arg-type]
    async with session(client, parse_url("mark://example.org"), mode) as opened:
        yield opened


def lookup_table() -> bytes:
    rows = [
        bodies.LookupRow(f"/docs/n{i}.md", "part", 0.5, f"Note {i}", ("a", "b"), "word " * 40)
        for i in range(300)
    ]
    return bodies.render_lookup("word", "/docs", rows, body_mode=True)


def index_page() -> bytes:
    names = [f"{'long-name-' * 8}{i}.md" for i in range(1000)]
    lines = b"".join(bodies.index_line(bodies.IndexEntry(n, False)) for n in names)
    return bodies.index_heading("/docs/") + lines


@pytest.mark.parametrize(
    ("tool", "args", "meta", "body", "resume"),
    [
        (
            "mark_lookup",
            {"url": "/docs/", "query": "word", "match": "body", "limit": 1000},
            {"matches": "300", "match": "body"},
            lookup_table(),
            "narrow the scope or lower the limit, or call mark_lookup with the same arguments",
        ),
        (
            "mark_list",
            {"url": "/docs/"},
            {"entries": "1000", "complete": "true"},
            index_page(),
            "call mark_list with the same arguments",
        ),
    ],
)
async def test_large_generated_results_are_bounded_and_continue_by_offset(
    mode: str, tool: str, args: dict[str, object], meta: dict[str, str], body: bytes, resume: str
) -> None:
    async with scripted(respond("ok", meta, body), mode) as agent:
        first = await agent.call(tool, **args)
        assert len(first) <= bridge.MAX_RESULT
        assert resume in first
        assert await pages(agent, tool, **args) == body.decode().lstrip("\n")


async def test_the_catalog_fallback_is_noted(mode: str) -> None:
    table = bodies.render_lookup("alpha", "/", [], body_mode=False)
    async with scripted(respond("ok", {"matches": "0"}, table), mode) as agent:
        found = await agent.call("mark_lookup", url="/", query="alpha", match="body")
        assert split(found)[0] == {"status": "ok", "matches": "0", "note": CATALOG_FALLBACK_NOTE}


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("unauthorized", "unauthorized: invalid token (give the bridge a token for this server"),
        ("bad-request", "bad-request: invalid token"),
        ("server-error", "server-error: invalid token"),
        ("rate-limited", "rate-limited: invalid token"),
    ],
)
async def test_auth_and_server_failures_are_tool_errors(
    mode: str, status: str, message: str
) -> None:
    answer = wire.emit_response(wire.error_response(status, "invalid token"))
    calls: list[tuple[str, dict[str, object]]] = [
        ("mark_fetch", {"url": "/a.md"}),
        ("mark_list", {"url": "/"}),
        ("mark_versions", {"url": "/a.md"}),
        ("mark_lookup", {"url": "/", "query": "ab"}),
        ("mark_publish", {"url": "/a.md", "body": "x", "expected_version": 0}),
        ("mark_append", {"url": "/a.md", "body": "x", "expected_version": 1}),
        ("mark_archive", {"url": "/a.md"}),
        ("mark_discover", {}),
    ]
    async with scripted(lambda request: answer, mode) as agent:
        for tool, args in calls:
            assert (await agent.fail(tool, **args)).startswith(message)


def raising(exc: Exception) -> Answer:
    def answer(request: wire.Request) -> bytes:
        raise exc

    return answer


async def test_transport_failures_and_unreadable_answers_are_tool_errors(mode: str) -> None:
    async with scripted(raising(Unreachable("example.org:6309: unreachable (timeout)")), mode) as a:
        assert await a.fail("mark_fetch", url="/a.md") == "example.org:6309: unreachable (timeout)"
    lost = TransportError("example.org:6309: connection lost\n(idle)", sent=True)
    async with scripted(raising(lost), mode) as agent:
        message = await agent.fail("mark_publish", url="/a.md", body="x", expected_version=0)
        assert "\n" not in message
        assert message.startswith(
            "example.org:6309: connection lost (idle); the outcome of PUBLISH"
        )
        assert "fetch mark://example.org/a.md before retrying" in message
    async with scripted(lambda request: b"garbage", mode) as agent:
        failure = await agent.fail("mark_fetch", url="/a.md")
        assert failure.startswith("example.org:6309: unreadable response (")


async def test_requests_carry_exactly_the_arguments_given(mode: str) -> None:
    pool_answer = respond("ok", {"matches": "0", "match": "body"}, lookup_table())
    client = Client(ScriptedPool(pool_answer), attempts=1)  # type: ignore[arg-type]
    pool = client.pool
    async with session(client, parse_url("mark://example.org"), mode) as agent:
        await agent.call(
            "mark_lookup", url="/docs/", query="a b", filter="tag=x", limit=3, match="body"
        )
        await agent.call("mark_list", url="/d/", include_archived=True, cursor="AQ", page_size=5)
        await agent.call(
            "mark_publish",
            url="/a.md",
            body="# A\n",
            expected_version=2,
            metadata={"tags": "a,b", "importance": "0.9"},
        )
    sent = [(r.verb, r.path, r.meta, r.body) for r in pool.requests]  # type: ignore[attr-defined]
    assert sent == [
        (
            "LOOKUP",
            "/docs/",
            {"query": "a b", "filter": "tag=x", "limit": "3", "match": "body"},
            b"",
        ),
        ("LIST", "/d/", {"cursor": "AQ", "page-size": "5", "include-archived": "true"}, b""),
        ("FETCH", "/a.md", {}, b""),  # the current metadata, to name what the publish drops
        (
            "PUBLISH",
            "/a.md",
            {"tags": "a,b", "importance": "0.9", "expected-version": "2"},
            b"# A\n",
        ),
    ]


# --- the page cut -----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab\n€"), max_size=3000),
    room=st.integers(min_value=300, max_value=1200),
)
def test_pages_are_bounded_cut_at_lines_and_add_up_to_the_text(text: str, room: int) -> None:
    whole, offset = "", 0
    while True:
        page = bridge.page(text, offset, room, lambda end: f"offset={end}")
        assert len(page) <= room
        if offset == 0 and len(text) <= room:
            assert page == text
            return
        marker = MARKER.search(page)
        assert marker is not None
        numbers = [int(n.replace(",", "")) for n in marker.groups() if n and n[0].isdigit()]
        start, end, total = numbers
        assert (start, total) == (offset, len(text))
        shown = page[: end - start]
        if "\n" in text[offset:end] and end < total:
            assert shown.endswith("\n")
        whole += shown
        if marker.group(4) is None:
            assert whole == text
            return
        assert end > offset
        offset = end


# --- the `mark mcp` command -------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MARK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MARK_HOST", raising=False)
    monkeypatch.delenv("MARK_AUTH", raising=False)
    return tmp_path / "home"


def test_help_lists_the_command_without_loading_the_sdk() -> None:
    code = (
        "import sys\nfrom markproto.client.cli import main\n"
        "for args in (['--help'], ['mcp', '--help']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'pydantic')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "[]"
    assert "  mcp " in out
    for option in ("-host, --host", "-token, --token", "-profile, --profile", "-insecure"):
        assert option in out


@pytest.mark.usefixtures("home")
def test_the_command_serves_until_stdin_ends() -> None:
    result = CliRunner().invoke(main, ["mcp", "--host", "mark://127.0.0.1:1"], input="")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.usefixtures("home")
def test_a_token_without_host_is_not_sent_anywhere() -> None:
    result = CliRunner().invoke(main, ["mcp", "-token", "secret"], input="")
    assert result.exit_code == 0
    assert result.stderr == (
        "mark: -token and MARK_AUTH go only to the -host server; without -host they are unused\n"
    )


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("mark://h/docs/", "give mark://host[:port] without a path"),
        ("mark://h/#x", "give mark://host[:port] without a path"),
        ("http://h", "unsupported scheme 'http'"),
    ],
)
def test_host_must_be_a_bare_server(host: str, message: str) -> None:
    result = CliRunner().invoke(main, ["mcp", "-host", host], input="")
    assert result.exit_code == 2
    assert f"mark: Invalid value for -host: {message}" in result.stderr


@pytest.mark.usefixtures("home")
def test_hosts_repeat_and_the_profile_is_lean_or_full(monkeypatch: pytest.MonkeyPatch) -> None:
    two = ["mcp", "-host", "mark://127.0.0.1:1", "--host", "mark://127.0.0.1:2"]
    served = CliRunner().invoke(main, [*two, "-profile", "lean"], input="")
    assert (served.exit_code, served.stderr) == (0, "")
    twice = CliRunner().invoke(main, ["mcp", "-host", "mark://h", "-host", "mark://h:6309"])
    assert twice.exit_code == 2
    assert "Invalid value for -host: mark://h is given twice" in twice.stderr
    monkeypatch.setenv("MARK_MCP_PROFILE", "tiny")
    wrong = CliRunner().invoke(main, ["mcp", "-host", "mark://h"], input="")
    assert wrong.exit_code == 2
    assert "'tiny' is not one of 'lean', 'full'" in wrong.stderr
