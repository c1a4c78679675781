"""A minimal event-based aioquic client for transport tests and benchmarks.

It speaks no protocol: it opens streams, writes bytes (whole, in chunks, with or without FIN),
resets streams and collects each stream's response or reset. `connect` binds a socket of the
server's address family, so it also works where aioquic's ``connect()`` (always AF_INET6) would not.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import ssl
from collections.abc import Sequence
from pathlib import Path

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import (
    ConnectionTerminated,
    QuicEvent,
    StopSendingReceived,
    StreamDataReceived,
    StreamReset,
)
from cryptography.hazmat.primitives.serialization import Encoding

from markproto.protocol.limits import ALPN


class StreamResetError(Exception):
    """The server reset the stream instead of answering."""

    def __init__(self, stream_id: int, error_code: int) -> None:
        super().__init__(f"stream {stream_id} reset with code {error_code}")
        self.error_code = error_code


class QuicClient(QuicConnectionProtocol):
    """One client connection; every bidirectional stream it opens gets a response future."""

    def __init__(self, quic: QuicConnection, stream_handler: object = None) -> None:
        super().__init__(quic)
        self._buffers: dict[int, bytearray] = {}
        self._waiters: dict[int, asyncio.Future[bytes]] = {}
        self.stopped: set[int] = set()
        """Streams on which the server sent STOP_SENDING."""
        self.terminated: asyncio.Future[ConnectionTerminated] = self._loop.create_future()

    def open(self, *, unidirectional: bool = False) -> int:
        """Allocate a stream id; its response future exists from now on (bidirectional only)."""
        sid = self._quic.get_next_available_stream_id(is_unidirectional=unidirectional)
        self._quic.send_stream_data(sid, b"")  # creates the stream, so the next id moves on
        if not unidirectional:
            self._buffers[sid] = bytearray()
            self._waiters[sid] = self._loop.create_future()
        return sid

    def send(self, sid: int, data: bytes, *, fin: bool = True, chunk: int | None = None) -> None:
        """Write ``data``: in ``chunk``-sized writes each transmitted at once if given, else in one
        write transmitted with whatever else is written in this loop turn."""
        if chunk is None:
            self._quic.send_stream_data(sid, data, end_stream=fin)
            self._transmit_soon()
            return
        for start in range(0, max(len(data), 1), chunk):
            last = start + chunk >= len(data)
            self._quic.send_stream_data(sid, data[start : start + chunk], end_stream=fin and last)
            self.transmit()

    def reset(self, sid: int, error_code: int = 0) -> None:
        """Abort our side of a stream with RESET_STREAM."""
        self._quic.reset_stream(sid, error_code)
        self.transmit()

    def stop(self, sid: int, error_code: int = 0) -> None:
        """Tell the server we no longer want the answer (STOP_SENDING)."""
        self._quic.stop_stream(sid, error_code)
        self.transmit()

    async def response(self, sid: int, timeout: float = 10.0) -> bytes:
        """The stream's whole response; `StreamResetError` if the server reset it."""
        waiter = self._waiters[sid]
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        finally:
            if waiter.done():
                del self._waiters[sid]

    async def request(
        self, data: bytes, *, chunk: int | None = None, timeout: float = 10.0
    ) -> bytes:
        """One request on a new stream, FIN included; returns the response."""
        sid = self.open()
        self.send(sid, data, chunk=chunk)
        return await self.response(sid, timeout)

    async def many(self, requests: Sequence[bytes], timeout: float = 30.0) -> list[bytes]:
        """All requests at once, each on its own stream, flushed together."""
        sids = [self.open() for _ in requests]
        for sid, data in zip(sids, requests, strict=True):
            self._quic.send_stream_data(sid, data, end_stream=True)
        self.transmit()
        try:
            gathered = asyncio.gather(*(self._waiters[sid] for sid in sids))
            return list(await asyncio.wait_for(gathered, timeout))
        finally:
            for sid in sids:
                self._waiters.pop(sid, None)

    @property
    def local_port(self) -> int:
        """The UDP port this client sends from."""
        assert self._transport is not None
        port: int = self._transport.get_extra_info("sockname")[1]
        return port

    async def rebind(self) -> None:
        """Move to a fresh UDP socket (a new local port, as after a NAT rebinding)."""
        assert self._transport is not None
        old = self._transport
        family = old.get_extra_info("socket").family
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind(("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0))
        await self._loop.create_datagram_endpoint(lambda: self, sock=sock)
        old.close()
        self.change_connection_id()

    def peer_fingerprint(self) -> str:
        """``sha256:`` + hex of the server certificate's DER, as `devcert.fingerprint` spells it."""
        cert = self._quic.tls._peer_certificate
        assert cert is not None
        return "sha256:" + hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()

    def hang_up(self) -> None:
        """Send CONNECTION_CLOSE and drop the socket without waiting out the closing period."""
        self.close()
        if self._transport is not None:
            self._transport.close()
        if self._timer is not None:
            self._timer.cancel()

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived):
            buf = self._buffers.get(event.stream_id)
            if buf is None:
                return
            buf += event.data
            if event.end_stream:
                del self._buffers[event.stream_id]
                self._settle(event.stream_id, bytes(buf))
        elif isinstance(event, StreamReset):
            self._buffers.pop(event.stream_id, None)
            self._settle(event.stream_id, StreamResetError(event.stream_id, event.error_code))
        elif isinstance(event, StopSendingReceived):
            self.stopped.add(event.stream_id)
        elif isinstance(event, ConnectionTerminated):
            for sid in list(self._waiters):
                self._settle(sid, ConnectionError(event.reason_phrase))
            if not self.terminated.done():
                self.terminated.set_result(event)

    def _settle(self, sid: int, outcome: bytes | BaseException) -> None:
        waiter = self._waiters.get(sid)
        if waiter is None or waiter.done():
            return
        if isinstance(outcome, BaseException):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)


async def connect(
    host: str,
    port: int,
    *,
    cafile: Path | None = None,
    idle_timeout: float = 60.0,
    timeout: float = 10.0,
    source: str | None = None,
) -> QuicClient:
    """Handshake with ``host:port``; without ``cafile`` the certificate is not verified. ``source``
    binds the client's address (any 127.x.y.z is loopback on Linux), so a server's per-address
    limits tell it apart from other clients."""
    config = QuicConfiguration(
        is_client=True, alpn_protocols=[ALPN], idle_timeout=idle_timeout, server_name="localhost"
    )
    if cafile is None:
        config.verify_mode = ssl.CERT_NONE
    else:
        config.load_verify_locations(cafile=str(cafile))
    loop = asyncio.get_running_loop()
    family, _, _, _, addr = (await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM))[0]
    sock = socket.socket(family, socket.SOCK_DGRAM)
    if source is None:
        source = "::" if family == socket.AF_INET6 else "0.0.0.0"
    sock.bind((source, 0))
    _, client = await loop.create_datagram_endpoint(
        lambda: QuicClient(QuicConnection(configuration=config)), sock=sock
    )
    client.connect(addr)
    try:
        await asyncio.wait_for(client.wait_connected(), timeout)
    except BaseException:
        client.hang_up()
        raise
    return client
