"""Request streams, sans-IO (SPEC §1.3): each stream's bytes in, what to do with it out.

The transport feeds every stream event of one connection to that connection's `RequestStreams`
and carries out the decision that comes back. Nothing here touches a socket, a task or a clock
(``now`` is passed in), so every cap and timeout is a plain state machine, tested with a fake
clock.

- A stream's bytes are buffered until its FIN. A request that arrives whole with its FIN (the
  common case) keeps no state at all.
- Caps are checked while bytes arrive, since QUIC has no receive backpressure: past the request
  cap, or a request line that passes 4096 bytes without its newline, a stream is refused at once,
  asked to stop sending if it has not finished, and whatever it still sends is discarded.
- Buffered bytes count against a `Budget` that every connection of a server shares; a stream whose
  bytes would overflow it is reset.
- A request still incomplete ``timeout`` seconds after its first byte is reset; a handler still
  running ``timeout`` seconds after its dispatch is expired.

Each connection's dispatches come out of its own `RequestStreams` and every buffered byte passes
through `Budget.reserve` and `Budget.release`, so fair scheduling (bounded queues per connection,
served round-robin) and byte budgets per source slot in at those two points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from markproto.protocol.limits import MAX_REQUEST_LINE

_LINE = MAX_REQUEST_LINE


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The request is whole: hand it to the handler."""

    stream_id: int
    request: bytes


@dataclass(frozen=True, slots=True)
class Refuse:
    """The request passed a cap: answer with the oversize response. ``stop``: the peer has not
    finished sending, so ask it to stop (what it still sends is discarded)."""

    stream_id: int
    stop: bool


@dataclass(frozen=True, slots=True)
class Reset:
    """Reset both directions: the request will never be served (the buffers are full, or it was
    still incomplete at the timeout)."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class Expire:
    """The handler ran past the timeout: cancel it and answer with the timeout response."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class Cancel:
    """The peer stopped reading: cancel the handler and send nothing."""

    stream_id: int


Decision = Dispatch | Refuse | Reset | Expire | Cancel


class Counts(NamedTuple):
    """What one connection's streams hold right now."""

    partial: int
    """Requests still arriving."""
    running: int
    """Dispatched requests whose handler has not answered."""
    discarding: int
    """Refused or reset streams whose remaining bytes are being dropped."""


class Budget:
    """Request bytes buffered by every connection of a server, against one cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def reserve(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size


class RequestStreams:
    """The request streams of one connection."""

    def __init__(self, max_request: int, budget: Budget, timeout: float | None = None) -> None:
        self._max = max_request
        self._small = min(_LINE, max_request)
        self._budget = budget
        self._timeout = timeout or None
        self._partial: dict[int, tuple[bytearray, float]] = {}
        self._running: dict[int, float] = {}
        self._discarding: set[int] = set()

    @property
    def busy(self) -> bool:
        """A request is arriving or being answered."""
        return bool(self._partial or self._running)

    def counts(self) -> Counts:
        return Counts(len(self._partial), len(self._running), len(self._discarding))

    def receive(
        self, stream_id: int, data: bytes, fin: bool, now: float
    ) -> Dispatch | Refuse | Reset | None:
        """Bytes of a stream arrived (``fin``: the last of them)."""
        entry = self._partial.pop(stream_id, None)
        if entry is None:
            if stream_id & 2 or stream_id in self._discarding:  # unidirectional, or refused
                if fin:
                    self._discarding.discard(stream_id)
                return None
            if fin and len(data) <= self._small:
                return Dispatch(stream_id, data)
            buf, started = bytearray(), now
        else:
            buf, started = entry
            self._budget.release(len(buf))
        before = len(buf)
        buf += data
        if len(buf) > self._max or (
            before <= _LINE < len(buf) and buf.find(b"\n", 0, _LINE + 1) < 0
        ):
            if not fin:
                self._discarding.add(stream_id)
            return Refuse(stream_id, stop=not fin)
        if fin:
            return Dispatch(stream_id, bytes(buf))
        if not self._budget.reserve(len(buf)):
            self._discarding.add(stream_id)
            return Reset(stream_id)
        self._partial[stream_id] = (buf, started)
        return None

    def peer_reset(self, stream_id: int) -> None:
        """The peer reset its sending side: nothing more arrives on this stream."""
        self._drop(stream_id)
        self._discarding.discard(stream_id)

    def peer_stopped(self, stream_id: int) -> Cancel | None:
        """The peer no longer reads this stream: its answer is not wanted. Its handler is
        cancelled, which also keeps handlers within the stream credit (a stopped stream gives
        its credit back early)."""
        if self._running.pop(stream_id, None) is not None:
            return Cancel(stream_id)
        if stream_id in self._partial:
            self._drop(stream_id)
            self._discarding.add(stream_id)
        return None

    def running(self, stream_id: int, now: float) -> None:
        """A dispatched request's handler goes on asynchronously."""
        self._running[stream_id] = now

    def answered(self, stream_id: int) -> bool:
        """A running handler finished: True if its answer is still to be sent (it was not
        expired, cancelled or closed meanwhile)."""
        return self._running.pop(stream_id, None) is not None

    def expire(self, now: float) -> list[Reset | Expire]:
        """Requests still incomplete, and handlers still running, ``timeout`` seconds on."""
        if self._timeout is None or not (self._partial or self._running):
            return []
        cutoff = now - self._timeout
        out: list[Reset | Expire] = []
        for stream_id in [s for s, (_, started) in self._partial.items() if started < cutoff]:
            self._drop(stream_id)
            self._discarding.add(stream_id)
            out.append(Reset(stream_id))
        for stream_id in [s for s, started in self._running.items() if started < cutoff]:
            del self._running[stream_id]
            out.append(Expire(stream_id))
        return out

    def close(self) -> list[int]:
        """The connection is gone: release every buffer; return the streams whose handlers are
        still running (to be cancelled)."""
        for stream_id in list(self._partial):
            self._drop(stream_id)
        self._discarding.clear()
        running = list(self._running)
        self._running.clear()
        return running

    def _drop(self, stream_id: int) -> None:
        entry = self._partial.pop(stream_id, None)
        if entry is not None:
            self._budget.release(len(entry[0]))
