"""WATCH subscriptions (SPEC §5.8): every change fanned out to the streams that may see it.

A subscription costs a cursor and its stream: no task, no queue of its own. The change log is the
queue every subscriber shares. A subscriber that keeps up is *caught up* and gets each change in
its scope as it is logged; one whose stream holds `BACKLOG` unacknowledged bytes (a slow reader, or
a resume with much to replay) falls *behind*: it keeps only its position in the log and is pumped
from there as the peer acknowledges, until it is caught up again or the log has overwritten its
position, which ends it with ``resync``. So a slow reader never makes the server buffer more than
`BACKLOG` for it, and is dropped rather than waited for.

Read auth is asked on the scope when a subscription opens, on every change before it is sent,
and again on every heartbeat and whenever the grants change (a tokens reload): a subscription
whose scope its token may no longer read, or whose token was revoked or expired, ends with
``unauthorized`` (or ``not-permitted``).

One timer per server drives heartbeats and those rechecks; `close` (the drain) ends every
subscription with ``closing``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from markproto.protocol import paths, wire
from markproto.protocol import status as st
from markproto.protocol.grants import READ, Decision, Grants
from markproto.protocol.watch import HEARTBEAT, Cursor, emit_control
from markproto.server.changelog import DEFAULT_SIZE, ChangeLog
from markproto.server.handlers import Context
from markproto.server.handlers.listing import dir_decision
from markproto.server.storage.content import Change
from markproto.server.streaming import LongResponse, Sink

log = logging.getLogger("markproto.server.watch")

BACKLOG = 32 * 1024
"""Unacknowledged bytes on one subscriber's stream before it falls behind (four largest blocks)."""
DEFAULT_LIMIT = 4096
DEFAULT_PER_CONNECTION = 16
_LIVE = (Decision.ALLOW, Decision.NOT_PERMITTED)
"""Decisions that say the token names a current grant."""


class Subscription(LongResponse):
    """One WATCH stream: a scope, a token, and where in the change log it stands."""

    __slots__ = (
        "_hub",
        "_sink",
        "behind",
        "credential",
        "last",
        "resumed",
        "scope",
        "since",
        "token",
    )

    def __init__(self, hub: Hub, scope: str, token: str, since: Cursor | None) -> None:
        self._hub = hub
        self.scope = scope
        self.token = token
        self.since = since
        self._sink: Sink | None = None
        self.behind: int | None = None
        """The log position this subscriber has seen up to, while it is behind; None when it is
        caught up (its position is the head)."""
        self.resumed = since is not None
        """A heartbeat is owed once it catches up: the sign a resume has replayed everything."""
        self.credential = False
        """Its token named a current grant when it subscribed (so a revocation ends it)."""
        self.last = 0.0
        """When a block was last sent (heartbeats are due a fixed time after it)."""

    @property
    def sink(self) -> Sink:
        assert self._sink is not None
        return self._sink

    def start(self, sink: Sink) -> None:
        self._sink = sink
        self._hub.open(self)

    def resume(self) -> None:
        self._hub.pump(self)

    def stop(self) -> None:
        self._hub.forget(self)


class Hub:
    """The server's WATCH subscriptions over one change log."""

    def __init__(
        self,
        ctx: Context,
        *,
        limit: int = DEFAULT_LIMIT,
        per_connection: int = DEFAULT_PER_CONNECTION,
        heartbeat: float = HEARTBEAT,
        log_size: int = DEFAULT_SIZE,
    ) -> None:
        self.log = ChangeLog(log_size)
        self.limit = limit
        self.per_connection = per_connection
        self.heartbeat = heartbeat
        self.closing = False
        self._ctx = ctx
        self._grants: Grants | None = ctx.grants
        self._subs: set[Subscription] = set()
        self._by_scope: dict[str, set[Subscription]] = {}
        self._owners: Counter[object] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._subs)

    def subscription(self, scope: str, token: str, since: Cursor | None) -> Subscription:
        """A subscription the handler has authorized, to be started on its stream."""
        return Subscription(self, scope, token, since)

    def start(self) -> None:
        """Start the heartbeat timer (on the running loop)."""
        self._loop = asyncio.get_running_loop()
        self._schedule()

    def close(self) -> None:
        """The drain: every subscription ends with ``closing``, and later ones at once."""
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for sub in list(self._subs):
            self._end(sub, st.Status.CLOSING)

    # -- changes ----------------------------------------------------------------------------------

    def record(self, change: Change) -> None:
        """Log a change and send it to every caught-up subscriber that may see it (a `Content`
        observer: called on the event loop as each change is applied)."""
        entry = self.log.append(change)
        self._check_grants()
        if not self._subs:
            return
        now = self._now()
        readable: dict[str, bool] = {}
        for scope in _scopes(entry.path):
            for sub in list(self._by_scope.get(scope, ())):
                if sub.behind is not None:
                    continue  # the pump reaches this entry in its turn
                allowed = readable.get(sub.token)
                if allowed is None:
                    allowed = readable[sub.token] = self._ctx.can_read(entry.path, sub.token)
                if not allowed:
                    continue
                if entry.block is None:
                    self._end(sub, st.Status.RESYNC)
                elif sub.sink.backlog >= BACKLOG:
                    sub.behind = entry.seq - 1
                    sub.sink.wake()
                else:
                    sub.sink.send(entry.block)
                    sub.last = now

    # -- one subscription ------------------------------------------------------------------------

    def open(self, sub: Subscription) -> None:
        """A subscription's stream is ready: refuse it, or acknowledge it and replay what it
        missed."""
        sink, head = sub.sink, self.log.head
        full = len(self._subs) >= self.limit
        if full or self._owners[sink.owner] >= self.per_connection:
            message = st.WATCHES_IN_ALL if full else st.WATCHES_PER_CONNECTION
            log.info("watch refused: %s", message, extra=_about(sub))
            sink.finish(_refusal(message))
            return
        if sub.since is not None and not self.log.resumable(sub.since):
            log.info("watch resync", extra={"path": sub.scope, "since": str(sub.since)})
            sink.finish(emit_control(st.Status.RESYNC, self.log.cursor(head)))
            return
        start = head if sub.since is None else sub.since.seq
        sink.send(emit_control(st.Status.OK, self.log.cursor(start)))
        sub.last = self._now()
        if self.closing:
            sink.finish(emit_control(st.Status.CLOSING, self.log.cursor(start)))
            return
        sub.credential = self._live(sub.token)
        self._subs.add(sub)
        self._by_scope.setdefault(sub.scope, set()).add(sub)
        self._owners[sink.owner] += 1
        if sub.since is not None:
            sub.behind = start
            self.pump(sub)

    def pump(self, sub: Subscription) -> None:
        """Send a behind subscriber what it has not seen, while its stream has room."""
        if sub not in self._subs:
            return
        sink, logged = sub.sink, self.log
        while sub.behind is not None:
            seq = sub.behind + 1
            if seq > logged.head:
                sub.behind = None
                if sub.resumed:
                    sub.resumed = False
                    self._beat(sub)
                return
            entry = logged.get(seq)
            if entry is None:
                log.info("watch resync: the subscriber fell behind the log", extra=_about(sub))
                self._end(sub, st.Status.RESYNC)
                return
            if sink.backlog >= BACKLOG:
                sink.wake()
                return
            sub.behind = seq
            if paths.in_scope(entry.path, sub.scope) and self._ctx.can_read(entry.path, sub.token):
                if entry.block is None:
                    self._end(sub, st.Status.RESYNC)
                    return
                sink.send(entry.block)
                sub.last = self._now()

    def forget(self, sub: Subscription) -> None:
        """The stream is gone: drop the subscription without a word."""
        if sub not in self._subs:
            return
        self._subs.discard(sub)
        scoped = self._by_scope.get(sub.scope)
        if scoped is not None:
            scoped.discard(sub)
            if not scoped:
                del self._by_scope[sub.scope]
        owner = sub.sink.owner
        self._owners[owner] -= 1
        if self._owners[owner] <= 0:
            del self._owners[owner]

    def _end(self, sub: Subscription, status: str) -> None:
        """The terminal block: ``resync`` names the newest change (where to go on from after a
        rebuild), any other the position the subscriber was served up to."""
        cursor = self.log.cursor(self.log.head) if status == st.Status.RESYNC else self._cursor(sub)
        self.forget(sub)
        sub.sink.finish(emit_control(status, cursor))

    def _beat(self, sub: Subscription) -> None:
        sub.sink.send(emit_control(st.Status.OK, self._cursor(sub)))
        sub.last = self._now()

    def _cursor(self, sub: Subscription) -> Cursor:
        return self.log.cursor(self.log.head if sub.behind is None else sub.behind)

    # -- auth ------------------------------------------------------------------------------------

    def _decision(self, sub: Subscription) -> Decision:
        """Whether the subscription may go on: its scope still readable, its token (if it named
        a grant) still current."""
        decision = dir_decision(self._ctx, sub.scope, sub.token)
        if decision is Decision.ALLOW and sub.credential and not self._live(sub.token):
            return Decision.INVALID_TOKEN
        return decision

    def _live(self, token: str) -> bool:
        grants = self._ctx.grants
        if grants is None or not token:
            return False
        return grants.authorize(token, "/", READ, self._ctx.clock()) in _LIVE

    def _check_grants(self) -> None:
        """After a tokens reload, end what the new grants no longer allow."""
        if self._ctx.grants is self._grants:
            return
        self._grants = self._ctx.grants
        for sub in list(self._subs):
            self._authorize(sub)

    def _authorize(self, sub: Subscription) -> bool:
        decision = self._decision(sub)
        if decision is Decision.ALLOW:
            return True
        log.info("watch ended: %s", decision.message, extra=_about(sub))
        self._end(sub, decision.status)
        return False

    # -- the timer -------------------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._loop is not None and not self.closing:
            every = min(1.0, self.heartbeat / 4)
            self._timer = self._loop.call_later(every, self._sweep)

    def _sweep(self) -> None:
        try:
            self._check_grants()
            due = self._now() - self.heartbeat
            for sub in list(self._subs):
                if sub.behind is not None:
                    self.pump(sub)
                if (
                    sub in self._subs
                    and sub.last <= due
                    and self._authorize(sub)
                    and sub.sink.backlog < BACKLOG
                ):
                    self._beat(sub)
        except Exception:
            log.exception("watch heartbeat sweep failed")
        self._schedule()

    def _now(self) -> float:
        return self._loop.time() if self._loop is not None else 0.0


def _refusal(message: str) -> bytes:
    return wire.emit_response(wire.error_response(st.Status.RATE_LIMITED, message))


def _scopes(path: str) -> list[str]:
    """Every scope that contains ``path``: the root, each folder above it, and the path."""
    scopes = ["/"]
    index = path.find("/", 1)
    while index > 0:
        scopes.append(path[:index])
        index = path.find("/", index + 1)
    if path != "/":
        scopes.append(path)
    return scopes


def _about(sub: Subscription) -> dict[str, str]:
    return {"path": sub.scope}
