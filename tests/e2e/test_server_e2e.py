"""The server over real QUIC: races, traversal, hand-made roots, auth, and reloads."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path

import pytest
from support import exchange
from support.exchange import Remote
from support.quicclient import connect
from support.server import WRITE_TOKEN, RunningServer, TokenSpec, running_server, write_tokens

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import bodies, storefmt, wire

from .conftest import Ask

AUTH = {"auth": WRITE_TOKEN}


async def test_twenty_clients_racing_expected_version(tmp_path: Path) -> None:
    async with running_server(tmp_path / "root") as server:
        pools = [Pool(Trust(cafile=str(server.cert))) for _ in range(20)]

        async def attempt(i: int, expected: int) -> wire.Response:
            meta = {**AUTH, "expected-version": str(expected)}
            req = wire.Request("PUBLISH", "/race.md", meta, f"client {i} at {expected}\n".encode())
            raw = await pools[i].request(f"localhost:{server.port}", wire.emit_request(req))
            return wire.parse_response(raw)

        try:
            for expected in range(5):
                results = await asyncio.gather(*(attempt(i, expected) for i in range(20)))
                statuses = sorted(r.status for r in results)
                assert statuses == ["conflict"] * 19 + ["created"], statuses
                winner = next(r for r in results if r.status == "created")
                assert winner.meta["version"] == str(expected + 1)
                losers = [r for r in results if r.status == "conflict"]
                assert {r.meta["server-version"] for r in losers} <= {
                    str(expected),
                    str(expected + 1),
                }
            versions = wire.emit_request(wire.Request("VERSIONS", "/race.md", {}, b""))
            history = wire.parse_response(
                await pools[0].request(f"localhost:{server.port}", versions)
            )
        finally:
            for pool in pools:
                await pool.close()
        assert [e.version for e in bodies.parse_history(history.body)] == [5, 4, 3, 2, 1]
        assert history.meta["chain-valid"] == "true"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/../etc/passwd", "/../etc/passwd not found"),
        ("/docs/../../x.md", "/docs/../../x.md not found"),
        ("/%2e%2e/x.md", "/%2e%2e/x.md not found"),
    ],
)
async def test_traversal_is_not_found(ask: Ask, path: str, message: str) -> None:
    for verb in ("FETCH", "LIST", "VERSIONS"):
        response = await ask(verb, path)
        assert response.status == "not-found"
        assert response.body == f"\n# Not found\n\n{message}\n".encode()


async def test_symlinks_out_of_the_root_are_not_served(server: RunningServer, ask: Ask) -> None:
    outside = server.root.parent / "outside"
    (outside / "versions/secret.md").mkdir(parents=True)
    (outside / "versions/secret.md/v1").write_bytes(storefmt.emit_version(1, None, {}, b"secret"))
    os.symlink("versions/secret.md/v1", outside / "secret.md")
    os.symlink(outside, server.root / "escape")
    os.symlink("/etc/passwd", server.root / "passwd.md")
    await server.app.rescan()
    for path in ("/escape/secret.md", "/passwd.md", "/escape"):
        response = await ask("FETCH", path)
        assert response.status == "not-found", path
    assert (await ask("LIST", "/escape")).status == "not-found"
    listing = await ask("LIST", "/")
    assert b"escape" not in listing.body
    assert b"passwd" not in listing.body


def _lay_out_reference_root(root: Path) -> dict[str, bytes]:
    """A root as the reference writes it: per-document folders, a legacy flat history, and an
    old-store version file that says archived in place."""
    files: dict[str, bytes] = {}
    v1 = storefmt.emit_version(1, None, {"title": "Guide", "tags": "a,b"}, b"# Guide\n\nOne.\n")
    v2 = storefmt.emit_version(2, storefmt.hash_ref(v1), {"title": "Guide"}, b"# Guide\n\nTwo.\n")
    (root / "docs/versions/guide.md").mkdir(parents=True)
    (root / "docs/versions/guide.md/v1").write_bytes(v1)
    (root / "docs/versions/guide.md/v2").write_bytes(v2)
    os.symlink("versions/guide.md/v2", root / "docs/guide.md")
    files["/docs/guide.md"] = v2
    old = storefmt.emit_version(1, None, {}, b"# Old\n")
    (root / "docs/versions/old.md.v1").write_bytes(old)
    os.symlink("versions/old.md.v1", root / "docs/old.md")
    files["/docs/old.md"] = old
    gone = b"---\nversion: 1\narchived: true\n---\n# Gone\n"
    (root / "versions").mkdir()
    (root / "versions/gone.md.v1").write_bytes(gone)
    os.symlink("versions/gone.md.v1", root / "gone.md")
    (root / "plain.md").write_text("# no history\n")
    return files


async def test_a_hand_made_reference_root_is_served(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    files = _lay_out_reference_root(root)
    async with (
        running_server(root) as server,
        Pool(Trust(cafile=str(server.cert))) as pool,
    ):
        ask = functools.partial(exchange.ask, Remote(pool, f"localhost:{server.port}"))
        guide = await ask("FETCH", "/docs/guide.md")
        assert guide.status == "ok"
        assert guide.body == b"# Guide\n\nTwo.\n"
        assert guide.meta["etag"] == storefmt.etag(files["/docs/guide.md"])
        assert guide.meta["version"] == "2"
        assert (await ask("FETCH", "/docs/guide.md/v1")).meta["tags"] == "a,b"
        versions = await ask("VERSIONS", "/docs/guide.md")
        assert versions.meta["chain-valid"] == "true"
        assert (await ask("FETCH", "/docs/old.md")).body == b"# Old\n"
        assert (await ask("FETCH", "/gone.md")).status == "archived"
        assert (await ask("FETCH", "/plain.md")).status == "not-found"
        listing = await ask("LIST", "/docs")
        assert listing.body.endswith(b"- [guide.md](guide.md)\n- [old.md](old.md)\n")
        # The next write migrates the legacy history into the per-document layout.
        meta = {**AUTH, "expected-version": "1"}
        written = await ask("PUBLISH", "/docs/old.md", meta, b"# Old\n\nNew.\n")
        assert written.status == "created"
        assert os.readlink(root / "docs/old.md") == "versions/old.md/v2"
        assert (await ask("VERSIONS", "/docs/old.md")).meta["chain-valid"] == "true"
        assert (root / "docs/versions/old.md/v1").read_bytes() == files["/docs/old.md"]


async def test_read_tokens_protect_every_read_verb(tmp_path: Path) -> None:
    tokens = {
        "writer": TokenSpec(WRITE_TOKEN),
        "reader": TokenSpec("reader-token", ("/private/**",), ("read",)),
    }
    async with (
        running_server(tmp_path / "root", tokens=tokens) as server,
        Pool(Trust(cafile=str(server.cert))) as pool,
    ):
        ask = functools.partial(exchange.ask, Remote(pool, f"localhost:{server.port}"))
        assert (await ask("PUBLISH", "/private/a.md", AUTH, b"a")).status == "created"
        assert (await ask("PUBLISH", "/public.md", AUTH, b"p")).status == "created"
        digest = (await ask("FETCH", "/private/a.md", {"auth": "reader-token"})).meta[
            "content-hash"
        ]
        for verb, path in [
            ("FETCH", "/private/a.md"),
            ("FETCH", "/private/a.md/v1"),
            ("FETCH", f"/{digest}"),
            ("VERSIONS", "/private/a.md"),
            ("LIST", "/private"),
        ]:
            if verb == "FETCH" and path.startswith("/sha256-"):
                assert (await ask(verb, path)).status == "not-found"
            else:
                assert (await ask(verb, path)).status == "unauthorized", (verb, path)
                denied = await ask(verb, path, {"auth": WRITE_TOKEN})
                assert denied.status == "not-permitted", (verb, path)
            assert (await ask(verb, path, {"auth": "reader-token"})).status == "ok", (verb, path)
        root_listing = await ask("LIST", "/")
        assert b"private" not in root_listing.body
        assert root_listing.meta["entries"] == "1"
        assert (await ask("FETCH", "/public.md", {"auth": "bogus"})).status == "ok"


async def test_tokens_file_changes_are_picked_up(server: RunningServer, ask: Ask) -> None:
    assert (await ask("PUBLISH", "/a.md", {"auth": "new-token"}, b"x")).status == "unauthorized"
    assert server.tokens_file is not None
    write_tokens(server.tokens_file, {"new": TokenSpec("new-token")})
    await server.app.reload()
    assert (await ask("PUBLISH", "/a.md", {"auth": "new-token"}, b"x")).status == "created"
    assert (await ask("PUBLISH", "/b.md", AUTH, b"x")).status == "unauthorized"


async def test_files_changed_behind_the_server_are_picked_up(
    server: RunningServer, ask: Ask
) -> None:
    assert (await ask("PUBLISH", "/synced.md", AUTH, b"# One\n")).status == "created"
    # A sync tool brings in version 2 and a new document, and removes nothing.
    data = (server.root / "versions/synced.md/v1").read_bytes()
    v2 = storefmt.emit_version(2, storefmt.hash_ref(data), {"type": "Document"}, b"# Two\n")
    (server.root / "versions/synced.md/v2").write_bytes(v2)
    os.replace(_symlink(server.root, "versions/synced.md/v2"), server.root / "synced.md")
    (server.root / "notes/versions/new.md").mkdir(parents=True)
    (server.root / "notes/versions/new.md/v1").write_bytes(
        storefmt.emit_version(1, None, {"tags": "synced"}, b"# New\n\nfresh words\n")
    )
    os.symlink("versions/new.md/v1", server.root / "notes/new.md")
    assert (await ask("FETCH", "/synced.md")).body == b"# One\n"  # not yet scanned
    await server.app.rescan()
    assert (await ask("FETCH", "/synced.md")).body == b"# Two\n"
    assert (await ask("FETCH", "/notes/new.md")).status == "ok"
    found = await ask("LOOKUP", "/", {"query": "fresh words", "match": "body"})
    assert b"/notes/new.md" in found.body
    os.unlink(server.root / "notes/new.md")
    await server.app.rescan()
    assert (await ask("FETCH", "/notes/new.md")).status == "not-found"
    gone = await ask("LOOKUP", "/", {"query": "fresh words", "match": "body"})
    assert gone.meta["matches"] == "0"


def _symlink(root: Path, target: str) -> Path:
    tmp = root / ".swap-link"
    os.symlink(target, tmp)
    return tmp


async def test_a_client_over_its_rate_gets_the_rate_limited_answer(tmp_path: Path) -> None:
    async with running_server(tmp_path / "root", rate_limit=0.001, rate_burst=2) as server:
        client = await connect("127.0.0.1", server.port, cafile=server.cert)
        try:
            health = b"FETCH /health\n"
            answers = [await client.request(health) for _ in range(3)]
        finally:
            client.hang_up()
    assert [wire.parse_response(a).status for a in answers[:2]] == ["ok", "ok"]
    limited = b"---\nstatus: rate-limited\n---\n\n# Rate limited\n\nrate limit exceeded\n"
    assert answers[2] == limited


async def test_a_connection_whose_write_passed_the_gate_is_not_held_to_its_address_rate(
    tmp_path: Path,
) -> None:
    """An import from the operator's token is not throttled like anonymous traffic (SPEC §1.3):
    after one accepted write its connection's requests skip the address's bucket, while another
    connection from the same address, and a write the gate refuses, still spend it."""
    async with running_server(tmp_path / "root", rate_limit=0.001, rate_burst=3) as server:
        writer = await connect("127.0.0.1", server.port, cafile=server.cert)
        other = await connect("127.0.0.1", server.port, cafile=server.cert)
        try:

            async def publish(client: Remote, n: int, token: str) -> str:
                meta = {"auth": token} if token else {}
                req = wire.Request("PUBLISH", f"/bulk/{n}.md", meta, b"# Page %d\n" % n)
                return wire.parse_response(await client.request(wire.emit_request(req))).status

            refused = await publish(writer, 0, "not-a-token")
            first = await publish(writer, 1, WRITE_TOKEN)
            rest = await asyncio.gather(*(publish(writer, n, WRITE_TOKEN) for n in range(2, 40)))
            anonymous = [await publish(other, 99, "") for _ in range(2)]
        finally:
            writer.hang_up()
            other.hang_up()
    assert (refused, first) == ("unauthorized", "created")
    assert rest == ["created"] * 38
    # the refused write, the first accepted one and the other connection's first spent the burst
    assert anonymous == ["unauthorized", "rate-limited"]


async def test_a_read_whose_token_grants_publish_exempts_its_connection_too(tmp_path: Path) -> None:
    """An import's reads (LIST, a FETCH a document) come before its first write: a token that
    may publish the path read shows the same holder."""
    async with running_server(tmp_path / "root", rate_limit=0.001, rate_burst=2) as server:
        reader = await connect("127.0.0.1", server.port, cafile=server.cert)
        try:

            async def fetch(n: int, token: str) -> str:
                req = wire.Request("FETCH", f"/bulk/{n}.md", {"auth": token}, b"")
                return wire.parse_response(await reader.request(wire.emit_request(req))).status

            first = await fetch(0, WRITE_TOKEN)
            rest = await asyncio.gather(*(fetch(n, WRITE_TOKEN) for n in range(1, 40)))
        finally:
            reader.hang_up()
        other = await connect("127.0.0.1", server.port, cafile=server.cert)
        try:
            anonymous = [await fetch_with(other, "") for _ in range(2)]
        finally:
            other.hang_up()
    assert first == "not-found"
    assert rest == ["not-found"] * 39
    assert anonymous == ["not-found", "rate-limited"]


async def fetch_with(client: Remote, token: str) -> str:
    meta = {"auth": token} if token else {}
    req = wire.Request("FETCH", "/bulk/none.md", meta, b"")
    return wire.parse_response(await client.request(wire.emit_request(req))).status


async def test_a_token_added_to_the_file_works_on_its_first_request(
    server: RunningServer, ask: Ask, caplog: pytest.LogCaptureFixture
) -> None:
    """No waiting for the 2 s check: an unknown token makes the server look at the file."""
    from markproto.server import tokens

    assert server.tokens_file is not None
    raw = tokens.generate(server.tokens_file, "fresh", ["/fresh/**"], ["publish"], None)
    created = await ask("PUBLISH", "/fresh/a.md", {"auth": raw}, b"# New\n")
    assert created.status == "created"
    with caplog.at_level("INFO", logger="markproto.auth"):
        refused = await ask("PUBLISH", "/elsewhere.md", {"auth": raw}, b"# No\n")
    assert refused.status == "not-permitted"
    (record,) = [r for r in caplog.records if r.getMessage() == "auth: token refused"]
    assert (record.reason, record.label, record.op, record.path) == (  # type: ignore[attr-defined]
        "wrong path",
        "fresh",
        "publish",
        "/elsewhere.md",
    )
    assert raw not in caplog.text
