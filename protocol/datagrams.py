"""The datagrams already queued behind one a QUIC endpoint was handed, read before it transmits.

asyncio's datagram transport reads one datagram a loop turn and aioquic transmits after each, so
an upload or a large response cost a pass over every stream, an acknowledgement and a loop turn
per datagram. Server and client both read what else the socket holds first (at most
`limits.READ_BATCH` in all) and transmit once. Sans-IO: the read is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from markproto.protocol.limits import DATAGRAM_MAX, READ_BATCH

__all__ = ["queued"]

Read = Callable[[int], tuple[bytes, Any]]
"""``socket.recvfrom`` of a non-blocking socket: a datagram and its sender."""


def queued(read: Read, error: Callable[[OSError], None]) -> Iterator[tuple[bytes, Any]]:
    """Up to ``READ_BATCH`` - 1 more datagrams, until none is queued. Any other failure of the
    read goes to ``error``, as the transport would have sent it (an ICMP error, say)."""
    for _ in range(READ_BATCH - 1):
        try:
            datagram = read(DATAGRAM_MAX)
        except BlockingIOError:
            return
        except OSError as exc:
            error(exc)
            return
        yield datagram
