"""`datagrams.queued`: what else a socket holds, at most a batch, and a failure reported once."""

from __future__ import annotations

from typing import Any

from markproto.protocol.datagrams import queued
from markproto.protocol.limits import DATAGRAM_MAX, READ_BATCH


class Socket:
    def __init__(self, *items: tuple[bytes, Any] | OSError) -> None:
        self.items = list(items)
        self.asked: list[int] = []

    def recvfrom(self, size: int) -> tuple[bytes, Any]:
        self.asked.append(size)
        if not self.items:
            raise BlockingIOError
        item = self.items.pop(0)
        if isinstance(item, OSError):
            raise item
        return item


def test_reads_until_nothing_is_queued() -> None:
    sock, errors = Socket((b"a", 1), (b"b", 2)), []
    assert list(queued(sock.recvfrom, errors.append)) == [(b"a", 1), (b"b", 2)]
    assert sock.asked == [DATAGRAM_MAX] * 3 and errors == []


def test_at_most_a_batch_with_the_one_handed_over() -> None:
    sock = Socket(*[(b"x", n) for n in range(2 * READ_BATCH)])
    assert len(list(queued(sock.recvfrom, lambda exc: None))) == READ_BATCH - 1


def test_another_failure_goes_to_error_and_ends_the_batch() -> None:
    refused = ConnectionRefusedError()
    sock, errors = Socket((b"a", 1), refused, (b"b", 2)), []
    assert list(queued(sock.recvfrom, errors.append)) == [(b"a", 1)]
    assert errors == [refused]
