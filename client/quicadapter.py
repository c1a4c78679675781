"""The aioquic internals the client relies on, in one place (aioquic 1.2 to 1.x, see pyproject).

aioquic's public API leaves out four things a pooled client needs. Each is read here, and only
here, so an aioquic upgrade that renames one breaks one small module (and its tests) rather than
the connection logic:

* the peer's certificate after a failed handshake, to offer pinning it;
* the close event, set as soon as the connection fails, where the public event comes only 3×PTO
  later;
* the peer's stream credit (MAX_STREAMS), so no request is handed to QUIC before it can go out;
* the protocol's timer and transmit handles, so nothing fires on a socket the client closed, and
  its coalescing transmit, so a burst of requests leaves in as few datagrams as possible.
"""

from __future__ import annotations

from aioquic._buffer import Buffer  # aioquic.buffer re-exports it, but not for type checkers
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE
from aioquic.quic.congestion.base import K_INITIAL_WINDOW
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated
from aioquic.quic.packet import pull_quic_transport_parameters
from aioquic.tls import ExtensionType
from cryptography.hazmat.primitives.serialization import Encoding

_DEFAULT_MAX_UDP_PAYLOAD = 65527
"""``max_udp_payload_size`` of a peer that sent none (RFC 9000 §18.2)."""


def peer_certificate(quic: QuicConnection) -> bytes | None:
    """The DER of the peer's certificate, also after a handshake that rejected it."""
    cert = quic.tls._peer_certificate
    return None if cert is None else cert.public_bytes(Encoding.DER)


def close_event(quic: QuicConnection) -> ConnectionTerminated | None:
    """Why the connection ended, as soon as it did (None while it is up)."""
    return quic._close_event


def next_stream(quic: QuicConnection) -> int | None:
    """The next bidirectional stream id if the peer's MAX_STREAMS allows opening it, else None."""
    sid = quic.get_next_available_stream_id()
    return sid if sid // 4 < quic._remote_max_streams_bidi else None


def transmit_soon(protocol: QuicConnectionProtocol) -> None:
    """Send pending data on the next loop turn, once for everything queued until then."""
    protocol._transmit_soon()


def cancel_timers(protocol: QuicConnectionProtocol) -> None:
    """Cancel the loss/idle timer and any pending transmit of a connection the client dropped."""
    for handle in (protocol._timer, protocol._transmit_task):
        if handle is not None:
            handle.cancel()
    protocol._timer = protocol._transmit_task = None


def peer_max_udp_payload(quic: QuicConnection) -> int:
    """The largest UDP payload the peer said it takes (its ``max_udp_payload_size`` transport
    parameter, RFC 9000 §18.2: 65527 when it sent none); aioquic reads it only to check it."""
    for ext_type, data in quic.tls.received_extensions or ():
        if ext_type == ExtensionType.QUIC_TRANSPORT_PARAMETERS:
            params = pull_quic_transport_parameters(Buffer(data=data))
            return params.max_udp_payload_size or _DEFAULT_MAX_UDP_PAYLOAD
    return SMALLEST_MAX_DATAGRAM_SIZE


def raise_datagram_size(quic: QuicConnection, size: int) -> None:
    """Send datagrams of up to ``size`` bytes from now on. aioquic fixes the size when the
    connection is made; the packet builder, the pacer and the congestion controller each keep a
    copy, and the congestion window starts from its initial ten datagrams at the new size."""
    if size <= quic._max_datagram_size:
        return
    quic._max_datagram_size = size
    loss = quic._loss
    loss._pacer._max_datagram_size = size
    cc = loss._cc
    if hasattr(cc, "_max_datagram_size"):
        cc._max_datagram_size = size
    if hasattr(cc, "additive_increase_factor"):
        cc.additive_increase_factor = size
    cc.congestion_window = max(cc.congestion_window, K_INITIAL_WINDOW * size)
