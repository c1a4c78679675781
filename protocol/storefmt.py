"""The stored version file (SPEC "Store format"): emit, strict parse, etag, content-hash, chain.

Every byte here is fixed by the reference: the etag of a version is the sha256 of the whole file,
so a single stray space would change every etag and break every chain that follows.
"""

from __future__ import annotations

import hashlib
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


def etag(data: bytes, rest: bytes = b"") -> str:
    """The etag of a stored version: lowercase hex sha256 of the whole file (``data``, then
    ``rest`` when it is read in two parts), no prefix."""
    digest = hashlib.sha256(data)
    if rest:
        digest.update(rest)
    return digest.hexdigest()


def body_start(head: bytes) -> int:
    """Where the body of a version file that begins with ``head`` starts, as `read_version`
    reads it: after the store frontmatter, or at 0 when the file has none; -1 when ``head``
    ends before its frontmatter does."""
    if not head.startswith(_OPEN):
        return 0
    close = head.find(_CLOSE, len(_OPEN) - 1)
    return -1 if close < 0 else close + len(_CLOSE)


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
    """Parse a version file with the strict grammar; anything else raises StoreFormatError.

    Strict is what this store writes and what a hash chain must consist of (`chain_valid`);
    serving reads every file with `read_version` instead."""
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
            # An OKF key behind the prefix is how earlier reference releases wrote every key.
            bare = key[len(_META_PREFIX) :]
            if bare in metadata.STORE_RESERVED_KEYS or not bare:
                raise StoreFormatError(f"{key!r} may not carry the meta. prefix")
        elif key in metadata.OKF_KEYS:
            bare = key
        else:
            raise StoreFormatError(f"unknown stored key {key!r}")
        if bare <= last:
            raise StoreFormatError("publisher keys are not in strictly increasing order")
        last = bare
        if key == "tags" and not (value.startswith("[") and value.endswith("]")):
            raise StoreFormatError("tags must be stored as [a, b]")
        if bare == "tags":
            value = _read_tags(value)
        meta[bare] = value
    return meta


def _read_tags(value: str) -> str:
    """Tags as stored (``[a, b]``, or an older ``meta.tags: a, b``) in their ``a,b`` form."""
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
    return metadata.normalize_tags(value)


def read_version(data: bytes, number: int) -> tuple[VersionFile, list[str]]:
    """Read version file ``number`` as liberally as the reference does, for serving.

    Every shape an earlier reference release wrote is read (SPEC §7.2, "Liberal reading"): a
    ``meta.``-prefixed OKF key is the key, an unknown bare key or a line that is not
    ``key: value`` is ignored, the ``archived`` and ``previous-hash`` lines may be missing or
    anywhere, the keys in any order (the last of a repeated key wins), and a file without a
    store frontmatter is all body. A pair that could not be publisher metadata is dropped. The
    second value says, one note per line, what was not understood. Only a file over the size
    limit raises StoreFormatError: nothing is served in place of the truncated rest.
    """
    if len(data) > STORED_FILE_MAX:
        raise StoreFormatError("version file exceeds size limit")
    close = data.find(_CLOSE, len(_OPEN) - 1) if data.startswith(_OPEN) else -1
    if close < 0:
        return VersionFile(number, False, None, {}, data), ["no store frontmatter: all body"]
    notes: list[str] = []
    archived = False
    previous_hash: str | None = None
    meta: dict[str, str] = {}
    block = data[len(_OPEN) : max(close, len(_OPEN))].decode("utf-8", "surrogateescape")
    for index, line in enumerate(block.split("\n") if block else []):
        key, sep, value = line.partition(": ")
        key, value = key.strip(), value.rstrip("\r")
        bare = key.removeprefix(_META_PREFIX)
        why = ""
        if not sep:
            why = "not 'key: value'"
        elif key == "version":
            if value.strip() != str(number):
                why = f"says version {value.strip()!r} in file v{number}"
        elif key == "archived":
            archived = value.strip() == "true"
        elif key == "previous-hash":
            recorded = value.strip()
            previous_hash = recorded if digests.is_hash_ref(recorded) else None
            why = "" if previous_hash else "not a sha256- hash"
        elif bare in metadata.STORE_RESERVED_KEYS:
            why = "a store key behind the meta. prefix"
        elif key == bare and bare not in metadata.OKF_KEYS:
            why = "unknown key"
        else:
            if bare == "tags":
                value = _read_tags(value)
            why = metadata.pair_refusal(bare, value) or ""
            if not why and (value or bare != "tags"):
                meta[bare] = value
        if why:
            notes.append(f"line {index + 1} {_shown(line)}: {why}, ignored")
    return VersionFile(number, archived, previous_hash, meta, data[close + len(_CLOSE) :]), notes


def _shown(line: str) -> str:
    """A line for a log note: quoted, escaped, not too long."""
    text = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return repr(text if len(text) <= 80 else text[:77] + "...")


def chain_valid(files: Sequence[bytes], numbers: Sequence[int] | None = None) -> bool:
    """True when every file (in ascending order) is in the strict form, says the version its
    name says (``numbers``, where given), and names the file before it in ``previous-hash``.

    After retention pruning the oldest survivor points at a deleted file; that link is not checked.
    """
    try:
        parsed = [parse_version(data) for data in files]
    except StoreFormatError:
        return False
    if numbers is not None and [p.version for p in parsed] != list(numbers):
        return False
    return all(
        newer.previous_hash == hash_ref(older)
        for older, newer in zip(files, parsed[1:], strict=False)
    )
