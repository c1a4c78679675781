"""The stored version file (SPEC "Store format"): emit, strict parse, etag, content-hash, chain.

Every byte here is fixed by the reference: the etag of a version is the sha256 of the whole file,
so a single stray space would change every etag and break every chain that follows.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markproto.protocol import digests, metadata
from markproto.protocol.errors import StoreFormatError
from markproto.protocol.limits import STORED_FILE_MAX, STORED_FRONTMATTER_MAX

_OPEN = b"---\n"
_CLOSE = b"\n---\n"
_VERSION_RE = re.compile(r"version: ([1-9][0-9]*)\Z")
_META_PREFIX = "meta."


@dataclass(frozen=True, slots=True)
class VersionFile:
    """One parsed version file. ``meta`` holds bare keys with tags in their ``a,b`` form."""

    version: int
    archived: bool
    previous_hash: str | None
    meta: dict[str, str]
    body: bytes


def etag(data: bytes) -> str:
    """The etag of a stored version: lowercase hex sha256 of the whole file, no prefix."""
    return hashlib.sha256(data).hexdigest()


def hash_ref(data: bytes) -> str:
    """What the next version records as ``previous-hash``: ``sha256-`` + the etag."""
    return digests.hash_ref(data)


def content_hash(body: bytes) -> str:
    """The content-hash of a document: ``sha256-`` + hex sha256 of the body only."""
    return digests.hash_ref(body)


def _publisher_lines(meta: Mapping[str, str]) -> list[str]:
    lines = []
    for key in sorted(meta):
        value = meta[key]
        if key == "tags":
            lines.append(f"tags: [{', '.join(metadata.split_tags(value))}]")
        elif key in metadata.OKF_KEYS:
            lines.append(f"{key}: {value}")
        else:
            lines.append(f"{_META_PREFIX}{key}: {value}")
    return lines


def emit_version(
    version: int, previous_hash: str | None, meta: Mapping[str, str], body: bytes
) -> bytes:
    """Serialize version ``version``. New versions always say ``archived: false``: the archive flag
    lives outside version files so archiving never changes an etag or a chain."""
    if version < 1:
        raise ValueError("versions start at 1")
    if (previous_hash is None) != (version == 1):
        raise ValueError("previous-hash is present exactly when version > 1")
    lines = [f"version: {version}", "archived: false"]
    if previous_hash is not None:
        lines.append(f"previous-hash: {previous_hash}")
    lines += _publisher_lines(meta)
    return b"---\n" + "\n".join(lines).encode() + b"\n---\n" + body


def parse_version(data: bytes) -> VersionFile:
    """Parse a version file with the strict grammar; anything else raises StoreFormatError."""
    if len(data) > STORED_FILE_MAX:
        raise StoreFormatError("version file exceeds size limit")
    if not data.startswith(_OPEN):
        raise StoreFormatError("version file does not start with a frontmatter fence")
    close = data.find(_CLOSE, len(_OPEN))
    if close < 0:
        raise StoreFormatError("version file frontmatter is not closed")
    end = close + len(_CLOSE)
    if end > STORED_FRONTMATTER_MAX:
        raise StoreFormatError("version file frontmatter exceeds 2048 bytes")
    try:
        block = data[len(_OPEN) : close].decode()
    except UnicodeDecodeError as exc:
        raise StoreFormatError("version file frontmatter is not UTF-8") from exc
    lines = block.split("\n")
    matched = _VERSION_RE.match(lines[0])
    if matched is None:
        raise StoreFormatError("line 1 must be 'version: <N>'")
    version = int(matched.group(1))
    if len(lines) < 2 or lines[1] not in ("archived: true", "archived: false"):
        raise StoreFormatError("line 2 must be 'archived: true|false'")
    archived = lines[1] == "archived: true"
    rest = lines[2:]
    previous_hash = None
    if version > 1:
        if not rest or not rest[0].startswith("previous-hash: "):
            raise StoreFormatError("line 3 must be 'previous-hash: sha256-<hex>' after version 1")
        previous_hash = rest[0][len("previous-hash: ") :]
        if not digests.is_hash_ref(previous_hash):
            raise StoreFormatError("previous-hash is not sha256-<64 lowercase hex>")
        rest = rest[1:]
    return VersionFile(version, archived, previous_hash, _parse_publisher(rest), data[end:])


def _parse_publisher(lines: Sequence[str]) -> dict[str, str]:
    meta: dict[str, str] = {}
    last = ""
    for line in lines:
        key, sep, value = line.partition(": ")
        if not sep:
            raise StoreFormatError(f"publisher line {line!r} is not 'key: value'")
        if key.startswith(_META_PREFIX):
            bare = key[len(_META_PREFIX) :]
            if bare in metadata.OKF_KEYS or bare in metadata.STORE_RESERVED_KEYS or not bare:
                raise StoreFormatError(f"{key!r} may not carry the meta. prefix")
        elif key in metadata.OKF_KEYS:
            bare = key
        else:
            raise StoreFormatError(f"unknown stored key {key!r}")
        if bare <= last:
            raise StoreFormatError("publisher keys are not in strictly increasing order")
        last = bare
        if bare == "tags":
            if not (value.startswith("[") and value.endswith("]")):
                raise StoreFormatError("tags must be stored as [a, b]")
            value = metadata.normalize_tags(value[1:-1])
        meta[bare] = value
    return meta


def chain_valid(files: Sequence[bytes]) -> bool:
    """True when each file's ``previous-hash`` names the file before it (files in ascending order).

    After retention pruning the oldest survivor points at a deleted file; that link is not checked.
    """
    for older, newer in itertools.pairwise(files):
        try:
            recorded = parse_version(newer).previous_hash
        except StoreFormatError:
            return False
        if recorded != hash_ref(older):
            return False
    return True
