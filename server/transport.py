"""The QUIC transport: a whole request's bytes in, a whole response's bytes out, one per stream.

Event-based on purpose: aioquic's stream reader/writer API keeps a reader per stream forever and
hangs on a reset. This module only translates: aioquic's events into calls on each connection's
`streams.RequestStreams` (which owns every buffer, cap and timeout), and the decisions that come
back into aioquic calls and handler tasks. It owns bytes only and never parses the protocol; the
fixed answers it gives on its own (`Responses`) are rendered by the app, which does. aioquic's
private attributes are reached through `quicadapter` alone.

A handler may also answer with a `streaming.LongResponse` (WATCH): the stream then belongs to
that response, through a `Sink`, until it finishes it. Such a stream is kept apart from the
request streams: it is no request in progress, so request timeouts and request scheduling never
see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from os import PathLike
from typing import Any, NamedTuple

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
    Budget,
    Cancel,
    Counts,
    Decision,
    Dispatch,
    Expire,
    Refuse,
    RequestStreams,
    Reset,
)

log = logging.getLogger("markproto.server.transport")

DEFAULT_MAX_STREAMS = 32
DEFAULT_REQUEST_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 30.0
DEFAULT_MAX_BUFFERED = 64 << 20
"""Request bytes buffered across all connections before new data resets its stream."""
STREAM_ABORTED = 0
"""Application error code of the transport's RESET_STREAM and STOP_SENDING frames."""

_SOCKET_BUFFER = 4 << 20
_DRAIN_POLL = 0.02


class Peer(NamedTuple):
    """The remote address of a request."""

    host: str
    port: int

    @classmethod
    def from_address(cls, addr: NetworkAddress) -> Peer:
        """``::ffff:1.2.3.4`` (IPv4-mapped) becomes ``1.2.3.4``: per-IP limits key on the client."""
        host: str = addr[0]
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]
        return cls(host, addr[1])


Handler = Callable[[bytes, Peer], bytes | Awaitable[bytes] | LongResponse]


@dataclass(frozen=True, slots=True)
class Responses:
    """The answers the transport gives on its own: request over a cap, handler past the request
    timeout, handler raised."""

    oversize: bytes
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
    running: int
    """Handlers still running."""
    discarding: int
    """Refused or reset streams whose remaining bytes are being dropped."""
    unacknowledged: int
    """Streams aioquic still holds: answers not yet acknowledged, streams still open."""
    streaming: int = 0
    """Long-lived responses (WATCH streams) still open."""


class MarkConnection(quicadapter.Connection):
    """One QUIC connection: its stream events go to its `RequestStreams`, whose decisions are
    carried out here; a dispatched request is answered by the handler, now or from a task."""

    def __init__(
        self,
        quic: QuicConnection,
        *,
        handler: Handler,
        responses: Responses,
        streams: RequestStreams,
        credit: int,
        on_close: Callable[[MarkConnection], None],
    ) -> None:
        super().__init__(quic, credit=credit)
        self._handler = handler
        self._responses = responses
        self._streams = streams
        self._on_close = on_close
        self._tasks: dict[int, asyncio.Future[bytes]] = {}
        self._long: dict[int, LongResponse] = {}
        self._waking: set[int] = set()
        self._addr: NetworkAddress = None
        self._peer = Peer("", 0)
        self.closing = False

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        if addr != self._addr:
            self._addr = addr
            self._peer = Peer.from_address(addr)
        super().datagram_received(data, addr)
        if self._waking:
            self._wake()

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived):
            now = self.loop.time()
            decision = self._streams.receive(event.stream_id, event.data, event.end_stream, now)
            if decision is not None:
                self._carry_out(decision)
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
            log.debug("connection from %s:%d", *self._peer)
        elif isinstance(event, ConnectionTerminated):
            log.debug("connection from %s:%d ended: %s", *self._peer, event.reason_phrase)
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

    def _carry_out(self, decision: Decision) -> None:
        sid = decision.stream_id
        if isinstance(decision, Dispatch):
            self._dispatch(sid, decision.request)
        elif isinstance(decision, Refuse):
            self._send(self._responses.oversize, sid)
            if decision.stop:
                self.quic.stop_stream(sid, STREAM_ABORTED)
        elif isinstance(decision, Reset):
            log.debug("stream %d: request reset (buffers full, or incomplete at the timeout)", sid)
            self.quic.reset_stream(sid, STREAM_ABORTED)
            self.quic.stop_stream(sid, STREAM_ABORTED)
        elif isinstance(decision, Expire):
            log.warning("request handler exceeded the request timeout")
            self._tasks.pop(sid).cancel()
            self._send(self._responses.timeout, sid)
        elif isinstance(decision, Cancel):
            self._tasks.pop(sid).cancel()

    def _dispatch(self, sid: int, request: bytes) -> None:
        try:
            result = self._handler(request, self._peer)
            if not isinstance(result, bytes):
                if isinstance(result, LongResponse):
                    self._long[sid] = result
                    result.start(_StreamSink(self, sid))
                    return
                task = asyncio.ensure_future(result)
                self._streams.running(sid, self.loop.time())
                self._tasks[sid] = task
                task.add_done_callback(partial(self._finished, sid))
                return
        except Exception:
            log.exception("request handler raised")
            result = self._responses.internal
        self._send(result, sid)  # no transmit: datagram_received sends once after the whole batch

    def _finished(self, sid: int, task: asyncio.Future[bytes]) -> None:
        self._tasks.pop(sid, None)
        if not self._streams.answered(sid):
            return  # answered already (timeout), abandoned by the peer, or the connection is gone
        if task.cancelled():
            response = self._responses.internal
        elif (exc := task.exception()) is not None:
            log.error("request handler raised", exc_info=exc)
            response = self._responses.internal
        else:
            response = task.result()
        self._send(response, sid)
        self.transmit_soon()  # one transmit for every handler that finishes in this loop turn

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
        self._on_close(self)

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
    """The listening socket: routes datagrams to connections, sweeps request timeouts, reloads the
    certificate and drains."""

    def __init__(
        self,
        handler: Handler,
        configuration: QuicConfiguration,
        responses: Responses,
        *,
        max_request: int,
        max_streams: int,
        request_timeout: float | None,
        max_buffered: int,
    ) -> None:
        super().__init__(configuration, self._connect)
        self._handler = handler
        self._responses = responses
        self._max_request = max_request
        self._max_streams = max_streams
        self._budget = Budget(max_buffered)
        self._connections: set[MarkConnection] = set()
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
            sum(c.running for c in counts),
            sum(c.discarding for c in counts),
            sum(conn.unacknowledged for conn in conns),
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
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self._connections):
            conn.shut()
        self.close_socket()

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        if self.draining and not (isinstance(data, bytes) and self.knows(data)):
            return
        super().datagram_received(data, addr)

    def _connect(self, quic: QuicConnection, stream_handler: object = None) -> MarkConnection:
        conn = MarkConnection(
            quic,
            handler=self._handler,
            responses=self._responses,
            streams=RequestStreams(self._max_request, self._budget, self._timeout),
            credit=self._max_streams,
            on_close=self._connections.discard,
        )
        self._connections.add(conn)
        return conn

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
) -> MarkServer:
    """Listen for Mark Protocol connections and answer each request with ``handler``.

    ``host`` "::" listens dual-stack, or on 0.0.0.0 where the kernel has no IPv6; any other host
    binds just that address. Port 0 picks a free port (see `MarkServer.port`). ``max_streams`` caps
    concurrent requests per connection through stream credit; ``request_timeout`` (None or 0: no
    limit) bounds both reading a request and running its handler.
    """
    base = QuicConfiguration(
        is_client=False, alpn_protocols=[limits.ALPN], idle_timeout=idle_timeout
    )
    configuration = _with_certificate(base, certfile, keyfile)
    sock = await _bind(host, port)
    try:
        _, server = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: MarkServer(
                handler,
                configuration,
                responses,
                max_request=max_request,
                max_streams=max_streams,
                request_timeout=request_timeout,
                max_buffered=max_buffered,
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
