"""The QUIC transport: a whole request's bytes in, a whole response's bytes out, one per stream.

Event-based on purpose: aioquic's stream reader/writer API keeps a reader per stream forever and
hangs on a reset. This module only translates: aioquic's events into calls on each connection's
`streams.RequestStreams` (which owns every buffer, cap, queue and timeout, and the `Source` of
each client address, which owns its rate and its byte budget), and the decisions that come back
into aioquic calls and handler tasks. It owns bytes only and never parses the protocol; the fixed
answers it gives on its own (`Responses`) are rendered by the app, which does. aioquic's private
attributes are reached through `quicadapter` alone.

Requests are served in turns (`streams.Rotation`): after each datagram's events, and again from
the loop while requests wait, at most `TURN` requests, one per source with work in turn, so a
peer with many streams or connections delays another peer's request by a turn at most. Stream
credit a rate-limited source used is held back and given back, one stream per token, by a timer
that runs only while some source is owed credit.

A handler may also answer with a `streaming.LongResponse` (WATCH): the stream then belongs to
that response, through a `Sink`, until it finishes it. Such a stream leaves the request streams
as soon as its handler returns: it is no request in progress, so it holds no turn, no request
timeout applies to it, and the scheduler and the byte budgets never see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from os import PathLike
from typing import Any

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import NetworkAddress, QuicConnection
from aioquic.quic.events import (
    ConnectionTerminated,
    HandshakeCompleted,
    QuicEvent,
    StopSendingReceived,
    StreamDataReceived,
    StreamReset,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from markproto.protocol import limits
from markproto.server import quicadapter
from markproto.server.streaming import LongResponse, Sink
from markproto.server.streams import (
    Bucket,
    Budget,
    Cancel,
    Counts,
    Decision,
    Dispatch,
    Expire,
    Limited,
    Queued,
    Refuse,
    RequestStreams,
    Reset,
    Rotation,
    Source,
)

log = logging.getLogger("markproto.server.transport")

DEFAULT_MAX_STREAMS = 32
DEFAULT_REQUEST_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 30.0
DEFAULT_MAX_BUFFERED = 64 << 20
"""Request bytes buffered across all connections before new data resets its stream."""
DEFAULT_SOURCE_BUFFERED = 16 << 20
"""Request bytes buffered for one client address (all its connections) before new data resets
its stream: a quarter of the whole, so one address cannot take the others' room."""
DEFAULT_UPLOAD_RATE = 1 << 20
"""Request bytes a second one client address may send, sustained (its connections together)."""
DEFAULT_UPLOAD_BURST = 2 * limits.MAX_REQUEST
"""Request bytes a client address may send at once, beyond each connection's first window: two
of the largest requests."""
RECEIVE_WINDOW = 64 << 10
"""Request bytes a connection may have in flight beyond what it sent (QUIC flow control): what
a sender can put in the socket's queue at once, ahead of another client's packet, so another
client's request waits behind at most this many bytes of it (about 55 packets, a few ms to
decrypt and take in). The upload rate caps a client anyway, so a wider window would only buy
throughput on paths slower than 64 KiB a round trip."""
STREAM_ABORTED = 0
"""Application error code of the transport's RESET_STREAM and STOP_SENDING frames."""
TURN = 16
"""Requests served in one turn before the loop reads the next datagram."""
CREDIT_EVERY = 0.02
"""Seconds between the moments held stream credit is given back (while some is owed)."""

_SOCKET_BUFFER = 4 << 20
_DRAIN_POLL = 0.02


def _nobody() -> None:
    """A `Peer.writer` that trusts no one (a request made outside a connection)."""


@dataclass(frozen=True, slots=True)
class Peer:
    """The remote address of a request, and how to say its connection holds a write token."""

    host: str
    port: int
    writer: Callable[[], None] = field(default=_nobody, compare=False, repr=False)
    """Called when a request showed a publish token (a write past the write gate, or a read
    whose token may publish its path): from then on the connection is the token holder's, and
    the address's request and upload rates no longer apply to it (SPEC §1.3)."""

    @classmethod
    def from_address(cls, addr: NetworkAddress, writer: Callable[[], None] = _nobody) -> Peer:
        """``::ffff:1.2.3.4`` (IPv4-mapped) becomes ``1.2.3.4``: per-IP limits key on the client."""
        host: str = addr[0]
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]
        return cls(host, addr[1], writer)


Handler = Callable[[bytes, Peer], bytes | Awaitable[bytes] | LongResponse]
Allow = Callable[[str, float], bool]
"""The rate limiter: spend one token of a client IP's bucket at monotonic ``now``."""


@dataclass(frozen=True, slots=True)
class Responses:
    """The answers the transport gives on its own: request over a cap, source over its rate,
    request past the request timeout, handler raised."""

    oversize: bytes
    rate_limited: bytes
    timeout: bytes
    internal: bytes


@dataclass(frozen=True, slots=True)
class Usage:
    """What a server holds right now, summed over its connections (for tests and debugging)."""

    connections: int
    buffered: int
    """Request bytes buffered."""
    partial: int
    """Requests still arriving."""
    queued: int
    """Whole requests waiting their turn."""
    running: int
    """Requests being answered."""
    discarding: int
    """Refused or reset streams whose remaining bytes are being dropped."""
    unacknowledged: int
    """Streams aioquic still holds: answers not yet acknowledged, streams still open."""
    sources: int
    """Client addresses with a connection."""
    streaming: int
    """Long-lived responses (WATCH streams) still open."""


class MarkConnection(quicadapter.Connection):
    """One QUIC connection: its stream events go to its `RequestStreams`, whose decisions are
    carried out here; a request whose turn comes is answered by the handler, now or from a task."""

    def __init__(
        self, quic: QuicConnection, *, server: MarkServer, streams: RequestStreams, peer: Peer
    ) -> None:
        super().__init__(quic, credit=server.max_streams, window=RECEIVE_WINDOW, batch=server.batch)
        self._server = server
        self._handler = server.handler
        self._responses = server.responses
        self._streams = streams
        self._tasks: dict[int, asyncio.Future[bytes]] = {}
        self._long: dict[int, LongResponse] = {}
        self._waking: set[int] = set()
        self._addr: NetworkAddress = None
        self._peer = Peer(peer.host, peer.port, streams.trust)
        self.closing = False

    @property
    def streams(self) -> RequestStreams:
        return self._streams

    @property
    def source(self) -> Source:
        assert self._streams.source is not None
        return self._streams.source

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        if addr != self._addr:
            self._addr = addr
            self._peer = Peer.from_address(addr, self._streams.trust)
        super().datagram_received(data, addr)
        if self._waking:
            self._wake()

    def received(self) -> None:
        self._server.turn()

    def widen(self, wanted: int) -> int:
        if self._streams.trusted:
            return wanted
        granted = self.source.upload(wanted, self.loop.time())
        if granted < wanted:
            self._server.owed()
        return granted

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived):
            now = self.loop.time()
            decision = self._streams.receive(event.stream_id, event.data, event.end_stream, now)
            if decision is not None:
                self._carry_out(decision)
            if holds := self._streams.take_holds():
                for _ in range(holds):
                    self.hold_credit()
                self._server.owed()
        elif isinstance(event, StreamReset):
            if not self._stop_long(event.stream_id):
                self._streams.peer_reset(event.stream_id)
        elif isinstance(event, StopSendingReceived):
            if self._stop_long(event.stream_id):
                return
            cancel = self._streams.peer_stopped(event.stream_id)
            if cancel is not None:
                self._carry_out(cancel)
        elif isinstance(event, HandshakeCompleted):
            log.debug("connection from %s:%d", self._peer.host, self._peer.port)
        elif isinstance(event, ConnectionTerminated):
            peer = self._peer
            log.debug("connection from %s:%d ended: %s", peer.host, peer.port, event.reason_phrase)
            self._teardown()

    @property
    def settled(self) -> bool:
        """No request in progress and every response acknowledged: closing now loses nothing."""
        return not self._streams.busy and self.acknowledged

    def counts(self) -> Counts:
        return self._streams.counts()

    @property
    def streaming(self) -> int:
        """Long-lived responses still open on this connection."""
        return len(self._long)

    def expire(self, now: float) -> None:
        """Carry out the request timeout at ``now``."""
        decisions = self._streams.expire(now)
        for decision in decisions:
            self._carry_out(decision)
        if decisions:
            self.transmit()

    def serve_one(self) -> bool:
        """Serve this connection's oldest waiting request; True if more wait."""
        dispatch = self._streams.next(self.loop.time())
        if dispatch is not None:
            self._carry_out(dispatch)
        return self._streams.queued

    def _carry_out(self, decision: Decision) -> None:
        sid = decision.stream_id
        if isinstance(decision, Queued):
            self._server.ready(self)
        elif isinstance(decision, Dispatch):
            self._dispatch(sid, decision.request)
        elif isinstance(decision, Limited):
            self._server.limited[self._peer.host] += 1
            self._send(self._responses.rate_limited, sid)
            if decision.stop:
                self.quic.stop_stream(sid, STREAM_ABORTED)
        elif isinstance(decision, Refuse):
            self._send(self._responses.oversize, sid)
            if decision.stop:
                self.quic.stop_stream(sid, STREAM_ABORTED)
        elif isinstance(decision, Reset):
            log.debug("stream %d: request reset (buffers full, or incomplete at the timeout)", sid)
            self.quic.reset_stream(sid, STREAM_ABORTED)
            self.quic.stop_stream(sid, STREAM_ABORTED)
        elif isinstance(decision, Expire):
            task = self._tasks.get(sid)
            if task is None:  # it never got its turn: nothing was done
                log.warning("request waited past the request timeout")
                self._answer(sid, self._responses.timeout)
            else:  # its handler says what it managed (see _finished)
                log.warning("request handler exceeded the request timeout")
                task.cancel()
        elif isinstance(decision, Cancel):
            self._tasks.pop(sid).cancel()

    def _dispatch(self, sid: int, request: bytes) -> None:
        try:
            result = self._handler(request, self._peer)
            if not isinstance(result, bytes):
                if isinstance(result, LongResponse):
                    self._streams.detach(sid)
                    self._long[sid] = result
                    result.start(_StreamSink(self, sid))
                    return
                task = asyncio.ensure_future(result)
                self._tasks[sid] = task
                task.add_done_callback(partial(self._finished, sid))
                return
        except Exception:
            log.exception("request handler raised")
            result = self._responses.internal
        self._answer(sid, result)  # no transmit: sent once after the whole turn

    def _finished(self, sid: int, task: asyncio.Future[bytes]) -> None:
        self._tasks.pop(sid, None)
        if task.cancelled():  # expired: a handler that says nothing more gets the timeout bytes
            response = self._responses.timeout
        elif (exc := task.exception()) is not None:
            log.error("request handler raised", exc_info=exc)
            response = self._responses.internal
        else:
            response = task.result()
        if self._answer(sid, response):
            self.transmit_soon()  # one transmit for every handler that finishes in this loop turn

    def _answer(self, sid: int, response: bytes) -> bool:
        """Send a dispatched request's answer unless the peer stopped reading or left."""
        if not self._streams.answered(sid):
            return False
        self._send(response, sid)
        return True

    def _send(self, response: bytes, sid: int) -> None:
        try:
            self.quic.send_stream_data(sid, response, end_stream=True)
        except (RuntimeError, ValueError):  # the peer sent STOP_SENDING: nobody reads the answer
            log.debug("stream %d: response dropped, the peer stopped reading", sid)

    def _teardown(self) -> None:
        self._streams.close()
        tasks, self._tasks = self._tasks, {}
        for task in tasks.values():
            task.cancel()
        long, self._long = self._long, {}
        self._waking.clear()
        for response in long.values():
            response.stop()
        self._server.gone(self)

    # -- long-lived responses (streaming.LongResponse) --------------------------------------------

    def _stop_long(self, sid: int) -> bool:
        """The peer stopped reading, or reset, a long-lived response's stream: end it silently."""
        response = self._long.pop(sid, None)
        if response is None:
            return False
        self._waking.discard(sid)
        with contextlib.suppress(ValueError, RuntimeError):
            self.quic.reset_stream(sid, STREAM_ABORTED)
        response.stop()
        return True

    def _wake(self) -> None:
        """Acknowledgements arrived: the responses waiting for room may send again."""
        waking, self._waking = self._waking, set()
        for sid in waking:
            response = self._long.get(sid)
            if response is not None:
                response.resume()

    def _finish_long(self, sid: int, data: bytes) -> None:
        if self._long.pop(sid, None) is None:
            return
        self._waking.discard(sid)
        self._send(data, sid)
        self.transmit_soon()

    def _send_long(self, sid: int, data: bytes) -> None:
        if sid not in self._long:
            return
        try:
            self.quic.send_stream_data(sid, data)
        except (RuntimeError, ValueError):
            log.debug("stream %d: data dropped, the peer stopped reading", sid)
            return
        self.transmit_soon()

    def shut(self) -> None:
        self._teardown()
        super().shut()


class _StreamSink(Sink):
    """A long-lived response's view of its stream."""

    __slots__ = ("_conn", "_sid")

    def __init__(self, conn: MarkConnection, sid: int) -> None:
        self._conn = conn
        self._sid = sid

    @property
    def owner(self) -> object:
        return self._conn

    @property
    def backlog(self) -> int:
        return self._conn.backlog(self._sid)

    def send(self, data: bytes) -> None:
        self._conn._send_long(self._sid, data)

    def finish(self, data: bytes = b"") -> None:
        self._conn._finish_long(self._sid, data)

    def wake(self) -> None:
        if self._sid in self._conn._long:
            self._conn._waking.add(self._sid)


class MarkServer(quicadapter.Listener):
    """The listening socket: routes datagrams to connections, serves waiting requests in turns,
    gives held stream credit back, sweeps request timeouts, reloads the certificate and drains."""

    def __init__(
        self,
        handler: Handler,
        configuration: QuicConfiguration,
        responses: Responses,
        sock: socket.socket,
        *,
        max_request: int,
        max_streams: int,
        request_timeout: float | None,
        max_buffered: int,
        source_buffered: int = DEFAULT_SOURCE_BUFFERED,
        allow: Allow | None = None,
        upload_rate: float = DEFAULT_UPLOAD_RATE,
        upload_burst: int = DEFAULT_UPLOAD_BURST,
    ) -> None:
        super().__init__(configuration, self._connect, sock)
        self._uploads = (upload_rate, upload_burst)
        self.handler = handler
        self.responses = responses
        self.max_streams = max_streams
        self._max_request = max_request
        self._source_buffered = source_buffered
        self._allow = allow
        self._budget = Budget(max_buffered)
        self._connections: dict[MarkConnection, Source] = {}
        self._owners: dict[RequestStreams, MarkConnection] = {}
        self._sources: dict[str, tuple[Source, int]] = {}
        """Each client address with a connection: its `Source` and how many connections."""
        self._rotation: Rotation[MarkConnection] = Rotation()
        self._turn: asyncio.TimerHandle | None = None
        self._crediting: asyncio.TimerHandle | None = None
        self._arriving: NetworkAddress = None
        self.limited: Counter[str] = Counter()
        """Streams refused for their address's rate, by address, since `log_refusals`."""
        self.draining = False
        # One sweep per server, not a timer per stream: measured 0.1 us against 1.4 us per request
        # for loop.call_at + cancel. A deadline fires late by up to a quarter of the timeout, 1 s
        # at most.
        self._timeout = request_timeout or 0.0
        self._sweep_every = min(1.0, self._timeout / 4)
        self._sweeper = None
        if self._timeout:
            self._sweeper = self.loop.call_later(self._sweep_every, self._sweep)

    @property
    def addresses(self) -> tuple[tuple[str, int], ...]:
        """What the socket is bound to, as ``(host, port)``."""
        name = self.sockname()
        return ((name[0], name[1]),)

    @property
    def port(self) -> int:
        """The UDP port (the one the system picked when asked for port 0)."""
        return self.addresses[0][1]

    def usage(self) -> Usage:
        """What every connection holds right now."""
        conns = list(self._connections)
        counts = [conn.counts() for conn in conns]
        return Usage(
            len(conns),
            self._budget.used,
            sum(c.partial for c in counts),
            sum(c.queued for c in counts),
            sum(c.running for c in counts),
            sum(c.discarding for c in counts),
            sum(conn.unacknowledged for conn in conns),
            len(self._sources),
            sum(conn.streaming for conn in conns),
        )

    def reload_certificate(
        self, certfile: str | PathLike[str], keyfile: str | PathLike[str]
    ) -> None:
        """Serve this pair to new connections; existing ones keep theirs. A bad pair raises and the
        old one stays in use."""
        self.configuration = _with_certificate(self.configuration, certfile, keyfile)
        log.info("tls: certificate reloaded from %s", certfile)

    async def drain(self, timeout: float = 10.0) -> bool:
        """Stop accepting connections at once, let requests in progress finish, then close.

        QUIC has no GOAWAY, so new connections are refused by dropping their Initial packets.
        Streams that existing connections open during the drain are still served (friendlier than
        resetting them); a connection is closed as soon as it has no request in progress and every
        response is acknowledged, so only a client that keeps its connection busy holds the drain,
        and ``timeout`` bounds that. Returns whether every connection closed in time; the rest are
        closed at once when it expires.
        """
        self.draining = True
        deadline = self.loop.time() + timeout
        while True:
            for conn in list(self._connections):
                if not conn.closing and conn.settled:
                    conn.closing = True
                    conn.close()
            drained = all(conn.closing for conn in self._connections)
            if drained or self.loop.time() >= deadline:
                break
            await asyncio.sleep(_DRAIN_POLL)
        self.close()
        if drained:
            log.info("all connections drained")
        else:
            log.warning("shutdown incomplete: requests still in progress after %.1f s", timeout)
        return drained

    def close(self) -> None:
        """Close every connection and the socket now; requests in progress are lost."""
        self.draining = True
        for handle in (self._sweeper, self._turn, self._crediting):
            if handle is not None:
                handle.cancel()
        for conn in list(self._connections):
            conn.shut()
        self.close_socket()

    def arrived(self, data: bytes | str, addr: NetworkAddress) -> None:
        if self.draining and not (isinstance(data, bytes) and self.knows(data)):
            return
        self._arriving = addr
        super().arrived(data, addr)

    def log_refusals(self) -> None:
        """One INFO record of the streams refused for their rate since the last call (a flood
        would otherwise write a line per request)."""
        if self.limited:
            (busiest, most), *_ = self.limited.most_common(1)
            log.info(
                "requests refused for their rate",
                extra={
                    "requests": sum(self.limited.values()),
                    "addresses": len(self.limited),
                    "busiest": busiest,
                    "busiest_requests": most,
                },
            )
            self.limited.clear()

    # -- turns ------------------------------------------------------------------------------------

    def ready(self, conn: MarkConnection) -> None:
        """``conn`` has a whole request waiting its turn."""
        self._rotation.ready(conn.source, conn)

    def turn(self) -> None:
        """Serve up to `TURN` waiting requests, one per source in turn; what is left waits for a
        turn from the loop, after the next datagram is read."""
        self._turn = None
        served = set()
        for _ in range(TURN):
            picked = self._rotation.next()
            if picked is None:
                break
            source, conn = picked
            if not conn.serve_one():
                self._rotation.idle(source, conn)
            served.add(conn)
        for conn in served:
            conn.transmit_soon()
        if self._rotation and self._turn is None:
            # call_later(0), not call_soon: the loop reads the datagrams that arrived meanwhile
            # first, so their requests join this rotation instead of waiting behind it.
            self._turn = self.loop.call_later(0, self.turn)

    # -- stream credit ----------------------------------------------------------------------------

    def owed(self) -> None:
        """Some source was refused for its rate, or some connection's window for its bytes: give
        credit and window back as the buckets refill."""
        if self._crediting is None:
            self._crediting = self.loop.call_later(CREDIT_EVERY, self._credit)

    def _credit(self) -> None:
        self._crediting = None
        now = self.loop.time()
        owed = False
        given: set[MarkConnection] = set()
        for source, _ in self._sources.values():
            for streams in source.release(now):
                conn = self._owners[streams]
                conn.give_credit()
                given.add(conn)
            owed = owed or source.owed
        for conn in given:
            conn.transmit_soon()
        for conn, source in self._connections.items():
            if conn.starved and (conn.streams.trusted or source.may_upload(now)):
                conn.transmit()  # asks for its window again
            owed = owed or conn.starved
        if owed:
            self.owed()

    # -- connections ------------------------------------------------------------------------------

    def _connect(self, quic: QuicConnection, stream_handler: object = None) -> MarkConnection:
        peer = Peer.from_address(self._arriving)
        source, count = self._sources.get(peer.host, (None, 0))
        if source is None:
            allow = self._allow
            rate, burst = self._uploads
            source = Source(
                peer.host,
                self._source_buffered,
                None if allow is None else partial(allow, peer.host),
                Bucket(rate, burst, self.loop.time()) if rate else None,
            )
        self._sources[peer.host] = (source, count + 1)
        streams = RequestStreams(self._max_request, self._budget, self._timeout, source)
        conn = MarkConnection(quic, server=self, streams=streams, peer=peer)
        self._connections[conn] = source
        self._owners[streams] = conn
        return conn

    def gone(self, conn: MarkConnection) -> None:
        """``conn`` is gone: forget it, and its source with its last connection."""
        source = self._connections.pop(conn, None)
        if source is None:
            return
        del self._owners[conn.streams]
        self._rotation.idle(source, conn)
        _, count = self._sources[source.host]
        if count > 1:
            self._sources[source.host] = (source, count - 1)
        else:
            del self._sources[source.host]

    def _sweep(self) -> None:
        now = self.loop.time()
        for conn in list(self._connections):
            conn.expire(now)
        self._sweeper = self.loop.call_later(self._sweep_every, self._sweep)


async def serve(
    handler: Handler,
    *,
    host: str = "::",
    port: int = limits.DEFAULT_PORT,
    certfile: str | PathLike[str],
    keyfile: str | PathLike[str],
    responses: Responses,
    max_request: int = limits.MAX_REQUEST,
    max_streams: int = DEFAULT_MAX_STREAMS,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    max_buffered: int = DEFAULT_MAX_BUFFERED,
    source_buffered: int = DEFAULT_SOURCE_BUFFERED,
    allow: Allow | None = None,
    upload_rate: float = DEFAULT_UPLOAD_RATE,
    upload_burst: int = DEFAULT_UPLOAD_BURST,
) -> MarkServer:
    """Listen for Mark Protocol connections and answer each request with ``handler``.

    ``host`` "::" listens dual-stack, or on 0.0.0.0 where the kernel has no IPv6; any other host
    binds just that address. Port 0 picks a free port (see `MarkServer.port`). ``max_streams`` caps
    concurrent requests per connection through stream credit; ``request_timeout`` (None or 0: no
    limit) bounds both reading a request and answering it. ``allow`` is the rate limiter (None:
    none), asked at each new stream's first byte; ``upload_rate`` (0: none) and ``upload_burst``
    bound the request bytes a client address may send.
    """
    base = QuicConfiguration(
        is_client=False,
        alpn_protocols=[limits.ALPN],
        idle_timeout=idle_timeout,
        max_data=RECEIVE_WINDOW,
    )
    configuration = _with_certificate(base, certfile, keyfile)
    sock = await _bind(host, port)
    try:
        _, server = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: MarkServer(
                handler,
                configuration,
                responses,
                sock,
                max_request=max_request,
                max_streams=max_streams,
                request_timeout=request_timeout,
                max_buffered=max_buffered,
                source_buffered=source_buffered,
                allow=allow,
                upload_rate=upload_rate,
                upload_burst=upload_burst,
            ),
            sock=sock,
        )
    except BaseException:
        sock.close()
        raise
    log.debug("listening on udp %s", server.addresses)
    return server


def _with_certificate(
    base: QuicConfiguration, certfile: str | PathLike[str], keyfile: str | PathLike[str]
) -> QuicConfiguration:
    """A copy of ``base`` serving this pair. aioquic would take a key that does not match the
    certificate and fail every handshake later, so that is checked here."""
    configuration = dataclasses.replace(base)
    configuration.load_cert_chain(certfile, keyfile)
    cert_key = configuration.certificate.public_key()
    if _spki(cert_key) != _spki(configuration.private_key.public_key()):
        raise ValueError(f"{keyfile} is not the private key of the certificate in {certfile}")
    return configuration


def _spki(public_key: Any) -> bytes:
    der: bytes = public_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return der


async def _bind(host: str, port: int) -> socket.socket:
    if host == "::":
        try:
            return _udp_socket(socket.AF_INET6, ("::", port), dual_stack=True)
        except OSError as exc:
            if exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                raise
            log.warning("IPv6 is unavailable (%s): listening on 0.0.0.0 only", exc)
            host = "0.0.0.0"
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE
    )
    family, _, _, _, addr = infos[0]
    return _udp_socket(family, addr)


def _udp_socket(family: int, addr: Any, *, dual_stack: bool = False) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            # Bursts of small requests overflow the default buffers; the kernel caps the value.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)
        sock.bind(addr)
    except BaseException:
        sock.close()
        raise
    return sock
