"""The server's one door into aioquic's private parts, so an aioquic upgrade is checked here only.

aioquic's asyncio classes are meant to be subclassed, but several things this server needs have no
public name. Each is wrapped once below, with the private attribute it reads; every one of them is
exercised over real QUIC by tests/server/test_transport.py, so an upgrade that renames one fails
there, not in production.

- ``QuicConnection._local_max_streams_bidi``: the stream credit granted to the peer. Lowered
  before the handshake carries it, it makes a client wait instead of being refused; aioquic
  re-grants a stream (MAX_STREAMS) each time one finishes, by adding one to its ``value``. It is
  replaced by a `Credit`, which can hold such re-grants back and give them later.
- ``QuicConnection._local_max_data``: the connection's receive window (MAX_DATA), which aioquic
  doubles whenever half of it is used. It is replaced by a `Window`, which keeps it a fixed
  distance ahead of what the peer sent and whose growth asks `Connection.widen` first.
- ``QuicConnectionProtocol._process_events``: ``datagram_received`` is aioquic's own, with one
  step between handling a datagram's events and transmitting (`received`), so answers made there
  leave in the same packets as the acknowledgements.
- ``QuicConnection._streams``: the stream table, to know that every answer was acknowledged
  before a drain closes the connection.
- ``QuicStreamSender._buffer``: a stream's bytes sent and not yet acknowledged, so a long-lived
  response (WATCH) to a slow reader waits instead of buffering without end.
- ``QuicConnectionProtocol._quic``, ``._loop``, ``._transmit_soon``: the connection, the loop and
  the batched transmit every subclass uses.
- ``QuicConnectionProtocol._timer``, ``._transmit_task``: cancelled on a close at once, so no
  callback of a closed connection runs; a pending ``_transmit_task`` is also cancelled by a
  `transmit` that makes it pointless.
- ``QuicServer._configuration``, ``._protocols``, ``._transport``: the configuration new
  connections get (a certificate reload replaces it), the table of connection ids (to drop
  packets of unknown connections while draining, and to route a short-header packet without
  aioquic's header parse) and the socket.
- ``aioquic._buffer.Buffer``: to read a packet's header (which connection it is for).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any, cast

from aioquic._buffer import Buffer  # aioquic.buffer re-exports it, but not for type checkers
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import Limit, NetworkAddress, QuicConnection
from aioquic.quic.packet import pull_quic_header

from markproto.protocol.datagrams import queued

_FORM_AND_FIXED = 0xC0
"""The first byte's header-form bit (set: a long header) and fixed bit (RFC 9000 §17)."""
_FIXED_BIT = 0x40


class _Gated(Limit):
    """A limit aioquic grows by assigning ``value``; `_grow` says what it grows to instead."""

    def __init__(self, base: Limit) -> None:
        self._value = base.value
        super().__init__(base.frame_type, base.name, base.value)
        self.sent, self.used = base.sent, base.used

    @property
    def value(self) -> int:
        return self._value

    @value.setter
    def value(self, value: int) -> None:
        self._value = self._grow(value) if value > self._value else value

    def _grow(self, value: int) -> int:
        return value


class Credit(_Gated):
    """The peer's bidirectional stream credit, whose re-grants can be held back: each hold
    (``holds += 1``) keeps the next stream that finishes from being re-granted, until a `give`
    adds it back."""

    def __init__(self, base: Limit) -> None:
        self.holds = 0
        """Re-grants still to hold back."""
        self.held = 0
        """Re-grants held back, to give."""
        super().__init__(base)

    def _grow(self, value: int) -> int:
        while value > self._value and self.holds:
            value -= 1
            self.holds -= 1
            self.held += 1
        return value

    def give(self) -> None:
        """One stream of credit back: a hold not used yet is cancelled, else a held one sent."""
        if self.holds:
            self.holds -= 1
        elif self.held:
            self.held -= 1
            self._value += 1


class Window(_Gated):
    """The connection's receive window: never more than ``ahead`` bytes beyond what the peer
    sent, and grown only as ``widen`` grants (all, part or none of it). ``starved`` says the last
    growth was not granted in full (aioquic asks again each time it transmits).

    Once half the window is used aioquic asks at every transmit: granting each ask would put a
    MAX_DATA frame in a packet of its own for nearly every datagram of an upload. The window
    grows only when at most half of ``ahead`` is left instead, so one MAX_DATA goes out per
    ``ahead / 2`` bytes received."""

    def __init__(self, base: Limit, widen: Callable[[int], int], ahead: int) -> None:
        self._widen = widen
        self._ahead = ahead
        self.starved = False
        super().__init__(base)

    def _grow(self, value: int) -> int:
        if not self.starved and self._value - self.used > self._ahead // 2:
            return self._value
        wanted = min(value, max(self._value, self.used + self._ahead)) - self._value
        if wanted <= 0:
            return self._value
        granted = self._widen(wanted)
        self.starved = granted < wanted
        return self._value + granted


class Connection(QuicConnectionProtocol):
    """One connection, with a fixed stream credit whose re-grants can be held back and a receive
    window whose growth `widen` decides."""

    def __init__(self, quic: QuicConnection, *, credit: int, window: int, batch: Batch) -> None:
        super().__init__(quic)
        self._batch = batch
        limit = quic._local_max_streams_bidi
        limit.value = limit.sent = credit
        self._credit = quic._local_max_streams_bidi = Credit(limit)
        self._window = quic._local_max_data = Window(quic._local_max_data, self.widen, window)

    def widen(self, wanted: int) -> int:
        """How much of ``wanted`` more bytes the peer may send (all, by default)."""
        return wanted

    @property
    def starved(self) -> bool:
        """The peer waits for receive window: `transmit` asks `widen` again."""
        return self._window.starved

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        self._quic.receive_datagram(cast(bytes, data), addr, now=self._loop.time())
        self._process_events()
        if self._batch.reading:
            self._batch.touched[self] = None
        else:
            self.flush()

    def flush(self) -> None:
        """The datagrams read were handled: act on them, then transmit once for all of them."""
        self.received()
        self.transmit()

    def received(self) -> None:
        """Datagrams' events were handled; what is sent now leaves with their acknowledgements."""

    def hold_credit(self) -> None:
        """Do not re-grant the next stream that finishes."""
        self._credit.holds += 1

    def give_credit(self) -> None:
        """Re-grant one stream held back (or cancel a hold not used yet); transmit to send it."""
        self._credit.give()

    @property
    def quic(self) -> QuicConnection:
        return self._quic

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def transmit(self) -> None:
        """Transmit now; a `transmit_soon` still pending is cancelled (aioquic would run it
        anyway, building packets again for nothing)."""
        if self._transmit_task is not None:
            self._transmit_task.cancel()
        super().transmit()

    def transmit_soon(self) -> None:
        """Transmit once at the end of this loop turn, however many answers it produces."""
        self._transmit_soon()

    @property
    def acknowledged(self) -> bool:
        """Every stream's sending side is finished: each answer sent was acknowledged."""
        return all(stream.sender.is_finished for stream in self._quic._streams.values())

    def backlog(self, stream_id: int) -> int:
        """Bytes queued on a stream and not yet acknowledged by the peer (0 for a stream gone)."""
        stream = self._quic._streams.get(stream_id)
        return 0 if stream is None else len(stream.sender._buffer)

    @property
    def unacknowledged(self) -> int:
        """Streams aioquic still holds (an answer not yet acknowledged, or a stream still open)."""
        return len(self._quic._streams)

    def shut(self) -> None:
        """Close at once: CONNECTION_CLOSE goes out now and no timer of this connection fires."""
        self.close()
        for handle in (self._timer, self._transmit_task):
            if handle is not None:
                handle.cancel()


class Batch:
    """The connections that datagrams read in one go were for, each to transmit once after."""

    def __init__(self) -> None:
        self.reading = False
        self.touched: dict[Connection, None] = {}

    def take(self) -> list[Connection]:
        touched = list(self.touched)
        self.touched.clear()
        return touched


class Listener(QuicServer):
    """The listening socket and its connection table."""

    def __init__(
        self,
        configuration: QuicConfiguration,
        create_protocol: Callable[..., QuicConnectionProtocol],
        sock: socket.socket,
    ) -> None:
        super().__init__(configuration=configuration, create_protocol=create_protocol)
        self._socket = sock
        self.batch = Batch()

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        """This datagram and up to `READ_BATCH` - 1 more already queued on the socket, handled
        before any connection transmits (once each)."""
        self.batch.reading = True
        try:
            self.arrived(data, addr)
            for data, addr in queued(self._socket.recvfrom, self.error_received):
                self.arrived(data, addr)
        finally:
            self.batch.reading = False
        for conn in self.batch.take():
            conn.flush()

    def arrived(self, data: bytes | str, addr: NetworkAddress) -> None:
        """One datagram: to its connection (or a new one), which transmits after the batch.

        A short-header packet (nearly every one of an upload) names its connection in the fixed
        ``connection_id_length`` bytes after the first: it goes straight to that connection, as
        aioquic's routing would send it, without aioquic reading its header a first time only
        to route it (the connection reads it again). Any other packet, and one for no known
        connection (which aioquic drops as well), takes aioquic's way."""
        data = cast(bytes, data)
        if data and data[0] & _FORM_AND_FIXED == _FIXED_BIT:
            length = self._configuration.connection_id_length
            protocol = self._protocols.get(data[1 : 1 + length])
            if protocol is not None:
                protocol.datagram_received(data, addr)
                return
        super().datagram_received(data, addr)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def configuration(self) -> QuicConfiguration:
        """What new connections get; existing ones keep their own."""
        return self._configuration

    @configuration.setter
    def configuration(self, configuration: QuicConfiguration) -> None:
        self._configuration = configuration

    def sockname(self) -> Any:
        assert self._transport is not None
        return self._transport.get_extra_info("sockname")

    @property
    def closed(self) -> bool:
        """The socket is closed (or closing)."""
        return self._transport is None or self._transport.is_closing()

    def knows(self, data: bytes) -> bool:
        """The datagram belongs to a connection already established."""
        try:
            header = pull_quic_header(
                Buffer(data=data), host_cid_length=self._configuration.connection_id_length
            )
        except ValueError:
            return False
        return header.destination_cid in self._protocols

    def close_socket(self) -> None:
        """Forget every connection id and close the socket (the connections are closed first)."""
        self._protocols.clear()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
