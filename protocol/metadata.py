"""Publisher metadata rules (SPEC §6): which keys a publisher may set, the grammar and limits a
write must pass, and how ``tags``, ``importance``, ``type`` and ``retention`` read.

Metadata stays ``dict[str, str]`` throughout: values are interpreted only where a rule needs a
number, and then with Go's parsers (``strconv.Atoi``, ``strconv.ParseFloat``,
``strings.TrimSpace``), because the reference decides what is valid.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from itertools import chain

from markproto.protocol import status
from markproto.protocol.errors import InvalidMetadata
from markproto.protocol.gotext import trim_space
from markproto.protocol.limits import MAX_META_BYTES, MAX_META_KEYS
from markproto.protocol.paths import atoi, base

CONTROL_KEYS = frozenset({"auth", "expected-version", "if-none-match", "if-modified-since"})
"""Request keys that steer one request and are never stored."""
RESERVED_KEYS = frozenset(
    {
        "version",
        "modified",
        "etag",
        "content-hash",
        "current-version",
        "server-version",
        "your-version",
        "total",
        "current",
        "chain-valid",
        "chain-error",
        "archived",
        "entries",
        "matches",
        "match",
        "status",
    }
)
"""Keys the server sets in responses, so a publisher cannot."""
STORE_RESERVED_KEYS = frozenset({"version", "previous-hash", "archived"})
"""Keys of the stored version file's own header."""
OKF_KEYS = frozenset({"type", "title", "description", "resource", "tags", "timestamp"})
"""Keys stored bare in version files; every other key is stored as ``meta.<key>``."""

DEFAULT_IMPORTANCE = 0.5
DEFAULT_TYPE = "Document"
_UNTYPED_NAMES = frozenset({"index.md", "log.md"})
_SHORT_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}

_KEY = re.compile(r"[a-z0-9-]+")
# Go strconv.ParseFloat's finite forms: decimal, or hex with a mandatory p exponent. `_` may
# separate digits (checked by _underscores_ok); inf and nan never count as an importance.
_DEC_FLOAT = re.compile(r"[+-]?(?:[0-9_]+\.?[0-9_]*|\.[0-9_]+)(?:[eE][+-]?[0-9_]+)?")
_HEX_FLOAT = re.compile(
    r"[+-]?0[xX](?:[0-9a-fA-F_]+\.?[0-9a-fA-F_]*|\.[0-9a-fA-F_]+)[pP][+-]?[0-9_]+"
)


def publisher_meta(request_meta: Mapping[str, str]) -> dict[str, str]:
    """The request's publisher metadata: every key but the control keys."""
    return {k: v for k, v in request_meta.items() if k not in CONTROL_KEYS}


def validate(meta: Mapping[str, str]) -> None:
    """Refuse publisher metadata the protocol does not allow, with the exact wire message.

    The reference checks a Go map, so with several faults which one it reports is random. Ours
    is fixed: the key count first, then each key in sorted order (reserved, then key grammar,
    then value), then the size. The size counts ``len(key) + len(value)`` in UTF-8 bytes, with
    ``tags`` in its stored list form ``[a, b]``.
    """
    if len(meta) > MAX_META_KEYS:
        raise InvalidMetadata(status.TOO_MANY_KEYS)
    for key in sorted(meta):
        refusal = pair_refusal(key, meta[key])
        if refusal is not None:
            raise InvalidMetadata(refusal)
    if size(meta) > MAX_META_BYTES:
        raise InvalidMetadata(status.METADATA_TOO_LARGE)


def pair_refusal(key: str, value: str) -> str | None:
    """Why one ``key: value`` pair cannot be publisher metadata (the wire message), or None.

    Reserved key, then key grammar, then value: the order ``validate`` reports them in. Readers
    of metadata from elsewhere (a legacy version file, a document's own frontmatter) drop a
    pair this refuses instead of refusing everything.
    """
    if key in RESERVED_KEYS:
        return status.reserved_key(go_quote(key))
    if not _KEY.fullmatch(key):
        return status.invalid_key(go_quote(key))
    if not _single_line_utf8(value):
        return status.multiline_value(go_quote(key))
    return None


def size(meta: Mapping[str, str]) -> int:
    """What ``meta`` counts against the 1024-byte limit: UTF-8 bytes of every key and value,
    ``tags`` in its stored list form ``[a, b]``."""
    return sum(len(k) + len(_stored_value(k, v).encode()) for k, v in meta.items())


def validate_store(meta: Mapping[str, str]) -> None:
    """The store's own check: no version-file header keys, and a usable ``retention``.

    Messages are ``invalid publisher metadata: <detail>``; the reference fixes only the prefix.
    """
    reserved = sorted(STORE_RESERVED_KEYS.intersection(meta))
    if reserved:
        raise InvalidMetadata(status.store_reserved_key(go_quote(reserved[0])))
    if "retention" in meta and retention(meta) is None:
        raise InvalidMetadata(status.invalid_retention(go_quote(meta["retention"])))


def for_publish(path: str, meta: Mapping[str, str]) -> dict[str, str]:
    """What a PUBLISH of publisher metadata ``meta`` at ``path`` persists, checked in the
    reference's order (SPEC §6.4): the rules, the type default, the store's keys, then tags
    normalized. Raises InvalidMetadata with the wire message."""
    validate(meta)
    typed = with_type_default(path, meta)
    validate_store(typed)
    return normalize(typed)


def validate_interpreted(meta: Mapping[str, str]) -> None:
    """Refuse values a rule would not read as written (§6.2): for clients, before they send.

    The server reads an ``importance`` that is no number in [0, 1] as 0.5 without a word, and
    refuses a ``retention`` that is no positive integer; both readings are the server's own
    (``parse_importance``, ``retention``), so a value passes here exactly when it means what
    it says there.
    """
    if "importance" in meta:
        number = _parse_go_float(trim_space(meta["importance"]))
        if number is None or not 0.0 <= number <= 1.0:
            got = go_quote(meta["importance"])
            raise InvalidMetadata(f"importance must be a number from 0 to 1, got {got}")
    if "retention" in meta and retention(meta) is None:
        got = go_quote(meta["retention"])
        raise InvalidMetadata(f"retention must be a positive integer, got {got}")


SHARED_VALUE_MAX = 16
"""Metadata values this short are shared between documents (``shared``)."""


SHARED_KEYS_MAX = 8
SHARED_DICTS = 256
"""Dicts ``shared`` hands out again at most (each of at most ``SHARED_KEYS_MAX`` short keys and
values: under 1 KiB, so the table stays under 256 KiB); when full it starts over."""
_dicts: dict[tuple[str, ...], dict[str, str]] = {}


def shared(meta: Mapping[str, str]) -> dict[str, str]:
    """``meta`` as a dict whose keys, and values of at most ``SHARED_VALUE_MAX`` runes (a type,
    a status, a date, a few tags), are the one string every document with the same key or value
    holds: a server keeps a document's metadata for its life (snapshot, catalog, link index),
    and a vault of short notes repeats the same few keys and values in every one (each string
    about 55 bytes). Where all of them, keys too, are that short, the dict itself is the one
    every such document holds (184 bytes or more each): it may be another document's, so it
    is never changed."""
    intern = sys.intern
    out = {
        intern(key): intern(value) if len(value) <= SHARED_VALUE_MAX else value
        for key, value in meta.items()
    }
    if len(out) > SHARED_KEYS_MAX or any(
        len(key) > SHARED_VALUE_MAX or len(value) > SHARED_VALUE_MAX for key, value in out.items()
    ):
        return out
    key = tuple(chain.from_iterable(out.items()))
    held = _dicts.get(key)
    if held is not None:
        return held
    if len(_dicts) >= SHARED_DICTS:
        _dicts.clear()  # one C call, safe beside other threads; held dicts stay with their holders
    _dicts[key] = out
    return out


def split_tags(value: str) -> list[str]:
    """Comma-separated tags, each trimmed, empties dropped."""
    return [tag for tag in map(trim_space, value.split(",")) if tag]


def normalize_tags(value: str) -> str:
    """The stored and fetched form: ``"alpha, wire"`` -> ``"alpha,wire"``."""
    return ",".join(split_tags(value))


def normalize(meta: Mapping[str, str]) -> dict[str, str]:
    """Persisted publisher metadata: ``tags`` normalized.

    A ``tags`` value with no tags left (``""``, ``" , "``) is dropped rather than stored as
    ``tags: []``: there is nothing to say, and the no-op comparison must not tell them apart.
    """
    out = dict(meta)
    if "tags" in out:
        tags = normalize_tags(out.pop("tags"))
        if tags:
            out["tags"] = tags
    return out


def parse_importance(value: str | None) -> float:
    """The catalog prior in [0, 1]: Go ``ParseFloat`` of the trimmed value, else 0.5.

    Missing, unparsable and out-of-range values read as 0.5. Go's ``ParseFloat`` accepts
    ``NaN``, and NaN passes the reference's range test; we deliberately read NaN (and the
    infinities) as 0.5 too, so a ranking never compares against NaN.
    """
    if value is None:
        return DEFAULT_IMPORTANCE
    number = _parse_go_float(trim_space(value))
    if number is None or not 0.0 <= number <= 1.0:
        return DEFAULT_IMPORTANCE
    return number


def with_type_default(path: str, meta: Mapping[str, str]) -> dict[str, str]:
    """Set ``type: Document`` unless the file is ``index.md`` or ``log.md`` or a type is given."""
    out = dict(meta)
    if base(path) not in _UNTYPED_NAMES and not trim_space(out.get("type", "")):
        out["type"] = DEFAULT_TYPE
    return out


def retention(meta: Mapping[str, str]) -> int | None:
    """How many versions to keep: a positive Go ``Atoi`` integer, else None."""
    value = meta.get("retention")
    number = None if value is None else atoi(value)
    return number if number is not None and number > 0 else None


def parse_expected_version(value: str | None, *, append: bool) -> int | None:
    """The ``expected-version`` a write is conditioned on, with the wire messages.

    PUBLISH: absent or empty means no check (None); otherwise an integer >= 0, where 0 means
    "must not exist yet". APPEND: required, an integer >= 1.
    """
    if not value:
        if append:
            raise InvalidMetadata(status.APPEND_NEEDS_EXPECTED_VERSION)
        return None
    number = atoi(value)
    if append and (number is None or number < 1):
        raise InvalidMetadata(status.INVALID_APPEND_EXPECTED_VERSION)
    if number is None or number < 0:
        raise InvalidMetadata(status.INVALID_EXPECTED_VERSION)
    return number


def go_quote(text: str) -> str:
    """Go ``%q``: the quoted key in wire messages, with control characters escaped so a
    message stays on one line."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _single_line_utf8(value: str) -> bool:
    if "\n" in value or "\r" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _stored_value(key: str, value: str) -> str:
    return f"[{', '.join(split_tags(value))}]" if key == "tags" else value


def _parse_go_float(text: str) -> float | None:
    if _DEC_FLOAT.fullmatch(text):
        mantissa = re.split(r"[eE]", text)[0]
        if not any(c in "0123456789" for c in mantissa) or not _underscores_ok(text):
            return None
        return float(text.replace("_", ""))
    if _HEX_FLOAT.fullmatch(text):
        if not _underscores_ok(text):
            return None
        try:
            return float.fromhex(text.replace("_", ""))
        except OverflowError:
            return math.inf
    return None


def _underscores_ok(text: str) -> bool:
    """Go's rule: ``_`` only between digits, or between a base prefix and a digit."""
    if "_" not in text:
        return True
    body = text.lstrip("+-")
    hex_digits = body[:2].lower() == "0x"
    saw = "0" if hex_digits else "^"  # ^ start, 0 digit or prefix, _ underscore, ! other
    for ch in body[2:] if hex_digits else body:
        if ch in "0123456789" or (hex_digits and ch in "abcdefABCDEF"):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        else:
            if saw == "_":
                return False
            saw = "!"
    return saw != "_"
