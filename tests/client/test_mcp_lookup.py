"""``budget`` on the lookup tools and ``mark_lookup_all`` across several servers: against live
servers through the SDK's client, and the expansion itself over scripted documents."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.agent import Session, live_client, session, split
from support.server import WRITE_TOKEN, RunningServer, running_server

from markproto.client import Client, Result, Tokens, Unreachable
from markproto.client.mcp import expand
from markproto.protocol.url import MarkURL, parse_url

QUIC = (
    "# QUIC notes\n\nIntro.\n\n## Flow control\n\nThe receive window doubles when half is used."
    "\n\n>>> not a frame\n\n## Closing\n\nA fast close skips the wait.\n"
)
OLD = "# Old QUIC notes\n\nThe window was fixed.\n"
TLS = "# TLS\n\nPinned on first use.\n"
FILLER = "".join(f"## Part {i}\n\n{'lorem ipsum dolor ' * 30}\n\n" for i in range(30))
BIG = f"# Big\n\nIntro.\n\n{FILLER}## Window\n\nThe receive window of the big one.\n"
FRAME = re.compile(r"^>>> (/\S+(?: outline)?)$", re.M)


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    async with (
        running_server(tmp_path / "one") as one,
        running_server(tmp_path / "two") as two,
    ):
        yield one, two


def tokens(*running: RunningServer) -> Tokens:
    return Tokens(None, {parse_url(s.url).authority: WRITE_TOKEN for s in running})


async def seed(agent: Session, base: str = "") -> None:
    docs = [
        (
            "/notes/quic.md",
            QUIC,
            {
                "tags": "quic",
                "importance": "0.9",
                "rel-supersedes": "/notes/old.md",
                "rel-depends-on": "/notes/tls.md, mark://elsewhere/x.md",
            },
        ),
        ("/notes/old.md", OLD, {"tags": "quic", "importance": "0.2"}),
        ("/notes/tls.md", TLS, {"tags": "tls"}),
        ("/notes/big.md", BIG, {"tags": "quic", "importance": "0.1"}),
    ]
    for path, body, meta in docs:
        await agent.call(
            "mark_publish", url=base + path, body=body, expected_version=0, metadata=meta
        )


# --- budget --------------------------------------------------------------------------------------


async def test_budget_brings_the_matched_sections_framed_and_within_the_budget(
    servers: tuple[RunningServer, RunningServer], mode: str
) -> None:
    one, _ = servers
    host = parse_url(one.url)
    async with session(live_client(one, tokens(one)), host, mode) as agent:
        await seed(agent)
        text = await agent.call(
            "mark_lookup", url="/notes/", query="receive window", match="body", budget=400
        )
        assert len(text.encode()) <= 400 * 4
        fields, body = split(text)
        assert fields == {"status": "ok", "matches": "2", "match": "body"}
        table, _, expansion = body.partition("\n>>> ")
        # Rows whose section follows in full carry no snippet.
        assert (
            "| /notes/quic.md#flow-control | 0.90 | QUIC notes › Flow control | quic |  |" in table
        )
        assert "| /notes/big.md#window | 0.10 | Big › Window | quic |  |" in table
        assert (">>> " + expansion).startswith(
            ">>> /notes/quic.md/v1#flow-control\n"
            "## Flow control\n\nThe receive window doubles when half is used.\n\n"
            " >>> not a frame\n\n"  # a body line that looks like a frame is indented
            ">>> /notes/big.md/v1#window\n## Window\n\nThe receive window of the big one.\n"
        )
        assert FRAME.findall(body) == [
            "/notes/quic.md/v1#flow-control",
            "/notes/big.md/v1#window",
            "/notes/old.md/v1",
            "/notes/tls.md/v1",
        ]
        # The top document's relations: listed, and the same server's expanded, supersedes first.
        assert (
            ">>> related: rel-depends-on /notes/tls.md, rel-depends-on mark://elsewhere/x.md, "
            "rel-supersedes /notes/old.md\n>>> /notes/old.md/v1\n" + OLD + ">>> /notes/tls.md/v1\n"
        ) in body
        assert body.endswith(
            ">>> note: expanded 2 of 2 rows and 2 related documents within the budget\n"
        )


async def test_a_catalog_row_brings_a_small_document_whole_and_a_large_one_in_part(
    servers: tuple[RunningServer, RunningServer], mode: str
) -> None:
    one, _ = servers
    async with session(live_client(one, tokens(one)), parse_url(one.url), mode) as agent:
        await seed(agent)
        await agent.call(
            "mark_publish", url="/notes/quic.md", body=QUIC, expected_version=1, metadata={}
        )  # no relations now
        _, body = split(await agent.call("mark_lookup", url="/", query="quic", budget=3000))
        frames = FRAME.findall(body)
        assert frames == ["/notes/quic.md/v2", "/notes/old.md/v1", "/notes/big.md/v1 outline"]
        assert ">>> /notes/quic.md/v2\n" + QUIC.replace("\n>>> ", "\n >>> ") in body
        assert ">>> /notes/big.md/v1 outline\n- Big (#big, " in body
        # A large document's sections holding every query word, when there are such sections.
        _, body = split(await agent.call("mark_lookup", url="/", query="big", budget=3000))
        assert FRAME.findall(body) == ["/notes/big.md/v1#big", "/notes/big.md/v1#window"]


async def test_what_does_not_fit_is_named_and_a_tiny_budget_says_so(
    servers: tuple[RunningServer, RunningServer], mode: str
) -> None:
    one, _ = servers
    async with session(live_client(one, tokens(one)), parse_url(one.url), mode) as agent:
        await seed(agent)
        text = await agent.call("mark_lookup", url="/", query="quic", budget=450)
        assert len(text.encode()) <= 450 * 4
        assert FRAME.findall(text) == ["/notes/quic.md/v1", "/notes/old.md/v1", "/notes/tls.md/v1"]
        assert re.search(
            r"\n>>> note: expanded 2 of 3 rows and 1 related document within the budget\n"
            r">>> note: did not fit: /notes/big\.md \(~\d+ tokens\)\n\Z",
            text,
        )
        tiny = await agent.call("mark_lookup", url="/", query="quic", budget=1)
        assert tiny.endswith(
            "\n>>> note: the table used the budget: lower the limit or raise the budget\n"
        )


# --- mark_lookup_all ---------------------------------------------------------------------------


async def test_lookup_all_merges_rows_as_urls_and_reports_a_failing_server(
    servers: tuple[RunningServer, RunningServer], mode: str
) -> None:
    one, two = servers
    a, b = parse_url(one.url), parse_url(two.url)
    closed = parse_url("mark://127.0.0.1:1")
    client = live_client([one, two], tokens(one, two))
    client.attempts = 1
    async with session(client, [a, b, closed], mode) as agent:
        await agent.call(
            "mark_publish",
            url="/a.md",
            body="# A\n\nThe papaya reverts.\n",
            expected_version=0,
            metadata={"tags": "fruit", "importance": "0.4"},
        )
        await agent.call(
            "mark_publish",
            url=f"{b.identity}/b.md",
            body="# B\n\nA papaya ripens.\n",
            expected_version=0,
            metadata={"tags": "fruit", "importance": "0.8"},
        )
        text = await agent.call("mark_lookup_all", query="fruit")
        fields, body = split(text)
        assert fields == {
            "status": "partial",
            "servers": "3",
            "succeeded": "2",
            "failed": "1",
            "matches": "2",
            "match": "catalog",
        }
        assert body == (
            '# Lookup matches for "fruit" in /\n\n'
            "| Path | Importance | Title | Tags |\n|------|------------|-------|------|\n"
            f"| {b.identity}/b.md | 0.80 | B | fruit |\n"  # by importance across servers
            f"| {a.identity}/a.md | 0.40 | A | fruit |\n"
            "\n| Server | Failure |\n|--------|---------|\n"
            "| mark://127.0.0.1:1 | 127.0.0.1:1: unreachable \\(connection refused\\) |\n"
        )
        found = await agent.call(
            "mark_lookup_all", query="papaya", match="body", limit=1, budget=500
        )
        fields, body = split(found)
        assert (fields["matches"], fields["match"]) == ("1", "body")
        assert f"| {a.identity}/a.md#a | 0.40 | A › A | fruit |  |" in body
        assert f">>> {a.identity}/a.md/v1#a\n# A\n\nThe papaya reverts.\n" in body
        assert await agent.fail("mark_lookup_all", query="fruit", scope="/a.md") == (
            "scope: /a.md is a document, not a folder: mark_lookup_all takes a folder such as / "
            "(read the document with mark_fetch)"
        )
        assert await agent.fail("mark_lookup_all", query="fruit", scope="docs") == (
            "scope: 'docs' is not a folder path such as / or /docs/"
        )


async def test_lookup_all_is_a_tool_error_when_every_server_fails(mode: str) -> None:
    client = Client(attempts=1, retry_delay=0)
    hosts = [parse_url("mark://127.0.0.1:1"), parse_url("mark://127.0.0.1:2")]
    async with session(client, hosts, mode) as agent:
        assert await agent.fail("mark_lookup_all", query="fruit") == (
            "every server failed: mark://127.0.0.1:1: 127.0.0.1:1: unreachable (connection "
            "refused); mark://127.0.0.1:2: 127.0.0.1:2: unreachable (connection refused)"
        )


# --- the expansion over scripted documents -----------------------------------------------------

HOST = parse_url("mark://example.org")


def doc(body: str, version: int = 1, **meta: str) -> Result:
    return Result("ok", {"version": str(version), **meta}, body.encode())


def fetcher(docs: dict[str, Result | Exception]) -> tuple[expand.Fetch, list[str]]:
    asked: list[str] = []

    async def fetch(url: MarkURL) -> Result:
        asked.append(url.path)
        answer = docs.get(url.path, Result("not-found", {}, b""))
        if isinstance(answer, Exception):
            raise answer
        return answer

    return fetch, asked


def row(path: str, anchor: str = "") -> MarkURL:
    return HOST.with_path(path) if not anchor else parse_url(f"{HOST.identity}{path}#{anchor}")


def label(url: MarkURL) -> str:
    return url.path


async def test_text_shown_once_is_a_stub_after_and_failures_are_noted() -> None:
    fetch, asked = fetcher(
        {
            "/a.md": doc("# A\n\nalpha\n\n## S\n\nsection\n"),
            "/down.md": Unreachable("example.org:6309: unreachable (timeout)"),
        }
    )
    rows = [row("/a.md"), row("/a.md", "s"), row("/a.md", "gone"), row("/down.md"), row("/x.md")]
    out = await expand.expand(rows, "alpha", fetch, 4000, label)
    assert out.text == (
        ">>> /a.md/v1\n# A\n\nalpha\n\n## S\n\nsection\n"
        ">>> /a.md/v1#s: shown above\n"
        ">>> note: expanded 2 of 5 rows within the budget\n"
        ">>> note: not shown: /a.md#gone (no such section in v1), /down.md "
        "(example.org:6309: unreachable (timeout)), /x.md (not-found)\n"
    )
    assert out.rows == {rows[0], rows[1]}
    assert asked == ["/a.md", "/down.md", "/x.md"]  # one fetch per document


async def test_at_most_ten_documents_are_fetched() -> None:
    fetch, asked = fetcher({f"/d{i}.md": doc(f"# D{i}\n") for i in range(15)})
    out = await expand.expand([row(f"/d{i}.md") for i in range(15)], "d", fetch, 40_000, label)
    assert len(asked) == expand.MAX_FETCHES
    assert out.text.endswith(
        ">>> note: expanded 10 of 15 rows within the budget\n"
        ">>> note: fetch limit reached (10 documents): 5 more rows not expanded\n"
    )
