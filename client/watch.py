"""WATCH on the client (SPEC §5.8): change hints as an async iterator that outlives its streams.

`Watch` yields a `WatchEvent` per change and a `Resync` when the server cannot replay what was
missed (the caller rebuilds from LIST, VERSIONS and FETCH, then goes on iterating: the watch
continues from the resync's cursor). It keeps the cursor of every block it reads, so when a
stream ends (``closing``, a lost connection, a stream silent past its heartbeats) it reconnects
on its own, with backoff, and resumes exactly after the last change it read. It ends only when
the caller stops it, or raises a ``MarkError`` when it cannot go on: the first subscription
failed, the server refused it (``StatusError``: ``unauthorized``, ``bad-request``, ...), or the
token was revoked. Memory stays bounded at any pace of the caller: past `MAX_PENDING` undelivered
events the stream is dropped, and resumed from the cursor once the caller has caught up.

`changes` is the one-shot form: what changed after a cursor, then the stream is closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from markproto.client.errors import (
    ConnectionLost,
    MarkError,
    RequestTimeout,
    StatusError,
    StreamReset,
    TransportError,
    Unreachable,
    UnreadableResponse,
)
from markproto.client.results import Result
from markproto.protocol import wire
from markproto.protocol.status import Status
from markproto.protocol.watch import Block, Cursor, MalformedWatch, WatchEvent, WatchReader

if TYPE_CHECKING:
    from markproto.client.client import Client
    from markproto.client.connection import Streamed
    from markproto.protocol.url import MarkURL

log = logging.getLogger("markproto.client.watch")

STALL_TIMEOUT = 60.0
"""Seconds without any block (servers send a heartbeat after 20 s of silence) before a stream is
taken for dead and replaced."""
MAX_PENDING = 1024
"""Events read and not yet taken by the caller before the stream is dropped (and resumed later)."""
BACKOFF_FIRST = 0.1
BACKOFF_CLOSING = 1.0
"""The least wait before resubscribing after ``closing``: the server is going away."""
BACKOFF_MAX = 5.0
_TRANSIENT = (Unreachable, ConnectionLost, StreamReset, RequestTimeout, UnreadableResponse)


@dataclass(frozen=True, slots=True)
class Resync:
    """The server cannot replay the changes after the caller's cursor (it restarted, or the
    watch fell too far behind): rebuild what depends on them from LIST, VERSIONS and FETCH. The
    watch goes on from ``cursor``, the server's position when it said so (None: from now)."""

    cursor: Cursor | None


Notice = WatchEvent | Resync


@dataclass(frozen=True, slots=True)
class Changes:
    """What `Client.changes` found: the events after the cursor asked for, and the cursor to ask
    from next time. ``resync``: the server could not replay them (rebuild, then go on from
    ``cursor``). ``complete`` is false when more may follow (``limit`` reached, or the server
    ended the stream early)."""

    events: tuple[WatchEvent, ...]
    cursor: Cursor | None
    resync: bool = False
    complete: bool = True


class _Stream:
    """One WATCH stream being read: its bytes arrive through the pool's sink, its blocks are
    taken one at a time."""

    def __init__(self) -> None:
        self.reader = WatchReader()
        self.blocks: deque[Block] = deque()
        self.arrived = asyncio.Event()
        self.failure: MarkError | None = None
        self.handle: Streamed | None = None

    @classmethod
    async def open(cls, client: Client, url: MarkURL, since: Cursor | None) -> _Stream:
        stream = cls()
        meta = {} if since is None else {"since": str(since)}
        token = client.tokens.for_authority(url.authority)
        if token is not None:
            meta["auth"] = token
        data = wire.emit_request(wire.Request("WATCH", url.path, meta, b""))
        stream.handle = await client.pool.stream(url.authority, data, stream._take)
        stream.handle.ended.add_done_callback(lambda _: stream.arrived.set())
        return stream

    def _take(self, data: bytes) -> None:
        if self.failure is None:
            try:
                self.blocks.extend(self.reader.feed(data))
            except MalformedWatch as exc:
                self.failure = _unreadable(exc)
            self.arrived.set()

    async def next(self, timeout: float) -> Block | wire.Response | None:
        """The next block; at the stream's end, the refusal it carried or None. Raises the
        ``TransportError`` that cut it, or ``RequestTimeout`` after ``timeout`` s of silence."""
        assert self.handle is not None
        while not self.blocks:
            if self.failure is not None:
                raise self.failure
            if self.handle.ended.done():
                self.handle.ended.result()
                try:
                    return self.reader.end()
                except MalformedWatch as exc:
                    raise _unreadable(exc) from None
            self.arrived.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self.arrived.wait()
            except TimeoutError:
                raise RequestTimeout(f"no WATCH block within {timeout:g} s", sent=True) from None
        return self.blocks.popleft()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


class Watch:
    """The change hints of a document or folder: ``async with`` it (or `start` it) to subscribe
    at once, ``async for`` over it, then `aclose`. Without either it subscribes at the first
    step, so changes before that are not seen unless ``since`` names where to start. ``cursor``
    is the position after the last notice taken: give it as ``since`` to a later watch to resume
    there."""

    def __init__(
        self,
        client: Client,
        url: MarkURL,
        since: Cursor | None = None,
        *,
        stall_timeout: float = STALL_TIMEOUT,
        on_reconnect: Callable[[MarkError], None] | None = None,
    ) -> None:
        self.client = client
        self.url = url
        self.cursor = since
        self.stall_timeout = stall_timeout
        self.on_reconnect = on_reconnect
        self._pending: deque[Notice] = deque()
        self._stream: _Stream | None = None
        self._read_to = since
        """The cursor of the last block read (taken or pending): where a new stream starts."""
        self._subscribed = False
        self._backoff = BACKOFF_FIRST
        self._closed = False

    def __aiter__(self) -> Watch:
        return self

    async def __aenter__(self) -> Watch:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> Watch:
        """Subscribe now and wait for the server's answer: every change from here on is seen.
        Raises as the first step would (unreachable server, a refusal)."""
        while not self._subscribed and not self._pending:
            await self._step()
        return self

    async def aclose(self) -> None:
        """Stop watching: the stream is closed and iteration ends."""
        self._closed = True
        self._drop()

    async def __anext__(self) -> Notice:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            await self._step()
        notice = self._pending.popleft()
        self.cursor = notice.cursor if self._pending else self._read_to
        return notice

    async def _step(self) -> None:
        """Open a stream, or take one block from it (or wait before the next stream)."""
        if self._stream is None:
            try:
                self._stream = await _Stream.open(self.client, self.url, self._read_to)
            except TransportError as exc:
                await self._retry(exc)
            return
        try:
            item = await self._stream.next(self.stall_timeout)
        except TransportError as exc:
            self._drop()
            await self._retry(exc)
            return
        if item is None:
            self._drop()
            await self._retry(ConnectionLost(f"{self.url}: the WATCH stream ended", sent=True))
        elif isinstance(item, wire.Response):
            self._drop()
            await self._refused(item)
        else:
            await self._take(item)
        if len(self._pending) > MAX_PENDING:
            self._drop()

    async def _take(self, block: Block) -> None:
        if block.cursor is not None:
            self._read_to = block.cursor
        if isinstance(block, WatchEvent):
            if block.known:
                self._pending.append(block)
        elif block.status == Status.OK:  # the acknowledgement, or a heartbeat
            self._subscribed = True
            self._backoff = BACKOFF_FIRST
        elif block.status == Status.RESYNC:
            self._drop()
            self._subscribed = True
            self._read_to = block.cursor  # None: start afresh, the old cursor is no use
            self._pending.append(Resync(block.cursor))
        elif block.status == Status.CLOSING:
            self._drop()
            self._backoff = max(self._backoff, BACKOFF_CLOSING)
            await self._retry(ConnectionLost(f"{self.url}: the server is closing", sent=True))
        else:
            self._drop()
            raise StatusError(Result(block.status, dict(block.meta or {}), b""))
        if not self._pending:
            self.cursor = self._read_to

    async def _refused(self, response: wire.Response) -> None:
        result = Result(response.status, dict(response.meta), response.body)
        if response.status != Status.RATE_LIMITED or not self._subscribed:
            raise StatusError(result)
        await self._retry(StatusError(result))

    async def _retry(self, exc: MarkError) -> None:
        """Wait before the next subscription, or raise when there should be none."""
        transient = isinstance(exc, (*_TRANSIENT, StatusError))
        if not self._subscribed or not transient or self.client.pool.closed:
            raise exc
        log.info("watch of %s interrupted (%s); resuming", self.url, exc)
        if self.on_reconnect is not None:
            self.on_reconnect(exc)
        await asyncio.sleep(self._backoff)
        self._backoff = min(BACKOFF_MAX, self._backoff * 2)

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


async def changes(
    client: Client, url: MarkURL, since: Cursor | None, *, limit: int, quiet: float
) -> Changes:
    """The events after ``since`` (at most ``limit``), read from one WATCH stream until it has
    caught up: a server resuming a cursor sends a heartbeat once it has replayed everything (one
    that does not is read until ``quiet`` seconds pass without a block)."""
    stream = await _Stream.open(client, url, since)
    events: list[WatchEvent] = []
    cursor = since
    acknowledged = False
    try:
        while True:
            try:
                item = await stream.next(quiet)
            except RequestTimeout:
                if not acknowledged:
                    raise
                return Changes(tuple(events), cursor)
            if item is None:
                return Changes(tuple(events), cursor, complete=False)
            if isinstance(item, wire.Response):
                raise StatusError(Result(item.status, dict(item.meta), item.body))
            if item.cursor is not None:
                cursor = item.cursor
            if isinstance(item, WatchEvent):
                if item.known:
                    events.append(item)
                if len(events) >= limit:
                    return Changes(tuple(events), cursor, complete=False)
            elif item.status == Status.OK:
                if acknowledged or since is None:
                    return Changes(tuple(events), cursor)
                acknowledged = True
            elif item.status == Status.RESYNC:
                return Changes(tuple(events), cursor, resync=True)
            elif item.status == Status.CLOSING:
                return Changes(tuple(events), cursor, complete=False)
            else:
                raise StatusError(Result(item.status, dict(item.meta or {}), b""))
    finally:
        stream.close()


def _unreadable(exc: MalformedWatch) -> UnreadableResponse:
    return UnreadableResponse(f"unreadable WATCH stream ({exc})", sent=True)
