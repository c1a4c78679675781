"""The server's one door into aioquic's private parts, so an aioquic upgrade is checked here only.

aioquic's asyncio classes are meant to be subclassed, but several things this server needs have no
public name. Each is wrapped once below, with the private attribute it reads; every one of them is
exercised over real QUIC by tests/server/test_transport.py, so an upgrade that renames one fails
there, not in production.

- ``QuicConnection._local_max_streams_bidi``: the stream credit granted to the peer. Lowered
  before the handshake carries it, it makes a client wait instead of being refused; aioquic
  re-grants a stream (MAX_STREAMS) each time one finishes.
- ``QuicConnection._streams``: the stream table, to know that every answer was acknowledged
  before a drain closes the connection.
- ``QuicStreamSender._buffer``: a stream's bytes sent and not yet acknowledged, so a long-lived
  response (WATCH) to a slow reader waits instead of buffering without end.
- ``QuicConnectionProtocol._quic``, ``._loop``, ``._transmit_soon``: the connection, the loop and
  the batched transmit every subclass uses.
- ``QuicConnectionProtocol._timer``, ``._transmit_task``: cancelled on a close at once, so no
  callback of a closed connection runs.
- ``QuicServer._configuration``, ``._protocols``, ``._transport``: the configuration new
  connections get (a certificate reload replaces it), the table of connection ids (to drop
  packets of unknown connections while draining) and the socket.
- ``aioquic._buffer.Buffer``: to read a packet's header (which connection it is for).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aioquic._buffer import Buffer  # aioquic.buffer re-exports it, but not for type checkers
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import pull_quic_header


class Connection(QuicConnectionProtocol):
    """One connection, with a fixed stream credit."""

    def __init__(self, quic: QuicConnection, *, credit: int) -> None:
        super().__init__(quic)
        limit = quic._local_max_streams_bidi
        limit.value = limit.sent = credit

    @property
    def quic(self) -> QuicConnection:
        return self._quic

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

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


class Listener(QuicServer):
    """The listening socket and its connection table."""

    def __init__(
        self,
        configuration: QuicConfiguration,
        create_protocol: Callable[..., QuicConnectionProtocol],
    ) -> None:
        super().__init__(configuration=configuration, create_protocol=create_protocol)

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
