"""The change log WATCH serves from (SPEC §5.8): a bounded ring of this server's recent changes.

Every change gets the next sequence number of this server's epoch, a random name drawn at start,
so a cursor from before a restart can never be mistaken for a position in this sequence: it gets
``resync``, never a silent gap. The ring keeps the last ``size`` changes, each with its event
block encoded once for every subscriber (when the first needs it); a subscriber whose position
the ring has overwritten gets ``resync`` too. Nothing here does I/O.
"""

from __future__ import annotations

import logging
import secrets

from markproto.protocol.watch import BlockTooLarge, Cursor, WatchEvent, emit_event
from markproto.server.storage.content import Change

log = logging.getLogger("markproto.server.watch")

DEFAULT_SIZE = 4096


class Entry:
    """One logged change: its position, its path and its event block (None when the event
    cannot fit a block, so whoever should see it gets ``resync`` instead).

    The block is encoded when it is first needed, once for every subscriber: a server nobody
    watches (an import's burst of writes) never spends the encoding on a change."""

    __slots__ = ("_block", "_event", "path", "seq")

    def __init__(self, seq: int, path: str, event: WatchEvent) -> None:
        self.seq = seq
        self.path = path
        self._event: WatchEvent | None = event
        self._block: bytes | None = None

    @property
    def block(self) -> bytes | None:
        event = self._event
        if event is not None:
            self._event = None
            try:
                self._block = emit_event(event)
            except BlockTooLarge as exc:
                log.warning("watch: %s; its subscribers get resync", exc)
        return self._block


def new_epoch() -> str:
    """A random epoch in the cursor grammar: 12 hex digits."""
    return secrets.token_hex(6)


class ChangeLog:
    """The last ``size`` changes of one epoch."""

    def __init__(self, size: int = DEFAULT_SIZE, epoch: str | None = None) -> None:
        if size < 1:
            raise ValueError("a change log holds at least one change")
        self.epoch = epoch or new_epoch()
        self.head = 0
        """The sequence number of the newest change; 0 before the first."""
        self._ring: list[Entry | None] = [None] * size

    @property
    def oldest(self) -> int:
        """The sequence number of the oldest change still held (head + 1 when none is)."""
        return max(1, self.head - len(self._ring) + 1) if self.head else 1

    def cursor(self, seq: int) -> Cursor:
        return Cursor(self.epoch, seq)

    def append(self, change: Change) -> Entry:
        seq = self.head + 1
        event = WatchEvent(
            self.cursor(seq),
            change.path,
            change.version,
            change.op,
            change.content_hash or None,
            change.agent or None,
        )
        entry = Entry(seq, change.path, event)
        self._ring[seq % len(self._ring)] = entry
        self.head = seq
        return entry

    def get(self, seq: int) -> Entry | None:
        """The change at ``seq``, or None when it is not held (overwritten, or not yet made)."""
        if not self.oldest <= seq <= self.head:
            return None
        return self._ring[seq % len(self._ring)]

    def resumable(self, cursor: Cursor) -> bool:
        """Whether every change after ``cursor`` is still held: same epoch, not ahead of the
        head, not lapped."""
        return cursor.epoch == self.epoch and self.oldest - 1 <= cursor.seq <= self.head
