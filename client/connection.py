"""The client's connection pool: one QUIC connection per authority, one stream per request.

It moves opaque request and response bytes (the codec is ``protocol.wire``'s job): it dials under
the trust policy, shares a dial among concurrent first requests, bounds each dial and request by
its timeout, evicts connections that fail and dials anew. Every error says whether any request
byte was handed to QUIC, because the layer above decides retries from that. A request is handed
over only once the peer has granted stream credit, so ``sent=False`` means the server cannot have
seen it.

The QUIC connection itself is ``quic.ClientProtocol``, imported on the first dial: constructing a
pool (and so a ``Client``) costs nothing of aioquic's import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from markproto.client.errors import (
    CertificateChanged,
    ConnectionLost,
    HandshakeFailed,
    InvalidURL,
    KnownHostsError,
    RequestTimeout,
    Unreachable,
)
from markproto.client.trust import Plan, Trust, Verification
from markproto.protocol import errors as protocol_errors
from markproto.protocol.limits import MAX_RESPONSE
from markproto.protocol.url import parse_authority

if TYPE_CHECKING:
    from markproto.client.quic import ClientProtocol, Exchange

DIAL_TIMEOUT = 10.0
REQUEST_TIMEOUT = 10.0
IDLE_TIMEOUT = 60.0


def split_authority(authority: str) -> tuple[str, int]:
    """``host[:port]`` -> ``(host, port)`` by the protocol's one authority rule; a bad one is the
    client's ``InvalidURL`` (a ``UsageError``)."""
    try:
        return parse_authority(authority)
    except protocol_errors.InvalidURL as exc:
        raise InvalidURL(str(exc)) from None


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
        response. Raises only ``TransportError`` subclasses (``UsageError`` for a bad authority)."""
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

    async def stream(
        self,
        authority: str,
        data: bytes,
        sink: Callable[[bytes], None],
        *,
        dial_timeout: float | None = None,
    ) -> Streamed:
        """Send one whole request whose response is long-lived (WATCH): its bytes go to ``sink``
        as they arrive, with no request timeout and no size cap (the caller bounds both).
        Returns once the stream is open; ``Streamed.ended`` says when and how it ended."""
        authority = authority.lower()
        dial_t = self.dial_timeout if dial_timeout is None else dial_timeout
        conn = await self._connection(authority, dial_t)
        ex = conn.submit(data, 0, sink)
        try:
            async with asyncio.timeout(None if ex.opened.done() else dial_t):
                await ex.opened
        except TimeoutError:
            conn.release(ex)
            self._evict(conn)
            message = f"{authority}: unreachable (no stream granted within {dial_t:g} s)"
            raise Unreachable(message) from None
        except BaseException:
            conn.release(ex)
            raise
        return Streamed(conn, ex)

    @property
    def closed(self) -> bool:
        """`close` was called: no request will be sent any more."""
        return self._closed

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
        if not task.cancelled():
            task.exception()  # seen: a dial nobody waits for any more must not log at exit

    async def _dial(self, authority: str, timeout: float) -> ClientProtocol:
        """Dial under the trust plan; a first contact whose certificate failed verification may be
        pinned (outside the timeout: it may prompt) and is then dialed again under the pin."""
        with _known_hosts(authority):
            plan = self.trust.plan(authority)
        try:
            conn = await self._handshake(authority, plan, timeout)
        except HandshakeFailed as exc:
            if exc.fingerprint is None or plan.verification is not Verification.SYSTEM:
                raise
            with _known_hosts(authority):
                self.trust.first_contact(authority, exc.fingerprint, exc.reason)
                plan = self.trust.plan(authority)
            conn = await self._handshake(authority, plan, timeout)
        self._conns[authority] = conn
        conn.on_dead = self._forget
        if self.keepalive:
            conn.keepalive(self.keepalive)
        return conn

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
        from markproto.client import quic  # aioquic: imported by the first dial only

        try:
            sock = socket.socket(family, socket.SOCK_DGRAM)
        except OSError as exc:
            raise Unreachable(f"{authority}: unreachable ({exc.strerror or exc})") from None
        try:
            sock.setblocking(False)
            sock.connect(addr)
            peer = sock.getpeername()
            conn = await quic.open_connection(sock, authority, server_name, plan, self.idle_timeout)
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
        except CertificateChanged:
            conn.shutdown("certificate changed")
            raise
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


class Streamed:
    """A long-lived response arriving on its stream. ``ended`` resolves when the server ends the
    stream, or raises the ``TransportError`` that cut it; ``close`` abandons it (the server is
    asked to stop sending)."""

    def __init__(self, conn: ClientProtocol, exchange: Exchange) -> None:
        self._conn = conn
        self._exchange = exchange

    @property
    def ended(self) -> asyncio.Future[bytes]:
        return self._exchange.done

    def close(self) -> None:
        self._conn.release(self._exchange)


@contextlib.contextmanager
def _known_hosts(authority: str) -> Iterator[None]:
    """Name the authority in a known_hosts failure: the file's own message names only the file."""
    try:
        yield
    except KnownHostsError as exc:
        raise KnownHostsError(f"{authority}: {exc}") from None
