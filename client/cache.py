"""The on-disk conditional-request cache for tokenless FETCH and LIST (``environment.cache_dir``).

A cached ``ok`` response lets the next identical request ask "changed since?" and get a bodiless
``not-modified`` instead of the document. Only requests without a token are cached, so nothing
private is ever written here. The cache is an optimisation: every failure is a warning and a miss,
never an error, and an entry that does not read back byte for byte (a torn write, a bit flip, a
hash collision of keys) is a miss too.

One file per entry, named by the hash of its key::

    markcache 1 <sha256 hex of the response bytes>\\n
    <VERB> <authority> <path>\\n
    <the response in wire form>
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from markproto import durable
from markproto.client.environment import cache_dir
from markproto.protocol.errors import ProtocolError
from markproto.protocol.status import Status
from markproto.protocol.wire import Response, emit_response, parse_response

DEFAULT_MAX_BYTES = 64 << 20
_MAGIC = b"markcache 1 "
_SUFFIX = ".entry"

log = logging.getLogger(__name__)


def conditions(entry: Response) -> dict[str, str]:
    """The request metadata that revalidates ``entry``. The etag when there is one: it is exact,
    whereas ``modified`` has whole-second resolution, so a second version written in the same
    second would pass ``if-modified-since`` and leave a stale entry in use."""
    etag = entry.meta.get("etag")
    if etag:
        return {"if-none-match": etag}
    modified = entry.meta.get("modified")
    return {"if-modified-since": modified} if modified else {}


class Cache:
    """Entries under ``directory``, at most ``max_bytes`` in all (least recently used go first)."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = (directory or cache_dir()).expanduser()
        self.max_bytes = max_bytes
        self._warn = warn or log.warning

    def get(self, verb: str, authority: str, path: str) -> Response | None:
        """The cached response for this request, or None."""
        file = self._file(verb, authority, path)
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._warn(f"cache: cannot read {file}: {exc.strerror or exc}")
            return None
        head, _, rest = data.partition(b"\n")
        key, _, wire = rest.partition(b"\n")
        digest = head.removeprefix(_MAGIC).decode("ascii", "replace")
        if (
            not head.startswith(_MAGIC)
            or key != _key(verb, authority, path)
            or hashlib.sha256(wire).hexdigest() != digest
        ):
            return None
        try:
            response = parse_response(wire)
        except ProtocolError:
            return None
        with contextlib.suppress(OSError):
            os.utime(file)  # recently used: trimmed last
        return response

    def put(self, verb: str, authority: str, path: str, response: Response) -> None:
        """Keep an ``ok`` response that can be revalidated; others are not worth a file."""
        if response.status != Status.OK or not conditions(response):
            return
        wire = emit_response(response)
        data = b"%s%s\n%s\n%s" % (
            _MAGIC,
            hashlib.sha256(wire).hexdigest().encode(),
            _key(verb, authority, path),
            wire,
        )
        if len(data) > self.max_bytes // 8:
            return
        file = self._file(verb, authority, path)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            durable.replace(str(file), data, sync=False)  # a lost entry is only a miss
            self._trim()
        except OSError as exc:
            self._warn(f"cache: cannot write {file}: {exc.strerror or exc}")

    def _trim(self) -> None:
        """Drop the least recently used entries until the total fits ``max_bytes``."""
        entries = []
        for file in self.directory.glob(f"*{_SUFFIX}"):
            try:
                st = file.stat()
            except FileNotFoundError:
                continue
            entries.append((st.st_mtime, st.st_size, file))
        total = sum(size for _, size, _ in entries)
        for _, size, file in sorted(entries):
            if total <= self.max_bytes:
                break
            file.unlink(missing_ok=True)
            total -= size

    def _file(self, verb: str, authority: str, path: str) -> Path:
        name = hashlib.sha256(_key(verb, authority, path)).hexdigest()
        return self.directory / f"{name}{_SUFFIX}"


def _key(verb: str, authority: str, path: str) -> bytes:
    return f"{verb} {authority.lower()} {path}".encode("utf-8", "surrogateescape")
