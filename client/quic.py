"""One client QUIC connection (aioquic): each request on its own stream, aioquic's events and
failures (most of which it reports opaquely) turned into the client's one-line errors.

Only ``connection.Pool`` imports this module, on its first dial: aioquic costs a third of a
second to import, which nothing that never connects should pay.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import socket
import ssl
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import NetworkAddress, QuicConnection
from aioquic.quic.events import (
    ConnectionTerminated,
    HandshakeCompleted,
    QuicEvent,
    StreamDataReceived,
)
from aioquic.quic.events import StreamReset as StreamResetEvent
from aioquic.quic.packet import QuicErrorCode
from aioquic.tls import AlertDescription

from markproto.client import quicadapter
from markproto.client.errors import (
    ALPNMismatch,
    ConnectionLost,
    HandshakeFailed,
    ResponseTooLarge,
    StreamReset,
    TransportError,
    Unreachable,
)
from markproto.client.trust import Plan, Verification
from markproto.protocol.datagrams import queued
from markproto.protocol.digests import fingerprint
from markproto.protocol.limits import ALPN, LOOPBACK_DATAGRAM

_GIVE_UP = 0
"""Application error code on streams the client abandons (timeout, oversize response)."""
_CRYPTO = QuicErrorCode.CRYPTO_ERROR
_ALPN_REFUSED = _CRYPTO + AlertDescription.no_application_protocol
_BAD_CERTIFICATE = _CRYPTO + AlertDescription.bad_certificate

# aioquic logs each failed handshake as a warning on "quic"; with no handler configured Python's
# last-resort handler would print it to stderr, beside the error the client raises for it.
# Records still propagate to whatever handlers the application installs.
logging.getLogger("quic").addHandler(logging.NullHandler())


async def open_connection(
    sock: socket.socket, authority: str, server_name: str, plan: Plan, idle_timeout: float
) -> ClientProtocol:
    """A connection over the connected UDP socket ``sock``, ready for ``connect``; the socket
    belongs to the connection from here on."""
    config = QuicConfiguration(
        is_client=True, alpn_protocols=[ALPN], server_name=server_name, idle_timeout=idle_timeout
    )
    if plan.verification is Verification.SYSTEM:
        config.cafile, config.capath = plan.cafile, plan.capath
    else:
        config.verify_mode = ssl.CERT_NONE
    quic = QuicConnection(configuration=config)
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_datagram_endpoint(
        lambda: ClientProtocol(quic, authority, sock), sock=sock
    )
    return conn


@dataclass(slots=True, eq=False)
class Exchange:
    """One request: queued until stream credit allows it, then in flight on stream ``sid``."""

    data: bytes
    limit: int
    opened: asyncio.Future[None]
    done: asyncio.Future[bytes]
    sid: int = -1
    buffer: bytearray = field(default_factory=bytearray)
    sink: Callable[[bytes], None] | None = None
    """For a long-lived response (WATCH): takes the data as it arrives, instead of the buffer;
    ``done`` then resolves with nothing at the stream's end."""


class ClientProtocol(QuicConnectionProtocol):
    """One client connection, event-based (aioquic's stream API leaks and hangs on resets).

    Requests wait in a queue until the peer's MAX_STREAMS allows their stream, so none is handed to
    QUIC before it can go on the wire. Failures are taken from ``ConnectionTerminated`` and from
    the connection's close event as soon as it is set, not 3×PTO later when aioquic emits it.
    """

    def __init__(self, quic: QuicConnection, authority: str, sock: socket.socket) -> None:
        super().__init__(quic)
        self.quic = quic
        self._socket = sock
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.DatagramTransport | None = None
        self.authority = authority
        self.handshake: asyncio.Future[None] = self.loop.create_future()
        self.handshake.add_done_callback(retrieve)
        self.lost: asyncio.Future[None] = self.loop.create_future()
        self.on_dead: Callable[[ClientProtocol], None] = lambda conn: None
        self.retired = False
        self._queue: deque[Exchange] = deque()
        self._streams: dict[int, Exchange] = {}
        self._dead: str | None = None
        self._keepalive: asyncio.TimerHandle | None = None

    @property
    def alive(self) -> bool:
        return self._dead is None and not self.retired

    @property
    def inflight(self) -> int:
        return len(self._queue) + len(self._streams)

    @property
    def peer_der(self) -> bytes | None:
        """The DER of the peer's certificate, also after a handshake that rejected it."""
        return quicadapter.peer_certificate(self.quic)

    def submit(
        self, data: bytes, limit: int, sink: Callable[[bytes], None] | None = None
    ) -> Exchange:
        ex = Exchange(data, limit, self.loop.create_future(), self.loop.create_future(), sink=sink)
        if self._dead is not None:
            ex.opened.set_exception(self._lost(sent=False))
        else:
            self._queue.append(ex)
            self._pump()
        return ex

    def release(self, ex: Exchange) -> None:
        """The request is over (answered, failed or abandoned): free its stream and close a retired
        connection after its last request."""
        for fut in (ex.opened, ex.done):
            if fut.done() and not fut.cancelled():
                fut.exception()
        if ex.sid < 0:
            with contextlib.suppress(ValueError):
                self._queue.remove(ex)
        elif self._streams.pop(ex.sid, None) is not None and self._dead is None:
            self._abandon(ex.sid)
        if self.retired and not self.inflight:
            self.shutdown("evicted")

    def retire(self) -> None:
        """Take no new requests; close once the in-flight ones are over."""
        self.retired = True
        self._stop_keepalive()
        if not self.inflight:
            self.shutdown("evicted")

    def shutdown(self, reason: str) -> None:
        """Fast close: send CONNECTION_CLOSE and drop the socket without the 3×PTO closing wait."""
        if self._dead is None:
            self.quic.close(reason_phrase=reason)
            self.transmit()
            self._die(reason)

    def keepalive(self, period: float) -> None:
        """PING every ``period`` seconds so the idle timeout never fires while pooled."""

        def ping() -> None:
            if self.alive:
                self.quic.send_ping(0)
                self.transmit()
                self._keepalive = self.loop.call_later(period, ping)

        self._keepalive = self.loop.call_later(period, ping)

    # aioquic hooks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport = cast(asyncio.DatagramTransport, transport)

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived):
            ex = self._streams.get(event.stream_id)
            if ex is None:
                return
            if ex.sink is not None:
                if event.data:
                    ex.sink(event.data)
                if event.end_stream and self._streams.pop(event.stream_id, None) is not None:
                    _settle(ex.done, b"")
                return
            ex.buffer += event.data
            if len(ex.buffer) > ex.limit:
                del self._streams[event.stream_id]
                self._abandon(event.stream_id)
                message = f"{self.authority}: response larger than {ex.limit} bytes"
                _settle(ex.done, ResponseTooLarge(message, sent=True))
            elif event.end_stream:
                del self._streams[event.stream_id]
                _settle(ex.done, bytes(ex.buffer))
        elif isinstance(event, StreamResetEvent):
            ex = self._streams.pop(event.stream_id, None)
            if ex is not None:
                message = f"{self.authority}: stream reset by the server (code {event.error_code})"
                _settle(ex.done, StreamReset(message, sent=True))
        elif isinstance(event, HandshakeCompleted):
            if event.alpn_protocol == ALPN:
                self._widen_datagrams()
                _settle(self.handshake, None)
            else:
                _settle(self.handshake, self._alpn_mismatch())
                self.shutdown("no common ALPN protocol")
        elif isinstance(event, ConnectionTerminated):
            self._terminated(event)

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        """This datagram and up to `READ_BATCH` - 1 more the socket already holds, then one
        transmit: asyncio reads one datagram a loop turn and aioquic transmits after each, which
        for a large response cost an acknowledgement pass and a loop turn per datagram."""
        quic, clock = self.quic, self.loop.time
        quic.receive_datagram(cast(bytes, data), addr, now=clock())
        for data, addr in queued(self._socket.recvfrom, self.error_received):
            quic.receive_datagram(data, addr, now=clock())
        self._process_events()
        self.transmit()
        close = quicadapter.close_event(self.quic)
        if close is not None:
            self._terminated(close)
        elif self._queue:
            self._pump()

    def error_received(self, exc: Exception) -> None:
        """ICMP errors reach a connected UDP socket: a refusal means nobody listens any more; during
        the handshake any error means this address will not work."""
        refused = isinstance(exc, ConnectionRefusedError)
        if refused or not self.handshake.done():
            strerror = exc.strerror if isinstance(exc, OSError) else None
            reason = "connection refused" if refused else (strerror or str(exc)).lower()
            _settle(self.handshake, Unreachable(f"{self.authority}: unreachable ({reason})"))
            self._die(reason)

    def connection_lost(self, exc: Exception | None) -> None:
        self._die("connection closed")
        quicadapter.cancel_timers(self)
        _settle(self.lost, None)

    # private

    def _widen_datagrams(self) -> None:
        """On a loopback path, send datagrams as large as the path and the peer take."""
        size = loopback_datagram_size(self._socket)
        if size:
            quicadapter.raise_datagram_size(
                self.quic, min(size, quicadapter.peer_max_udp_payload(self.quic))
            )

    def _pump(self) -> None:
        """Open streams for queued requests while the peer's stream credit allows."""
        sent = False
        while self._queue:
            ex = self._queue[0]
            if ex.opened.done():
                self._queue.popleft()
                continue
            sid = quicadapter.next_stream(self.quic)
            if sid is None:
                break
            self._queue.popleft()
            self.quic.send_stream_data(sid, ex.data, end_stream=True)
            ex.data, ex.sid = b"", sid
            self._streams[sid] = ex
            ex.opened.set_result(None)
            sent = True
        if sent:
            quicadapter.transmit_soon(self)

    def _abandon(self, sid: int) -> None:
        with contextlib.suppress(ValueError):
            self.quic.stop_stream(sid, _GIVE_UP)
            self.quic.reset_stream(sid, _GIVE_UP)
        quicadapter.transmit_soon(self)

    def _terminated(self, event: ConnectionTerminated) -> None:
        if self._dead is not None:
            return
        code, phrase = event.error_code, event.reason_phrase
        if not self.handshake.done():
            _settle(self.handshake, self._dial_error(code, phrase))
        if phrase:
            reason = phrase.lower() if phrase == "Idle timeout" else phrase
        elif code == QuicErrorCode.NO_ERROR:
            reason = "closed by the server"
        else:
            reason = f"error 0x{code:x}"
        self._die(reason)

    def _dial_error(self, code: int, phrase: str) -> TransportError:
        if code == _ALPN_REFUSED:
            return self._alpn_mismatch()
        if _CRYPTO <= code <= _CRYPTO + 0xFF:
            der = self.peer_der if code == _BAD_CERTIFICATE else None
            reason = readable(phrase) or f"TLS alert {code - _CRYPTO}"
            return HandshakeFailed(
                f"{self.authority}: TLS handshake failed ({reason})",
                reason=reason,
                fingerprint=None if der is None else fingerprint(der),
            )
        return Unreachable(f"{self.authority}: unreachable ({phrase or f'error 0x{code:x}'})")

    def _alpn_mismatch(self) -> ALPNMismatch:
        return ALPNMismatch(f"{self.authority}: server does not speak {ALPN} (ALPN mismatch)")

    def _lost(self, *, sent: bool) -> ConnectionLost:
        return ConnectionLost(f"{self.authority}: connection lost ({self._dead})", sent=sent)

    def _die(self, reason: str) -> None:
        """Fail everything pending, leave the pool and drop the socket (and aioquic's timers)."""
        if self._dead is not None:
            return
        self._dead = reason
        _settle(self.handshake, Unreachable(f"{self.authority}: unreachable ({reason})"))
        for ex in self._queue:
            _settle(ex.opened, self._lost(sent=False))
        for ex in self._streams.values():
            _settle(ex.done, self._lost(sent=True))
        self._queue.clear()
        self._streams.clear()
        self._stop_keepalive()
        quicadapter.cancel_timers(self)
        self.on_dead(self)
        if self.transport is not None:
            self.transport.close()

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None


def loopback_datagram_size(sock: socket.socket) -> int:
    """The largest UDP payload the kernel carries to a loopback peer of the connected ``sock``
    (its path MTU less the IP and UDP headers), capped at `LOOPBACK_DATAGRAM`; 0 for any other
    peer, or where the kernel does not say (only Linux's ``IP_MTU`` / ``IPV6_MTU`` is read).

    QUIC sends 1,200-byte datagrams unless the path is known to take more (RFC 9000 §14); aioquic
    has no path MTU discovery. A loopback path's MTU is the interface's, which the kernel knows."""
    if sys.platform != "linux":
        return 0
    try:
        peer = ipaddress.ip_address(sock.getpeername()[0])
        if not peer.is_loopback:
            return 0
        if sock.family == socket.AF_INET6:
            mtu, headers = sock.getsockopt(socket.IPPROTO_IPV6, _IPV6_MTU), 48
        else:
            mtu, headers = sock.getsockopt(socket.IPPROTO_IP, _IP_MTU), 28
    except (OSError, ValueError):
        return 0
    return max(0, min(LOOPBACK_DATAGRAM, mtu - headers))


_IP_MTU = 14
_IPV6_MTU = 24
"""Linux's socket options for a connected socket's path MTU (absent from Python's socket)."""


def readable(phrase: str) -> str:
    """aioquic's TLS failure in words: its hostname mismatch lists the certificate's names as
    Python reprs (``DNSPattern(pattern=b'localhost')``), which say less than the names."""
    mismatch = _MISMATCH.fullmatch(phrase)
    if mismatch is None:
        return phrase
    names = list(dict.fromkeys(a or b for a, b in _NAME.findall(mismatch[2])))
    if not names:
        return f"the certificate is not for {mismatch[1]}"
    listed = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
    return f"the certificate is for {listed}, not {mismatch[1]}"


_MISMATCH = re.compile(r"hostname '(.*?)' doesn't match (?:either of )?(.*)")
_NAME = re.compile(r"(?<![A-Za-z_])pattern=(?:b'([^']*)'|IPv[46]Address\('([^']*)'\))")


def _settle(fut: asyncio.Future[Any], outcome: object) -> None:
    if not fut.done():
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)


def retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a failure as seen: a dial nobody waits for any more must not log it at exit."""
    if not fut.cancelled():
        fut.exception()
