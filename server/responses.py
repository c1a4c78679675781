"""A document's response (SPEC §5.1), and the dispatcher's cache of encoded current versions.

Building and encoding a small FETCH response is half of its dispatch cost (5 of 10 µs, measured
by tests/bench/bench_wire.py), and most requests are for documents asked for before. A current
version's response is fixed by two values, its etag (the exact version file, so the publisher
keys, the version number and the body) and its ``modified`` time, so its bytes are kept by that
pair: documents up to `CACHED_BODY_MAX`, `CACHE_BYTES` of bytes in all, oldest dropped first.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from markproto.protocol import metadata, status, times, wire
from markproto.protocol.errors import InvalidMetadata
from markproto.server.storage.store import Version

CACHE_BYTES = 8 << 20
CACHED_BODY_MAX = 64 << 10
"""Read when a cache is made (a benchmark sets it to -1 to measure the server without reuse)."""


def document(version: Version, extra: Mapping[str, str] | None = None) -> wire.Response:
    """A document response: the publisher's keys first, then the server's, which always win.

    A foreign or old store can hold keys the rules now refuse (reserved, control, malformed):
    those are skipped, never served.
    """
    out = {k: v for k, v in version.meta.items() if _servable(k, v)}
    out["modified"] = times.format_time(version.modified)
    out["etag"] = version.etag
    out["version"] = str(version.number)
    out["content-hash"] = version.content_hash
    if extra:
        out.update(extra)
    return wire.Response(status.Status.OK, out, version.body)


def _servable(key: str, value: str) -> bool:
    if key in metadata.CONTROL_KEYS:
        return False
    try:
        metadata.validate({key: value})
    except InvalidMetadata:
        return False
    return True


class ResponseCache:
    """Encoded responses of current versions, by (etag, modified), bounded in bytes."""

    def __init__(self, max_bytes: int | None = None, max_body: int | None = None) -> None:
        self._max_bytes = CACHE_BYTES if max_bytes is None else max_bytes
        self._max_body = CACHED_BODY_MAX if max_body is None else max_body
        self._items: dict[tuple[str, datetime], bytes] = {}
        self._size = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size(self) -> int:
        """Bytes held."""
        return self._size

    def encoded(self, version: Version) -> bytes:
        """The bytes of ``document(version)``, encoded once while the version stays cached."""
        key = (version.etag, version.modified)
        data = self._items.get(key)
        if data is None:
            data = wire.emit_response(document(version))
            if len(version.body) <= self._max_body and len(data) <= self._max_bytes:
                self._items[key] = data
                self._size += len(data)
                while self._size > self._max_bytes:
                    self._size -= len(self._items.pop(next(iter(self._items))))
        return data
