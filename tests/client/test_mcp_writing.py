"""The bridge's writing tools against a live server: metadata that is never lost by accident,
and conflicts merged three ways (``on_conflict: merge``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import pytest
from support.agent import Session, live_client, session, split
from support.server import WRITE_TOKEN, RunningServer

from markproto.client import Tokens
from markproto.protocol.url import parse_url

META = {
    "tags": "quic,transport",
    "importance": "0.9",
    "title": "QUIC",
    "rel-supersedes": "/old.md",
    "retention": "5",
}
BASE = "# Notes\n\nalpha\n\nbeta\n\ngamma\n"
Connect = Callable[[], AbstractAsyncContextManager[Session]]


@pytest.fixture
def connect(server: RunningServer, mode: str) -> Connect:
    host = parse_url(server.url)
    tokens = Tokens(None, {host.authority: WRITE_TOKEN})
    return lambda: session(live_client(server, tokens), host, mode)


async def publish(agent: Session, body: str, expected: int, **args: object) -> dict[str, str]:
    fields, _ = split(
        await agent.call("mark_publish", url="/n.md", body=body, expected_version=expected, **args)
    )
    return fields


async def stored(agent: Session) -> tuple[dict[str, str], str]:
    return split(await agent.call("mark_fetch", url="/n.md", verbose=True))


# --- metadata ----------------------------------------------------------------------------------


async def test_a_publish_without_metadata_keeps_it_and_names_what_it_kept(
    connect: Connect,
) -> None:
    async with connect() as agent:
        await publish(agent, "# QUIC\n\nv1\n", 0, metadata=META)
        fields = await publish(agent, "# QUIC\n\nv2\n", 1)
        assert fields["status"] == "created"
        assert fields["kept"] == "importance, rel-supersedes, tags, title, type (metadata of v1)"
        assert fields["dropped"] == "retention (not in metadata; give them to keep them)"
        meta, body = await stored(agent)
        assert body == "# QUIC\n\nv2\n"
        assert {k: meta[k] for k in ("tags", "importance", "title", "rel-supersedes")} == {
            k: META[k] for k in ("tags", "importance", "title", "rel-supersedes")
        }
        assert "retention" not in meta
        # The catalog still finds it by its tag.
        found = await agent.call("mark_lookup", url="/", query="transport")
        assert "| /n.md | 0.90 | QUIC | quic, transport |" in found


async def test_a_publish_with_metadata_replaces_it_and_names_every_dropped_key(
    connect: Connect,
) -> None:
    async with connect() as agent:
        await publish(agent, "# QUIC\n", 0, metadata=META)
        fields = await publish(agent, "# QUIC\n\nmore\n", 1, metadata={"tags": "quic"})
        assert "kept" not in fields
        assert fields["dropped"] == (
            "importance, rel-supersedes, retention, title (not in metadata; give them to keep them)"
        )
        meta, _ = await stored(agent)
        assert (meta["tags"], meta["type"]) == ("quic", "Document")
        assert "importance" not in meta
        # A create has nothing to carry over or drop; nor has an unarchive (an empty body).
        created = await agent.call("mark_publish", url="/m.md", body="# M\n", expected_version=0)
        assert list(split(created)[0]) == ["status", "version", "modified"]


async def test_an_append_keeps_the_catalog_keys_and_overlays_what_it_is_given(
    connect: Connect,
) -> None:
    async with connect() as agent:
        await publish(agent, "# QUIC\n", 0, metadata=META)
        await agent.call("mark_append", url="/n.md", body="more\n", metadata={"agent": "bot"})
        meta, body = await stored(agent)
        assert body == "# QUIC\nmore\n"
        assert meta["agent"] == "bot"
        for key in ("tags", "importance", "title", "rel-supersedes"):
            assert meta[key] == META[key]
        assert "retention" not in meta  # pruning is asked for on each write, never inherited


# --- on_conflict -------------------------------------------------------------------------------


async def test_a_conflict_with_edits_apart_merges_and_publishes(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent, BASE, 0, metadata={"tags": "a"})
        await publish(agent, BASE.replace("alpha", "ALPHA"), 1, metadata={"tags": "a,b"})
        fields = await publish(agent, BASE.replace("gamma", "GAMMA"), 1, on_conflict="merge")
        assert fields["status"] == "created"
        assert fields["version"] == "3"
        assert fields["merged"] == "your edit of v1 and server v2, clean: published"
        meta, body = await stored(agent)
        assert body == "# Notes\n\nALPHA\n\nbeta\n\nGAMMA\n"
        assert meta["tags"] == "a,b"  # the writer left metadata alone: the server's stays


async def test_an_overlap_comes_back_marked_and_unpublished(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent, BASE, 0)
        await publish(agent, BASE.replace("beta", "beta (server)"), 1)
        text = await agent.call(
            "mark_publish",
            url="/n.md",
            body=BASE.replace("beta", "beta (mine)"),
            expected_version=1,
            on_conflict="merge",
        )
        fields, body = split(text)
        assert fields == {
            "status": "conflict",
            "your-version": "1",
            "server-version": "2",
            "merged": "1 overlapping region between your edit of v1 and server v2: resolve the "
            "<<<<<<< markers in the text below, then publish it with expected_version=2",
        }
        assert body == (
            "# Notes\n\nalpha\n\n<<<<<<< yours (v1 + your edit)\nbeta (mine)\n=======\n"
            "beta (server)\n>>>>>>> server v2\n\ngamma\n"
        )
        assert split(await agent.call("mark_versions", url="/n.md"))[0]["total"] == "2"
        resolved = body.replace("<<<<<<< yours (v1 + your edit)\n", "").split("=======\n")[0]
        resolved += "\ngamma\n"
        assert (await publish(agent, resolved, 2))["status"] == "created"


async def test_metadata_both_sides_changed_is_a_clash_to_resolve(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent, BASE, 0, metadata={"tags": "a", "importance": "0.5"})
        await publish(agent, BASE, 1, metadata={"tags": "b", "importance": "0.5"})
        fields = await publish(
            agent, BASE + "delta\n", 1, metadata={"tags": "c"}, on_conflict="merge"
        )
        assert fields["status"] == "conflict"
        assert fields["merged"] == (
            "your edit of v1 and server v2: the text merges cleanly but the metadata clashes: "
            "publish the merged text below with the metadata you mean with expected_version=2"
        )
        assert fields["clashes"] == "tags (changed on both sides; yours kept)"
        # Yours left out importance (the server did not change it), so the candidate drops it.
        assert json.loads(fields["metadata"]) == {"tags": "c"}


async def test_merging_a_create_over_the_same_text_changes_nothing(connect: Connect) -> None:
    async with connect() as agent:
        await publish(agent, BASE, 0, metadata={"tags": "a"})
        fields = await publish(agent, BASE, 0, on_conflict="merge")
        assert fields["status"] == "ok"  # the identical version: no new one
        assert fields["version"] == "1"
        assert fields["merged"] == "your edit of v0 and server v1, clean: published"
        different = await publish(agent, "# Other\n", 0, on_conflict="merge")
        assert different["status"] == "conflict"
        assert different["merged"].startswith("1 overlapping region between your edit of v0")


async def test_a_missing_base_or_document_leaves_the_conflict_as_the_server_said(
    connect: Connect,
) -> None:
    async with connect() as agent:
        missing = await publish(agent, "# X\n", 3, on_conflict="merge")
        assert missing == {
            "status": "conflict",
            "your-version": "3",
            "server-version": "0",
            "note": "not merged: v3, the version you started from, cannot be read (not-found)",
        }
        await publish(agent, BASE, 0)
        stale = await publish(agent, "# X\n", 7, on_conflict="merge")
        assert stale == {
            "status": "conflict",
            "your-version": "7",
            "server-version": "1",
            "note": "not merged: v7, the version you started from, cannot be read (not-found)",
        }
