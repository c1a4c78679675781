"""The LIST cursor (SPEC §5.2): an opaque token that pins where the next page starts.

Raw URL-safe base64 (no padding) of ``0x01 | flags | uint16 BE len(path) | path | last name``.
The cursor carries the canonical path and the include-archived flag so that it cannot be replayed
against another listing. Path and name are bytes to the reference, so a file name that is not
UTF-8 travels as its surrogate escapes and comes back unchanged.
"""

from __future__ import annotations

import binascii
import re
import struct
from base64 import urlsafe_b64encode
from typing import Final

from markproto.protocol import status
from markproto.protocol.errors import InvalidCursor
from markproto.protocol.limits import MAX_PATH

VERSION: Final = 1
FLAG_ARCHIVED: Final = 0x01
MAX_DECODED: Final = 4 + 2 * MAX_PATH


_ALPHABET = re.compile(rb"[A-Za-z0-9_-]*")
_TO_STANDARD = bytes.maketrans(b"-_", b"+/")


def encode_cursor(path: str, include_archived: bool, last_name: str) -> str:
    """The ``next-cursor`` for a page of ``path`` whose last entry is ``last_name``."""
    raw_path = path.encode("utf-8", "surrogateescape")
    if not last_name:
        raise ValueError("a LIST cursor needs a non-empty entry name")
    if len(raw_path) > MAX_PATH:
        raise ValueError("a LIST cursor path must fit a request path")
    head = struct.pack(">BBH", VERSION, FLAG_ARCHIVED if include_archived else 0, len(raw_path))
    name = last_name.encode("utf-8", "surrogateescape")
    return urlsafe_b64encode(head + raw_path + name).rstrip(b"=").decode()


def decode_cursor(cursor: str, path: str, include_archived: bool) -> str:
    """The entry name the next page starts after; ``""`` for an empty cursor (the first page).

    Checks run in the reference's order, so each bad cursor gets the reference's message: the
    size bound first (before decoding), then base64 and length, version and flags, the path
    length, the request match, the name.
    """
    if not cursor:
        return ""
    data = cursor.encode("utf-8", "replace")
    if len(data) * 6 // 8 > MAX_DECODED:
        raise InvalidCursor(status.CURSOR_TOO_LONG)
    raw = _decode_raw_url(data.replace(b"\r", b"").replace(b"\n", b""))
    if raw is None or len(raw) < 5:
        raise InvalidCursor(status.INVALID_CURSOR)
    if raw[0] != VERSION or raw[1] & ~FLAG_ARCHIVED:
        raise InvalidCursor(status.UNSUPPORTED_CURSOR)
    (path_len,) = struct.unpack_from(">H", raw, 2)
    if path_len == 0 or 4 + path_len >= len(raw):
        raise InvalidCursor(status.INVALID_CURSOR)
    if (
        raw[4 : 4 + path_len] != path.encode("utf-8", "surrogateescape")
        or bool(raw[1] & FLAG_ARCHIVED) != include_archived
    ):
        raise InvalidCursor(status.CURSOR_MISMATCH)
    return raw[4 + path_len :].decode("utf-8", "surrogateescape")


def _decode_raw_url(data: bytes) -> bytes | None:
    """Go ``base64.RawURLEncoding.DecodeString`` (line breaks already dropped): the URL-safe
    alphabet only, no padding, and no lone final character."""
    if _ALPHABET.fullmatch(data) is None or len(data) % 4 == 1:
        return None
    try:
        return binascii.a2b_base64(data.translate(_TO_STANDARD) + b"=" * (-len(data) % 4))
    except binascii.Error:
        return None
