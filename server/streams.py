"""Request streams, sans-IO (SPEC §1.3): each stream's bytes in, what to do with it out, and whose
turn it is to be served.

The transport feeds every stream event of one connection to that connection's `RequestStreams`
and carries out the decision that comes back. Nothing here touches a socket, a task or a clock
(``now`` is passed in), so every cap, budget, queue and timeout is a plain state machine, tested
with a fake clock.

- **Admission, at a stream's first byte.** Each client address is a `Source`, shared by all its
  connections, with the rate limiter's bucket. A new stream whose source has no token left is
  refused there and then (`Limited`): nothing of it is buffered or parsed, and the stream credit
  it used is held back until the bucket has a token again (`Source.release`), and so is that of
  each stream let in on such credit. A source that ignores ``rate-limited`` and keeps every
  stream busy thus sends no faster than its rate, and is refused about once per stream of credit
  it started with, not once per request.
- **Bytes, while they arrive.** A stream's bytes are buffered until its FIN; a request that
  arrives whole with its FIN (the common case) is never buffered. Past the request cap, or a
  request line that passes 4096 bytes without its newline, a stream is refused at once
  (`Refuse`), asked to stop sending if it has not finished, and whatever it still sends is
  discarded. Buffered bytes count against the source's `Budget` and the server's: a stream whose
  bytes would overflow either is reset.
- **Upload rate.** A connection's receive window (QUIC flow control) grows only as fast as its
  source's byte `Bucket` allows (`Source.upload`), so a source sending many or large requests is
  held to its byte rate by the peer's own flow control, whatever it sends and whatever becomes of
  it.
- **Turns.** A whole request joins its connection's queue (`Queued`, bounded by the stream
  credit). The transport serves queues in turns (`Rotation`): round-robin over the sources with
  work, and within a source over its connections, so one busy peer, however many streams or
  connections it keeps busy, delays another by one request per turn at most.
- **Timeouts.** A request still incomplete ``timeout`` seconds after its first byte is reset; one
  still waiting or running ``timeout`` seconds after it was whole is expired.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from markproto.protocol.limits import MAX_REQUEST_LINE

_LINE = MAX_REQUEST_LINE


@dataclass(frozen=True, slots=True)
class Queued:
    """The request is whole and waits its turn (`RequestStreams.next` hands it out)."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class Dispatch:
    """It is the request's turn: hand it to the handler."""

    stream_id: int
    request: bytes


@dataclass(frozen=True, slots=True)
class Limited:
    """The source's bucket is empty: answer ``rate-limited`` at once. ``stop``: the peer has not
    finished sending, so ask it to stop (what it still sends is discarded). The stream's credit
    is held back (`RequestStreams.take_holds`; `Source.release` gives it back)."""

    stream_id: int
    stop: bool


@dataclass(frozen=True, slots=True)
class Refuse:
    """The request passed a cap: answer with the oversize response. ``stop`` as for `Limited`."""

    stream_id: int
    stop: bool


@dataclass(frozen=True, slots=True)
class Reset:
    """Reset both directions: the request will never be served (the buffers are full, or it was
    still incomplete at the timeout)."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class Expire:
    """The request is past the timeout, waiting or running: cancel its handler if it has one and
    answer with what the cancelled handler says, else with the timeout response."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class Cancel:
    """The peer stopped reading: cancel the handler and send nothing."""

    stream_id: int


Decision = Queued | Dispatch | Limited | Refuse | Reset | Expire | Cancel


class Counts(NamedTuple):
    """What one connection's streams hold right now."""

    partial: int
    """Requests still arriving."""
    queued: int
    """Whole requests waiting their turn."""
    running: int
    """Dispatched requests whose answer is not sent yet."""
    discarding: int
    """Refused or reset streams whose remaining bytes are being dropped."""


class Budget:
    """Request bytes buffered, against one cap."""

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


class Bucket:
    """A token bucket of bytes: ``rate`` a second, at most ``burst`` saved up (and at the start)."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate, self.burst = rate, burst
        self._tokens, self._stamp = float(burst), now

    def has(self, least: int, now: float) -> bool:
        """At least ``least`` bytes can be had now."""
        self._refill(now)
        return self._tokens >= least

    def take(self, wanted: int, now: float, least: int) -> int:
        """Up to ``wanted`` bytes; nothing unless ``least`` (or all of ``wanted``, if less) can
        be had, so a starved window grows in steps worth a packet exchange."""
        self._refill(now)
        granted = min(wanted, int(self._tokens))
        if granted < min(wanted, least):
            return 0
        self._tokens -= granted
        return granted

    def _refill(self, now: float) -> None:
        refill = max(0.0, now - self._stamp) * self.rate
        self._tokens = min(float(self.burst), self._tokens + refill)
        self._stamp = max(self._stamp, now)


Allow = Callable[[float], bool]
"""Spend one token of a source's bucket at ``now``; False when it is empty."""


UPLOAD_STEP = 16 << 10
"""The least receive window a starved connection is given at a time."""


class Source:
    """One client address, shared by its connections: their byte budget, the rate limiter's
    bucket (``allow``; None: unlimited), the bytes it may still send (``uploads``; None:
    unlimited) and the stream credit it is owed."""

    def __init__(
        self,
        host: str,
        max_buffered: int,
        allow: Allow | None = None,
        uploads: Bucket | None = None,
    ) -> None:
        self.host = host
        self.budget = Budget(max_buffered)
        self._allow = allow
        self._uploads = uploads
        self._held: OrderedDict[RequestStreams, int] = OrderedDict()
        """Credit held back, per connection, in the order it is given back."""

    @property
    def owed(self) -> bool:
        """Some of its connections wait for stream credit."""
        return bool(self._held)

    def admit(self, streams: RequestStreams, now: float) -> bool:
        """A new stream of ``streams``: spend a token, or the one its credit was given back for.
        False when there is none. Either way but the first, the stream's credit is held back
        (`RequestStreams.holds`): a source over its rate gets a stream only for a token."""
        if streams.trusted:
            return True
        if streams.prepaid:
            streams.prepaid -= 1
        elif self._allow is None or self._allow(now):
            return True
        else:
            self._hold(streams)
            return False
        self._hold(streams)
        return True

    def _hold(self, streams: RequestStreams) -> None:
        self._held[streams] = self._held.get(streams, 0) + 1
        streams.holds += 1

    def upload(self, wanted: int, now: float) -> int:
        """How many of ``wanted`` more bytes one of its connections may receive now."""
        return wanted if self._uploads is None else self._uploads.take(wanted, now, UPLOAD_STEP)

    def may_upload(self, now: float) -> bool:
        """A starved connection of this source would be given some window now."""
        return self._uploads is None or self._uploads.has(UPLOAD_STEP, now)

    def release(self, now: float) -> list[RequestStreams]:
        """Give held credit back, one stream per token the bucket has again (spent now, so the
        stream it lets in is admitted), round-robin over the connections: the connections that
        get one, once per stream."""
        given = []
        while self._held and self._allow is not None and self._allow(now):
            streams, held = self._held.popitem(last=False)
            if held > 1:
                self._held[streams] = held - 1
            streams.prepaid += 1
            given.append(streams)
        return given

    def forget(self, streams: RequestStreams) -> None:
        """A connection is gone: nothing is owed to it any more."""
        self._held.pop(streams, None)


class RequestStreams:
    """The request streams of one connection."""

    def __init__(
        self,
        max_request: int,
        budget: Budget,
        timeout: float | None = None,
        source: Source | None = None,
    ) -> None:
        self._max = max_request
        self._small = min(_LINE, max_request)
        self._budgets = (budget,) if source is None else (budget, source.budget)
        self.source = source
        self._timeout = timeout or None
        self._partial: dict[int, tuple[bytearray, float]] = {}
        self._queued: dict[int, tuple[bytes, float]] = {}
        """Whole requests in arrival order (a dict keeps it) with the time they became whole."""
        self._running: dict[int, float] = {}
        self._discarding: set[int] = set()
        self.prepaid = 0
        """New streams already paid for: the credit given back for each cost a token."""
        self.holds = 0
        """Streams whose credit is to be held back when they finish (`take_holds`)."""
        self.trusted = False
        """A request of this connection showed a publish token (`trust`): its new streams and
        request bytes no longer wait for its source's rate limiter and upload bucket."""

    def trust(self) -> None:
        """This connection holds a write token: the rates of its address no longer apply."""
        self.trusted = True

    @property
    def busy(self) -> bool:
        """A request is arriving, waiting or being answered."""
        return bool(self._partial or self._queued or self._running)

    @property
    def queued(self) -> bool:
        """A whole request waits its turn."""
        return bool(self._queued)

    def counts(self) -> Counts:
        return Counts(
            len(self._partial), len(self._queued), len(self._running), len(self._discarding)
        )

    def receive(
        self, stream_id: int, data: bytes, fin: bool, now: float
    ) -> Queued | Limited | Refuse | Reset | None:
        """Bytes of a stream arrived (``fin``: the last of them)."""
        entry = self._partial.pop(stream_id, None)
        if entry is None:
            if stream_id & 2 or stream_id in self._discarding:  # unidirectional, or refused
                if fin:
                    self._discarding.discard(stream_id)
                return None
            if self.source is not None and not self.source.admit(self, now):
                if not fin:
                    self._discarding.add(stream_id)
                return Limited(stream_id, stop=not fin)
            if fin and len(data) <= self._small:
                self._queued[stream_id] = (data, now)
                return Queued(stream_id)
            buf, started = bytearray(), now
        else:
            buf, started = entry
            self._release(len(buf))
        before = len(buf)
        buf += data
        if len(buf) > self._max or (
            before <= _LINE < len(buf) and buf.find(b"\n", 0, _LINE + 1) < 0
        ):
            if not fin:
                self._discarding.add(stream_id)
            return Refuse(stream_id, stop=not fin)
        if fin:
            self._queued[stream_id] = (bytes(buf), started)
            return Queued(stream_id)
        if not self._reserve(len(buf)):
            self._discarding.add(stream_id)
            return Reset(stream_id)
        self._partial[stream_id] = (buf, started)
        return None

    def take_holds(self) -> int:
        """How many more re-grants of stream credit to hold back (the transport holds them)."""
        holds, self.holds = self.holds, 0
        return holds

    def next(self, now: float) -> Dispatch | None:
        """The connection's turn: its oldest whole request, now running (None if none waits)."""
        if not self._queued:
            return None
        stream_id = next(iter(self._queued))
        request, since = self._queued.pop(stream_id)
        self._running[stream_id] = since
        return Dispatch(stream_id, request)

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
        self._queued.pop(stream_id, None)
        if stream_id in self._partial:
            self._drop(stream_id)
            self._discarding.add(stream_id)
        return None

    def answered(self, stream_id: int) -> bool:
        """A dispatched request's answer is ready: True if it is still to be sent (the peer did
        not stop reading and the connection is not gone)."""
        return self._running.pop(stream_id, None) is not None

    def detach(self, stream_id: int) -> None:
        """A dispatched request's handler kept its stream for a long-lived response (WATCH):
        it is no request any more, so no timeout, count or turn applies to it from now on."""
        self._running.pop(stream_id, None)

    def expire(self, now: float) -> list[Reset | Expire]:
        """Requests still incomplete, waiting or running ``timeout`` seconds on. An expired
        request stays running: its answer (the timeout response, or what its cancelled handler
        says) is still to be sent."""
        if self._timeout is None or not self.busy:
            return []
        cutoff = now - self._timeout
        out: list[Reset | Expire] = []
        for stream_id in [s for s, (_, started) in self._partial.items() if started < cutoff]:
            self._drop(stream_id)
            self._discarding.add(stream_id)
            out.append(Reset(stream_id))
        for stream_id in [s for s, (_, since) in self._queued.items() if since < cutoff]:
            del self._queued[stream_id]
            self._running[stream_id] = float("inf")
            out.append(Expire(stream_id))
        for stream_id in [s for s, since in self._running.items() if since < cutoff]:
            self._running[stream_id] = float("inf")  # expired once
            out.append(Expire(stream_id))
        return out

    def close(self) -> list[int]:
        """The connection is gone: release every buffer; return the streams whose handlers may
        still be running (to be cancelled)."""
        for stream_id in list(self._partial):
            self._drop(stream_id)
        self._discarding.clear()
        self._queued.clear()
        if self.source is not None:
            self.source.forget(self)
        running = list(self._running)
        self._running.clear()
        return running

    def _reserve(self, size: int) -> bool:
        for index, budget in enumerate(self._budgets):
            if not budget.reserve(size):
                for taken in self._budgets[:index]:
                    taken.release(size)
                return False
        return True

    def _release(self, size: int) -> None:
        for budget in self._budgets:
            budget.release(size)

    def _drop(self, stream_id: int) -> None:
        entry = self._partial.pop(stream_id, None)
        if entry is not None:
            self._release(len(entry[0]))


K = TypeVar("K", bound=Hashable)


class Rotation(Generic[K]):
    """Whose turn it is: round-robin over the sources with work, and within a source over its
    connections with work. ``K`` is whatever names a connection (the transport's own)."""

    def __init__(self) -> None:
        self._ring: OrderedDict[Hashable, OrderedDict[K, None]] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._ring)

    def ready(self, source: Hashable, conn: K) -> None:
        """``conn`` (of ``source``) has a request waiting; a no-op if it was known to."""
        ring = self._ring.get(source)
        if ring is None:
            ring = self._ring[source] = OrderedDict()
        ring[conn] = None

    def next(self) -> tuple[Hashable, K] | None:
        """The next connection to serve one request of, moved to the back of the line (its
        source too); None when nobody waits."""
        if not self._ring:
            return None
        source, ring = next(iter(self._ring.items()))
        self._ring.move_to_end(source)
        conn = next(iter(ring))
        ring.move_to_end(conn)
        return source, conn

    def idle(self, source: Hashable, conn: K) -> None:
        """``conn`` has nothing waiting any more."""
        ring = self._ring.get(source)
        if ring is not None:
            ring.pop(conn, None)
            if not ring:
                del self._ring[source]
