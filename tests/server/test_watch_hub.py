"""WATCH on the server without a network (SPEC §5.8): the change log, the hub's fan-out, scopes,
auth, slow readers, heartbeats and the drain, against a sink that records what it is sent.
tests/e2e/test_watch_e2e.py runs the same over real QUIC."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from markproto.protocol import wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.protocol.limits import MANIFEST_PATH
from markproto.protocol.watch import (
    Block,
    Control,
    Cursor,
    WatchEvent,
    WatchReader,
)
from markproto.server import seed
from markproto.server.changelog import ChangeLog
from markproto.server.handlers import Context
from markproto.server.handlers import watch as handler
from markproto.server.storage.content import Change, Content
from markproto.server.storage.store import Store
from markproto.server.streaming import Sink
from markproto.server.watch import BACKLOG, Hub, Subscription

READER = "reader-token"
OTHER = "other-token"


def change(path: str, version: int = 1, op: str = "publish", agent: str = "") -> Change:
    return Change(path, version, op, "sha256-" + "0" * 64, agent)


class FakeSink(Sink):
    """Records the bytes; ``unacked`` stands in for what the peer has not acknowledged."""

    def __init__(self, owner: object = "conn") -> None:
        self._owner = owner
        self.data = bytearray()
        self.finished = False
        self.unacked = 0
        self.woken = 0
        self.subscription: Subscription | None = None
        """What the handler returned, as the transport would hold it."""

    @property
    def owner(self) -> object:
        return self._owner

    @property
    def backlog(self) -> int:
        return self.unacked

    def send(self, data: bytes) -> None:
        assert not self.finished
        self.data += data
        self.unacked += len(data)

    def finish(self, data: bytes = b"") -> None:
        self.send(data)
        self.finished = True

    def wake(self) -> None:
        self.woken += 1

    def blocks(self) -> list[Block]:
        reader = WatchReader()
        return reader.feed(bytes(self.data))

    def refusal(self) -> wire.Response | None:
        reader = WatchReader()
        reader.feed(bytes(self.data))
        return reader.end()

    def events(self) -> list[WatchEvent]:
        return [b for b in self.blocks() if isinstance(b, WatchEvent)]

    def statuses(self) -> list[str]:
        return [b.status for b in self.blocks() if isinstance(b, Control)]


@pytest.fixture
def content(tmp_path: Path) -> Iterator[Content]:
    (tmp_path / "root").mkdir()
    content = Content.open(tmp_path / "root")
    yield content
    content.close()


def grants() -> Grants:
    return Grants(
        [
            Grant("reader", hash_token(READER), ("/secret/**",), frozenset({"read"})),
            Grant("other", hash_token(OTHER), ("/elsewhere/**",), frozenset({"read"})),
        ]
    )


def hub_for(content: Content, **kw: object) -> tuple[Hub, Context]:
    ctx = Context(content, grants=grants())
    hub = Hub(ctx, **kw)  # type: ignore[arg-type]
    ctx.watch = hub
    return hub, ctx


def watch(
    ctx: Context, path: str, token: str = "", since: str | None = None, sink: FakeSink | None = None
) -> FakeSink:
    """Run the WATCH handler and start what it returns on a fake stream."""
    meta = {"auth": token} if token else {}
    if since is not None:
        meta["since"] = since
    reply = handler.handle(wire.Request("WATCH", path, meta, b""), path, ctx)
    sink = sink or FakeSink()
    if isinstance(reply, wire.Response):
        sink.finish(wire.emit_response(reply))
    else:
        assert isinstance(reply, Subscription)
        sink.subscription = reply
        reply.start(sink)
    return sink


# -- the change log --------------------------------------------------------------------------------


def test_the_log_numbers_changes_and_keeps_the_last_ones() -> None:
    log = ChangeLog(3, epoch="e1")
    assert (log.head, log.oldest) == (0, 1)
    assert log.resumable(Cursor("e1", 0)) and not log.resumable(Cursor("e1", 1))
    for n in range(1, 6):
        assert log.append(change(f"/d{n}.md")).seq == n
    assert (log.head, log.oldest) == (5, 3)
    assert log.get(2) is None and log.get(6) is None
    entry = log.get(4)
    assert entry is not None and entry.path == "/d4.md" and entry.block is not None
    assert log.resumable(Cursor("e1", 2)) and log.resumable(Cursor("e1", 5))
    assert not log.resumable(Cursor("e1", 1))  # change 2 is gone
    assert not log.resumable(Cursor("e1", 6))  # ahead of the head
    assert not log.resumable(Cursor("e2", 4))  # another epoch


def test_every_log_has_its_own_epoch() -> None:
    epochs = {ChangeLog().epoch for _ in range(20)}
    assert len(epochs) == 20
    assert all(Cursor.parse(f"{e}:0").epoch == e for e in epochs)


def test_an_event_too_large_for_a_block_is_logged_without_one() -> None:
    entry = ChangeLog().append(change("/" + "\t" * 4086))
    assert entry.block is None


# -- subscribing -----------------------------------------------------------------------------------


async def test_a_subscription_is_acknowledged_at_the_head_and_gets_changes_in_its_scope(
    content: Content,
) -> None:
    hub, ctx = hub_for(content)
    hub.record(change("/docs/old.md"))
    docs, root, one = watch(ctx, "/docs"), watch(ctx, "/"), watch(ctx, "/docs/a.md")
    assert docs.blocks() == [Control("ok", hub.log.cursor(1))]
    for path in ("/docs/a.md", "/docsx/b.md", "/docs/sub/c.md", "/other.md"):
        hub.record(change(path, agent="bot"))
    assert [e.path for e in docs.events()] == ["/docs/a.md", "/docs/sub/c.md"]
    assert [e.path for e in root.events()] == [
        "/docs/a.md",
        "/docsx/b.md",
        "/docs/sub/c.md",
        "/other.md",
    ]
    assert [e.path for e in one.events()] == ["/docs/a.md"]
    first = docs.events()[0]
    assert first == WatchEvent(
        hub.log.cursor(2), "/docs/a.md", 1, "publish", change("/").content_hash, "bot"
    )
    assert len(hub) == 3


async def test_refusals_take_the_acknowledgements_place(content: Content) -> None:
    hub, ctx = hub_for(content)
    cases = {
        "/sha256-" + "0" * 64: ("bad-request", "paths matching /sha256-<hash> are reserved"),
        "/secret": ("unauthorized", "authentication required"),
    }
    for path, (code, text) in cases.items():
        assert watch(ctx, path).refusal() == wire.error_response(code, text)
    bad = watch(ctx, "/docs", since="nope").refusal()
    assert bad == wire.error_response("bad-request", "invalid since cursor")
    other = watch(ctx, "/secret", OTHER).refusal()
    assert other == wire.error_response("not-permitted", "insufficient permissions")
    off = watch(Context(content), "/docs").refusal()
    assert off == wire.error_response("bad-request", "unsupported verb: WATCH")
    assert len(hub) == 0


async def test_subscriptions_are_limited_in_all_and_per_connection(content: Content) -> None:
    hub, ctx = hub_for(content, limit=3, per_connection=2)
    a1, a2, a3 = (watch(ctx, "/", sink=FakeSink("a")) for _ in range(3))
    assert a1.statuses() == a2.statuses() == ["ok"]
    refused = a3.refusal()
    assert refused is not None and refused.status == "rate-limited"
    assert b"too many subscriptions on this connection" in refused.body
    b1 = watch(ctx, "/", sink=FakeSink("b"))
    assert b1.statuses() == ["ok"]
    full = watch(ctx, "/", sink=FakeSink("c")).refusal()
    assert full is not None and b"too many subscriptions on this server" in full.body
    handle_of(hub, a1).stop()
    assert watch(ctx, "/", sink=FakeSink("c")).statuses() == ["ok"]


def handle_of(hub: Hub, sink: FakeSink) -> Subscription:
    """The subscription started on ``sink``, as the transport holds it."""
    assert sink.subscription is not None
    return sink.subscription


# -- resuming --------------------------------------------------------------------------------------


async def test_a_resume_replays_exactly_what_was_missed_then_says_it_caught_up(
    content: Content,
) -> None:
    hub, ctx = hub_for(content)
    for n in range(1, 6):
        hub.record(change(f"/docs/{n}.md" if n % 2 else f"/other/{n}.md"))
    sink = watch(ctx, "/docs", since=str(hub.log.cursor(1)))
    blocks = sink.blocks()
    assert blocks[0] == Control("ok", hub.log.cursor(1))
    assert [e.path for e in sink.events()] == ["/docs/3.md", "/docs/5.md"]
    assert blocks[-1] == Control("ok", hub.log.cursor(5))  # caught up
    hub.record(change("/docs/6.md"))
    assert sink.events()[-1].cursor == hub.log.cursor(6)


async def test_a_cursor_that_cannot_be_resumed_gets_resync(content: Content) -> None:
    hub, ctx = hub_for(content, log_size=2)
    for n in range(4):
        hub.record(change(f"/d{n}.md"))
    head = hub.log.cursor(4)
    for since in ("other:1", str(hub.log.cursor(1)), str(hub.log.cursor(9))):
        sink = watch(ctx, "/", since=since)
        assert sink.blocks() == [Control("resync", head)] and sink.finished
    assert watch(ctx, "/", since=str(hub.log.cursor(2))).statuses() == ["ok", "ok"]


# -- slow readers ----------------------------------------------------------------------------------


async def test_a_slow_reader_falls_behind_and_is_served_from_the_log(content: Content) -> None:
    hub, ctx = hub_for(content)
    sink = watch(ctx, "/")
    sink.unacked = BACKLOG  # nothing acknowledged
    for n in range(1, 4):
        hub.record(change(f"/d{n}.md"))
    assert sink.events() == [] and sink.woken
    sink.unacked = 0  # the peer acknowledged everything
    handle_of(hub, sink).resume()
    assert [e.path for e in sink.events()] == ["/d1.md", "/d2.md", "/d3.md"]
    hub.record(change("/d4.md"))
    assert sink.events()[-1].path == "/d4.md"


async def test_a_reader_the_log_laps_gets_resync_and_nothing_more(content: Content) -> None:
    hub, ctx = hub_for(content, log_size=4)
    sink = watch(ctx, "/")
    sink.unacked = BACKLOG
    for n in range(1, 7):
        hub.record(change(f"/d{n}.md"))
    handle_of(hub, sink).resume()
    assert sink.statuses() == ["ok", "resync"] and sink.finished
    assert sink.blocks()[-1] == Control("resync", hub.log.cursor(6))
    assert len(hub) == 0


async def test_an_event_too_large_for_a_block_resyncs_whoever_would_see_it(
    content: Content,
) -> None:
    hub, ctx = hub_for(content)
    seeing, elsewhere = watch(ctx, "/"), watch(ctx, "/docs")
    hub.record(change("/" + "\t" * 4086))
    assert seeing.statuses() == ["ok", "resync"] and elsewhere.statuses() == ["ok"]


# -- auth ------------------------------------------------------------------------------------------


async def test_events_a_subscriber_may_not_read_are_never_sent(content: Content) -> None:
    hub, ctx = hub_for(content)
    anonymous, reader = watch(ctx, "/"), watch(ctx, "/", READER)
    for path in ("/secret/a.md", "/public.md", "/secret/b.md"):
        hub.record(change(path))
    assert [e.path for e in anonymous.events()] == ["/public.md"]
    assert [e.path for e in reader.events()] == ["/secret/a.md", "/public.md", "/secret/b.md"]
    late = watch(ctx, "/", since=str(hub.log.cursor(0)))
    assert [e.path for e in late.events()] == ["/public.md"]


async def test_a_revoked_token_ends_its_subscriptions_with_unauthorized(content: Content) -> None:
    hub, ctx = hub_for(content)
    scoped, public, anonymous = (
        watch(ctx, "/secret", READER),
        watch(ctx, "/", READER),
        watch(ctx, "/"),
    )
    ctx.grants = Grants(
        [Grant("other", hash_token(OTHER), ("/elsewhere/**",), frozenset({"read"}))]
    )
    hub.record(change("/secret/x.md"))  # the first change after the reload applies it
    assert scoped.statuses() == ["ok", "unauthorized"] and scoped.finished
    assert public.statuses() == ["ok", "unauthorized"]
    assert anonymous.statuses() == ["ok"] and not anonymous.finished
    assert len(hub) == 1


async def test_an_expired_token_ends_at_the_next_heartbeat(content: Content) -> None:
    later = datetime(2030, 1, 1, tzinfo=UTC)
    ctx = Context(
        content,
        grants=Grants(
            [
                Grant(
                    "r",
                    hash_token(READER),
                    ("/secret/**",),
                    frozenset({"read"}),
                    datetime(2029, 1, 1, tzinfo=UTC),
                )
            ]
        ),
        clock=lambda: datetime(2028, 1, 1, tzinfo=UTC),
    )
    hub = ctx.watch = Hub(ctx, heartbeat=0.05)
    hub.start()
    sink = watch(ctx, "/secret", READER)
    await asyncio.sleep(0.15)
    assert sink.statuses()[:2] == ["ok", "ok"]  # heartbeats
    ctx.clock = lambda: later
    await asyncio.sleep(0.15)
    assert sink.statuses()[-1] == "unauthorized" and sink.finished
    hub.close()


# -- heartbeats and the drain ----------------------------------------------------------------------


async def test_an_idle_stream_gets_heartbeats_with_its_position(content: Content) -> None:
    hub, ctx = hub_for(content, heartbeat=0.05)
    hub.start()
    sink = watch(ctx, "/docs")
    hub.record(change("/other.md"))
    await asyncio.sleep(0.2)
    beats = [b for b in sink.blocks()[1:] if isinstance(b, Control)]
    assert beats and all(b == Control("ok", hub.log.cursor(1)) for b in beats)
    hub.close()


async def test_the_drain_ends_every_subscription_with_closing(content: Content) -> None:
    hub, ctx = hub_for(content)
    sinks = [watch(ctx, "/") for _ in range(3)]
    hub.record(change("/a.md"))
    hub.close()
    for sink in sinks:
        assert sink.blocks()[-1] == Control("closing", hub.log.cursor(1)) and sink.finished
    late = watch(ctx, "/")
    assert late.statuses() == ["ok", "closing"] and late.finished
    assert len(hub) == 0


async def test_a_stream_the_peer_gave_up_is_forgotten(content: Content) -> None:
    hub, ctx = hub_for(content)
    sink = watch(ctx, "/")
    handle_of(hub, sink).stop()
    hub.record(change("/a.md"))
    assert sink.events() == [] and len(hub) == 0


# -- what Content reports --------------------------------------------------------------------------


async def test_content_reports_every_visible_change(content: Content, tmp_path: Path) -> None:
    seen: list[tuple[str, str, int]] = []
    content.observers.append(lambda c: seen.append((c.op, c.path, c.version)))
    await content.publish("/a.md", b"one\n", {"agent": "bot"}, 0)
    await content.publish("/a.md", b"one\n", {"agent": "bot"}, None)  # no-op: no change
    await content.append("/a.md", b"two\n", {}, 1)
    await content.set_archived("/a.md", True)
    await content.set_archived("/a.md", True)  # already archived: no change
    await content.set_archived("/a.md", False)
    assert seen == [
        ("publish", "/a.md", 1),
        ("append", "/a.md", 2),
        ("archive", "/a.md", 2),
        ("publish", "/a.md", 2),
    ]


async def test_a_change_scan_reports_what_it_finds(content: Content, tmp_path: Path) -> None:
    seen: list[tuple[str, str, int]] = []
    content.observers.append(lambda c: seen.append((c.op, c.path, c.version)))
    await content.publish("/a.md", b"one\n", {}, 0)
    await content.publish("/b.md", b"one\n", {}, 0)
    seen.clear()
    behind = Store(tmp_path / "root")  # another writer, behind the server's back
    behind.publish("/a.md", b"two\n", {}, 1)
    behind.publish("/new.md", b"new\n", {}, 0)
    behind.set_archived("/b.md", True)
    await content.rescan()
    assert sorted(seen) == [
        ("archive", "/b.md", 1),
        ("publish", "/a.md", 2),
        ("publish", "/new.md", 1),
    ]
    seen.clear()
    os.unlink(tmp_path / "root/a.md")  # an operator deletes the pointer
    behind.set_archived("/b.md", False)
    await content.rescan()
    assert sorted(seen) == [("archive", "/a.md", 2), ("publish", "/b.md", 1)]
    await content.rescan()
    assert len(seen) == 2  # nothing new


def test_the_seeded_manifest_lists_watch_when_it_is_served(tmp_path: Path) -> None:
    served, off = tmp_path / "served", tmp_path / "off"
    served.mkdir()
    off.mkdir()
    seed.seed(served)
    seed.seed(off, watch=False)
    manifest = Store(served).load(MANIFEST_PATH)
    without = Store(off).load(MANIFEST_PATH)
    assert manifest is not None and without is not None
    assert b"## Capabilities\n\n- lookup-match: catalog, body\n" in manifest.body
    assert b"\n- watch\n" in manifest.body
    assert b"- watch" not in without.body
