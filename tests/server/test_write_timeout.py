"""A write the request timeout gives up on says what became of it, over real QUIC: one that never
left the writer's queue was not applied (and never will be), one the writer was running may have
been (and the server takes it in when it lands). Neither is reported as a crash."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest
from support.quicclient import QuicClient, connect
from support.server import WRITE_TOKEN, running_server

from markproto.protocol import wire
from markproto.server.storage.store import Refusal, Store, Written


async def ask(client: QuicClient, verb: str, path: str, body: bytes = b"") -> wire.Response:
    request = wire.Request(verb, path, {"auth": WRITE_TOKEN}, body)
    return wire.parse_response(await client.request(wire.emit_request(request), timeout=30.0))


async def test_a_write_past_the_timeout_says_whether_it_was_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, started = threading.Event(), threading.Event()
    publish = Store.publish

    def slow(
        self: Store, path: str, body: bytes, meta: Mapping[str, str], expected: int | None
    ) -> Written | Refusal:
        if path == "/slow/a.md":  # holds the one writer until the test lets go
            started.set()
            release.wait(30.0)
        return publish(self, path, body, meta, expected)

    monkeypatch.setattr(Store, "publish", slow)
    async with running_server(tmp_path / "root", request_timeout=1.0) as server:
        client = await connect("127.0.0.1", server.port, cafile=server.cert)
        try:
            running = asyncio.create_task(ask(client, "PUBLISH", "/slow/a.md", b"# Slow\n"))
            await asyncio.to_thread(started.wait, 30.0)
            waiting = await ask(client, "PUBLISH", "/queued/b.md", b"# Queued\n")
            assert waiting == wire.error_response(
                "server-error", "write not applied: timed out waiting for the writer"
            )
            assert (await running) == wire.error_response(
                "server-error", "write timed out while in progress: it may have been applied"
            )
            release.set()
            for _ in range(300):  # the write lands on its own; the snapshot takes it in
                landed = await ask(client, "FETCH", "/slow/a.md")
                if landed.status == "ok":
                    break
                await asyncio.sleep(0.05)
            assert landed.status == "ok" and landed.body == b"# Slow\n"
            assert (await ask(client, "FETCH", "/queued/b.md")).status == "not-found"
            assert not (server.root / "queued").exists()  # it never ran, and never will
        finally:
            release.set()
            client.hang_up()
