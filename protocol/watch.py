"""WATCH streams (SPEC §5.8), sans-IO: cursors, blocks and a reader that splits a stream into them.

A WATCH response is a run of frontmatter blocks without bodies: an acknowledgement, then events
and heartbeats, then one terminal block. Control blocks (acknowledgement, heartbeat, terminal)
carry ``status``; event blocks carry none. Each block is emitted like a response's frontmatter
(sorted keys, yaml.v3 quoting) and is at most `MAX_BLOCK` bytes with its fences, so a reader needs
only a fixed buffer. A refusal before the subscription is an ordinary response in the
acknowledgement's place: its body follows its block to the end of the stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from markproto.protocol import status as st
from markproto.protocol import wire, yamlfm
from markproto.protocol.errors import MalformedResponse, ProtocolError
from markproto.protocol.limits import MAX_PATH

MAX_BLOCK: Final = 8192
"""Bytes of one block, both fences included."""
HEARTBEAT: Final = 20.0
"""Seconds of silence after which a server sends a heartbeat."""
OP_PUBLISH: Final = "publish"
OP_APPEND: Final = "append"
OP_ARCHIVE: Final = "archive"
OPS: Final = frozenset({OP_PUBLISH, OP_APPEND, OP_ARCHIVE})
"""The event operations this version knows; a reader skips any other."""
MAX_EPOCH: Final = 64
MAX_SEQ: Final = (1 << 64) - 1
MAX_REFUSAL_BODY: Final = 64 * 1024
"""Bytes of a refusal's body a reader keeps (fixed messages are far shorter)."""

_FENCE = b"---\n"
_CLOSE = b"\n---\n"
_EPOCH = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SEQ = re.compile(r"0|[1-9][0-9]*")
_HASH = re.compile(r"sha256-[0-9a-f]{64}")
_PATH_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_OPTIONAL = ("user", "agent", "hash")
"""Event keys a block may drop to fit `MAX_BLOCK`, least useful first."""


class InvalidWatchCursor(ProtocolError, ValueError):
    """A cursor that is not ``<epoch>:<seq>``."""


class MalformedWatch(MalformedResponse):
    """A WATCH stream that breaks the block grammar."""


class BlockTooLarge(ProtocolError):
    """An event whose block cannot fit `MAX_BLOCK` bytes even without its optional keys."""


@dataclass(frozen=True, slots=True, order=True)
class Cursor:
    """A position in a server's change sequence. The epoch changes whenever the sequence
    restarts (a server restart), so order holds within one epoch only."""

    epoch: str
    seq: int

    def __post_init__(self) -> None:
        if not _EPOCH.fullmatch(self.epoch) or not 0 <= self.seq <= MAX_SEQ:
            raise InvalidWatchCursor(f"invalid cursor: {self.epoch!r}:{self.seq}")

    def __str__(self) -> str:
        return f"{self.epoch}:{self.seq}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The wire form ``<epoch>:<seq>``: 1-64 of ``[A-Za-z0-9._-]``, a colon, and a decimal
        uint64 without leading zeros (so the form round-trips byte for byte)."""
        epoch, colon, seq = text.partition(":")
        if not colon or not _EPOCH.fullmatch(epoch) or not _SEQ.fullmatch(seq):
            raise InvalidWatchCursor(f"invalid cursor: {text!r}")
        number = int(seq)
        if number > MAX_SEQ:
            raise InvalidWatchCursor(f"invalid cursor: {text!r}")
        return cls(epoch, number)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change hint: what changed, and the cursor to resume after it. No content: fetch the
    path (or the hash) for that."""

    cursor: Cursor
    path: str
    version: int
    op: str
    hash: str | None = None
    agent: str | None = None
    user: str | None = None

    @property
    def known(self) -> bool:
        """An operation this version knows (a reader skips the others)."""
        return self.op in OPS


@dataclass(frozen=True, slots=True)
class Control:
    """An acknowledgement, heartbeat or terminal block (``cursor`` where the server knows it),
    or, as the first block, the frontmatter of a refusal."""

    status: str
    cursor: Cursor | None = None
    meta: dict[str, str] | None = None
    """The other keys, for a refusal (``your-version``-like keys a future status may carry)."""


Block = WatchEvent | Control


def emit_control(status: str, cursor: Cursor | None = None) -> bytes:
    """A control block: ``status`` and, when known, ``cursor``."""
    meta = {"status": status}
    if cursor is not None:
        meta["cursor"] = str(cursor)
    return _block(meta)


def emit_event(event: WatchEvent) -> bytes:
    """An event block of at most `MAX_BLOCK` bytes: optional keys are dropped (``user``, then
    ``agent``, then ``hash``) until it fits; `BlockTooLarge` when even the bare event does not."""
    meta = {
        "cursor": str(event.cursor),
        "path": event.path,
        "version": str(event.version),
        "op": event.op,
    }
    for key in reversed(_OPTIONAL):
        value = getattr(event, key)
        if value:
            meta[key] = value
    data = _block(meta)
    for key in _OPTIONAL:
        if len(data) <= MAX_BLOCK:
            return data
        if meta.pop(key, None) is not None:
            data = _block(meta)
    if len(data) > MAX_BLOCK:
        raise BlockTooLarge(f"the event for {event.path!r} needs {len(data)} bytes")
    return data


def _block(meta: dict[str, str]) -> bytes:
    return _FENCE + yamlfm.emit(meta).encode() + _FENCE


def parse_block(data: bytes) -> Block:
    """One whole block, fences included."""
    if len(data) > MAX_BLOCK:
        raise MalformedWatch(f"a WATCH block of {len(data)} bytes exceeds {MAX_BLOCK}")
    if not data.startswith(_FENCE) or not data.endswith(_CLOSE):
        raise MalformedWatch("a WATCH block must be fenced by --- lines")
    try:
        meta = yamlfm.load(data[len(_FENCE) : -len(_FENCE)])
    except ProtocolError as exc:
        raise MalformedWatch(f"unreadable WATCH block: {exc}") from exc
    status = meta.pop("status", None)
    cursor = _cursor(meta.get("cursor"))
    if status is not None:
        if not status:
            raise MalformedWatch("a WATCH control block has an empty status")
        meta.pop("cursor", None)
        return Control(status, cursor, meta or None)
    if cursor is None:
        raise MalformedWatch("a WATCH event has no cursor")
    path = meta.get("path", "")
    version = meta.get("version", "")
    op = meta.get("op", "")
    digest = meta.get("hash") or None
    if not path.startswith("/") or len(path.encode()) > MAX_PATH or _PATH_CONTROL.search(path):
        raise MalformedWatch(f"a WATCH event has an invalid path: {path!r}")
    if not _SEQ.fullmatch(version) or version == "0":
        raise MalformedWatch(f"a WATCH event has an invalid version: {version!r}")
    if not op:
        raise MalformedWatch("a WATCH event has no op")
    if digest is not None and not _HASH.fullmatch(digest):
        raise MalformedWatch(f"a WATCH event has an invalid hash: {digest!r}")
    agent = meta.get("agent") or None
    user = meta.get("user") or None
    return WatchEvent(cursor, path, int(version), op, digest, agent, user)


def _cursor(text: str | None) -> Cursor | None:
    if text is None:
        return None
    try:
        return Cursor.parse(text)
    except InvalidWatchCursor as exc:
        raise MalformedWatch(str(exc)) from None


class WatchReader:
    """One WATCH stream's bytes in, its blocks out, holding at most one partial block.

    The first block decides what the stream is: ``ok`` (the acknowledgement) or ``resync``
    starts a run of blocks; any other status is a refusal, an ordinary response whose body is
    the rest of the stream (`refusal` once the stream has ended).
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._first = True
        self._refused: Control | None = None
        self._body = bytearray()

    def feed(self, data: bytes) -> list[Block]:
        """The blocks ``data`` completes, in order."""
        if self._refused is not None:
            self._keep_body(data)
            return []
        self._buffer += data
        blocks: list[Block] = []
        while self._buffer:
            if not self._buffer.startswith(_FENCE[: len(self._buffer)]):
                raise MalformedWatch("a WATCH block must start with a --- line")
            end = self._buffer.find(_CLOSE, len(_FENCE) - 1)
            if end < 0:
                if len(self._buffer) > MAX_BLOCK:
                    raise MalformedWatch(f"a WATCH block exceeds {MAX_BLOCK} bytes")
                break
            size = end + len(_CLOSE)
            block = parse_block(bytes(self._buffer[:size]))
            del self._buffer[:size]
            first, self._first = self._first, False
            if first and isinstance(block, Control) and block.status not in _STARTS:
                self._refused = block
                rest, self._buffer = bytes(self._buffer), bytearray()
                self._keep_body(rest)
                break
            blocks.append(block)
        return blocks

    def end(self) -> wire.Response | None:
        """The stream ended: the refusal it carried, if it was one. A block cut short, or a stream
        with no block at all, is `MalformedWatch`."""
        if self._refused is not None:
            meta = dict(self._refused.meta or {})
            return wire.Response(self._refused.status, meta, bytes(self._body))
        if self._buffer or self._first:
            raise MalformedWatch("the WATCH stream ended inside a block")
        return None

    def _keep_body(self, data: bytes) -> None:
        room = MAX_REFUSAL_BODY - len(self._body)
        if room > 0:
            self._body += data[:room]


_STARTS = frozenset({st.Status.OK, st.Status.RESYNC})
"""Statuses a WATCH stream may open with; anything else is a refusal."""
