"""The client's QUIC layer: one pooled connection per authority, one stream per request.

It moves opaque request and response bytes (the codec is ``protocol.wire``'s job) and turns
aioquic's failures, most of which it reports opaquely, into one-line errors. Every error says
whether any request byte was handed to QUIC, because the layer above decides retries from that. A
request is handed over only once the peer has granted stream credit, so ``sent=False`` means the
server cannot have seen it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

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
from cryptography.hazmat.primitives.serialization import Encoding

from markproto.client.trust import (
    KnownHostsError,
    PinMismatch,
    Plan,
    Trust,
    TrustError,
    Verification,
    fingerprint,
)
from markproto.protocol.limits import ALPN, MAX_RESPONSE

DIAL_TIMEOUT = 10.0
REQUEST_TIMEOUT = 10.0
IDLE_TIMEOUT = 60.0
_GIVE_UP = 0
"""Application error code on streams the client abandons (timeout, oversize response)."""
_CRYPTO = QuicErrorCode.CRYPTO_ERROR
_ALPN_REFUSED = _CRYPTO + AlertDescription.no_application_protocol
_BAD_CERTIFICATE = _CRYPTO + AlertDescription.bad_certificate

# aioquic logs each failed handshake as a warning on "quic"; with no handler configured Python's
# last-resort handler would print it to stderr, beside the error this module raises for it.
# Records still propagate to whatever handlers the application installs.
logging.getLogger("quic").addHandler(logging.NullHandler())


class TransportError(Exception):
    """Base of every client transport failure. ``sent`` is whether any request byte was handed to
    QUIC: when false any request may be retried; when true a write's outcome is unknown."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class Unreachable(TransportError):
    """No usable connection: name not resolved, refused, no answer or no stream within the dial
    timeout."""


class HandshakeFailed(TransportError):
    """TLS refused the peer. ``reason`` is aioquic's; ``fingerprint`` is set when the certificate
    failed verification, the one case pinning it could resolve."""

    def __init__(
        self, message: str, *, reason: str = "", fingerprint: str | None = None, sent: bool = False
    ) -> None:
        super().__init__(message, sent=sent)
        self.reason = reason
        self.fingerprint = fingerprint


class ALPNMismatch(TransportError):
    """The peer speaks QUIC but not the Mark Protocol."""


class CertificateChanged(TransportError):
    """A pinned authority presented another certificate; the message is the loud multi-line one."""


class RequestTimeout(TransportError):
    """The request was sent but no complete response came within the request timeout."""


class ResponseTooLarge(TransportError):
    """The response passed ``max_response``; the stream was stopped."""


class StreamReset(TransportError):
    """The server reset the request's stream."""


class ConnectionLost(TransportError):
    """The connection ended (closed by the peer, idle timeout, refused, pool closed) mid-request."""


def split_authority(authority: str) -> tuple[str, int]:
    """``host:port`` (IPv6 in brackets) -> ``(host, port)`` with the brackets removed."""
    host, sep, port = authority.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{authority!r} is not host:port")
    return host, int(port)


@dataclass(slots=True, eq=False)
class _Exchange:
    """One request: queued until stream credit allows it, then in flight on stream ``sid``."""

    data: bytes
    limit: int
    opened: asyncio.Future[None]
    done: asyncio.Future[bytes]
    sid: int = -1
    buffer: bytearray = field(default_factory=bytearray)


class ClientProtocol(QuicConnectionProtocol):
    """One client connection, event-based (aioquic's stream API leaks and hangs on resets).

    Requests wait in a queue until the peer's MAX_STREAMS allows their stream, so none is handed to
    QUIC before it can go on the wire. Failures are taken from ``ConnectionTerminated`` and from
    the connection's close event as soon as it is set, not 3×PTO later when aioquic emits it.
    """

    def __init__(self, quic: QuicConnection, authority: str) -> None:
        super().__init__(quic)
        self.authority = authority
        self.handshake: asyncio.Future[None] = self._loop.create_future()
        self.handshake.add_done_callback(_retrieve)
        self.lost: asyncio.Future[None] = self._loop.create_future()
        self.on_dead: Callable[[ClientProtocol], None] = lambda conn: None
        self.retired = False
        self._queue: deque[_Exchange] = deque()
        self._streams: dict[int, _Exchange] = {}
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
        cert = self._quic.tls._peer_certificate
        return None if cert is None else cert.public_bytes(Encoding.DER)

    def submit(self, data: bytes, limit: int) -> _Exchange:
        ex = _Exchange(data, limit, self._loop.create_future(), self._loop.create_future())
        if self._dead is not None:
            ex.opened.set_exception(self._lost(sent=False))
        else:
            self._queue.append(ex)
            self._pump()
        return ex

    def release(self, ex: _Exchange) -> None:
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
            self._quic.close(reason_phrase=reason)
            self.transmit()
            self._die(reason)

    def keepalive(self, period: float) -> None:
        """PING every ``period`` seconds so the idle timeout never fires while pooled."""

        def ping() -> None:
            if self.alive:
                self._quic.send_ping(0)
                self.transmit()
                self._keepalive = self._loop.call_later(period, ping)

        self._keepalive = self._loop.call_later(period, ping)

    # aioquic hooks

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived):
            ex = self._streams.get(event.stream_id)
            if ex is None:
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
                _settle(self.handshake, None)
            else:
                _settle(self.handshake, self._alpn_mismatch())
                self.shutdown("no common ALPN protocol")
        elif isinstance(event, ConnectionTerminated):
            self._terminated(event)

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        super().datagram_received(data, addr)
        close = self._quic._close_event
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
        self._cancel_timers()
        _settle(self.lost, None)

    # private

    def _pump(self) -> None:
        """Open streams for queued requests while the peer's stream credit allows."""
        quic = self._quic
        sent = False
        while self._queue:
            ex = self._queue[0]
            if ex.opened.done():
                self._queue.popleft()
                continue
            sid = quic.get_next_available_stream_id()
            if sid // 4 >= quic._remote_max_streams_bidi:
                break
            self._queue.popleft()
            quic.send_stream_data(sid, ex.data, end_stream=True)
            ex.data, ex.sid = b"", sid
            self._streams[sid] = ex
            ex.opened.set_result(None)
            sent = True
        if sent:
            self._transmit_soon()

    def _abandon(self, sid: int) -> None:
        with contextlib.suppress(ValueError):
            self._quic.stop_stream(sid, _GIVE_UP)
            self._quic.reset_stream(sid, _GIVE_UP)
        self._transmit_soon()

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
            reason = phrase or f"TLS alert {code - _CRYPTO}"
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
        self._cancel_timers()
        self.on_dead(self)
        if self._transport is not None:
            self._transport.close()

    def _cancel_timers(self) -> None:
        """aioquic's loss/idle timer and pending transmit: nothing may fire on a closed socket."""
        for handle in (self._timer, self._transmit_task):
            if handle is not None:
                handle.cancel()
        self._timer = self._transmit_task = None

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None


def _settle(fut: asyncio.Future[Any], outcome: object) -> None:
    if not fut.done():
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a failure as seen: a dial nobody waits for any more must not log it at exit."""
    if not fut.cancelled():
        fut.exception()


class Pool:
    """One QUIC connection per authority, requests multiplexed on it as parallel streams.

    Concurrent first requests share one dial. A connection that dies, idles out, times out a request
    or grants no stream within the dial timeout is evicted (its other requests finish on it) and the
    next request dials anew, so a wedged pool never needs a restart. ``endpoints`` maps an
    authority to the ``host:port`` actually dialed (SNI and trust still use the authority).
    """

    def __init__(
        self,
        trust: Trust | None = None,
        *,
        dial_timeout: float = DIAL_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        max_response: int = MAX_RESPONSE,
        keepalive: float | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        family: int = socket.AF_UNSPEC,
        endpoints: Mapping[str, str] | None = None,
    ) -> None:
        self.trust = trust if trust is not None else Trust()
        self.dial_timeout = dial_timeout
        self.request_timeout = request_timeout
        self.max_response = max_response
        self.keepalive = keepalive
        self.idle_timeout = idle_timeout
        self.family = family
        self.endpoints = {k.lower(): v for k, v in (endpoints or {}).items()}
        for dial in self.endpoints.values():
            split_authority(dial)
        self._conns: dict[str, ClientProtocol] = {}
        self._dials: dict[str, asyncio.Task[ClientProtocol]] = {}
        self._all: set[ClientProtocol] = set()
        self._closed = False

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def request(
        self,
        authority: str,
        data: bytes,
        *,
        dial_timeout: float | None = None,
        request_timeout: float | None = None,
        max_response: int | None = None,
    ) -> bytes:
        """Send one whole request on a new stream of ``authority``'s connection; return the whole
        response. Raises only ``TransportError`` subclasses (``ValueError`` for a bad authority)."""
        authority = authority.lower()
        dial_t = self.dial_timeout if dial_timeout is None else dial_timeout
        request_t = self.request_timeout if request_timeout is None else request_timeout
        conn = await self._connection(authority, dial_t)
        ex = conn.submit(data, self.max_response if max_response is None else max_response)
        try:
            try:
                async with asyncio.timeout(None if ex.opened.done() else dial_t):
                    await ex.opened
            except TimeoutError:
                self._evict(conn)
                message = f"{authority}: unreachable (no stream granted within {dial_t:g} s)"
                raise Unreachable(message) from None
            try:
                async with asyncio.timeout(request_t):
                    return await ex.done
            except TimeoutError:
                self._evict(conn)
                message = f"{authority}: no response within {request_t:g} s"
                raise RequestTimeout(message, sent=True) from None
        finally:
            conn.release(ex)

    async def close(self) -> None:
        """Close every connection at once (CONNECTION_CLOSE, no 3×PTO wait); pending requests fail
        with ``ConnectionLost``. Returns when every socket is closed."""
        self._closed = True
        dials = list(self._dials.values())
        for task in dials:
            task.cancel()
        await asyncio.gather(*dials, return_exceptions=True)
        conns = list(self._all)
        for conn in conns:
            conn.shutdown("pool closed")
        await asyncio.gather(*(conn.lost for conn in conns))

    # private

    async def _connection(self, authority: str, timeout: float) -> ClientProtocol:
        if self._closed:
            raise ConnectionLost(f"{authority}: connection lost (pool closed)")
        conn = self._conns.get(authority)
        if conn is not None and conn.alive:
            return conn
        task = self._dials.get(authority)
        created = task is None
        if task is None:
            split_authority(authority)
            task = asyncio.get_running_loop().create_task(self._dial(authority, timeout))
            self._dials[authority] = task
            task.add_done_callback(lambda t: self._dialed(authority, t))
        try:
            # The dial bounds itself; a request joining it may have a shorter dial timeout.
            async with asyncio.timeout(None if created else timeout):
                return await asyncio.shield(task)
        except TimeoutError:
            raise Unreachable(
                f"{authority}: unreachable (no answer within {timeout:g} s)"
            ) from None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and current is not None and not current.cancelling():
                raise ConnectionLost(f"{authority}: connection lost (pool closed)") from None
            raise

    def _dialed(self, authority: str, task: asyncio.Task[ClientProtocol]) -> None:
        if self._dials.get(authority) is task:
            del self._dials[authority]
        _retrieve(task)

    async def _dial(self, authority: str, timeout: float) -> ClientProtocol:
        """Dial under the trust plan; a first contact whose certificate failed verification may be
        pinned (outside the timeout: it may prompt) and is then dialed again under the pin."""
        plan = self._plan(authority)
        try:
            conn = await self._handshake(authority, plan, timeout)
        except HandshakeFailed as exc:
            if exc.fingerprint is None or plan.verification is not Verification.SYSTEM:
                raise
            try:
                self.trust.first_contact(authority, exc.fingerprint, exc.reason)
            except TrustError as refusal:
                raise _trust_error(authority, refusal) from None
            conn = await self._handshake(authority, self._plan(authority), timeout)
        self._conns[authority] = conn
        conn.on_dead = self._forget
        if self.keepalive:
            conn.keepalive(self.keepalive)
        return conn

    def _plan(self, authority: str) -> Plan:
        try:
            return self.trust.plan(authority)
        except TrustError as exc:
            raise _trust_error(authority, exc) from None

    async def _handshake(self, authority: str, plan: Plan, timeout: float) -> ClientProtocol:
        """Resolve, then try each address in order; a fast failure (refused, no route) moves on."""
        host = split_authority(authority)[0]
        dial_host, dial_port = split_authority(self.endpoints.get(authority, authority))
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                try:
                    infos = await loop.getaddrinfo(
                        dial_host, dial_port, family=self.family, type=socket.SOCK_DGRAM
                    )
                except socket.gaierror as exc:
                    reason = f"cannot resolve {dial_host}: {exc.strerror}"
                    raise Unreachable(f"{authority}: unreachable ({reason})") from None
                failure = Unreachable(f"{authority}: unreachable (no address for {dial_host})")
                for family, addr in dict.fromkeys((info[0], info[4]) for info in infos):
                    try:
                        return await self._attempt(authority, host, family, addr, plan)
                    except Unreachable as exc:
                        failure = exc
                raise failure
        except TimeoutError:
            raise Unreachable(
                f"{authority}: unreachable (no answer within {timeout:g} s)"
            ) from None

    async def _attempt(
        self, authority: str, server_name: str, family: int, addr: Any, plan: Plan
    ) -> ClientProtocol:
        """One handshake over a connected UDP socket of the address's own family: connected, so an
        ICMP refusal surfaces at once; not dual-stack, so hosts without IPv6 work."""
        loop = asyncio.get_running_loop()
        try:
            sock = socket.socket(family, socket.SOCK_DGRAM)
        except OSError as exc:
            raise Unreachable(f"{authority}: unreachable ({exc.strerror or exc})") from None
        try:
            sock.setblocking(False)
            sock.connect(addr)
            peer = sock.getpeername()
            config = QuicConfiguration(
                is_client=True,
                alpn_protocols=[ALPN],
                server_name=server_name,
                idle_timeout=self.idle_timeout,
            )
            if plan.verification is Verification.SYSTEM:
                config.cafile, config.capath = plan.cafile, plan.capath
            else:
                config.verify_mode = ssl.CERT_NONE
            quic = QuicConnection(configuration=config)
            _, conn = await loop.create_datagram_endpoint(
                lambda: ClientProtocol(quic, authority), sock=sock
            )
        except OSError as exc:
            sock.close()
            raise Unreachable(f"{authority}: unreachable ({exc.strerror or exc})") from None
        except BaseException:
            sock.close()
            raise
        self._all.add(conn)
        conn.lost.add_done_callback(lambda _: self._all.discard(conn))
        try:
            conn.connect(peer)
            await conn.handshake
            self.trust.check(authority, plan, conn.peer_der or b"")
        except PinMismatch as exc:
            conn.shutdown("certificate changed")
            raise CertificateChanged(str(exc)) from None
        except BaseException:
            conn.shutdown("handshake failed")
            raise
        return conn

    def _evict(self, conn: ClientProtocol) -> None:
        self._forget(conn)
        conn.retire()

    def _forget(self, conn: ClientProtocol) -> None:
        if self._conns.get(conn.authority) is conn:
            del self._conns[conn.authority]


def _trust_error(authority: str, exc: TrustError) -> TransportError:
    if isinstance(exc, PinMismatch):
        return CertificateChanged(str(exc))
    if isinstance(exc, KnownHostsError):
        return HandshakeFailed(f"{authority}: {exc}")
    return HandshakeFailed(str(exc))
