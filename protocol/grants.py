"""Capability tokens (SPEC §8): token hashing, path patterns, and the write and read decisions.

A grant says what one token may do (operations) where (path patterns) until when (expiry).
Reading the token file is the server's job (``server/tokens.py``); this module validates one
entry (:func:`grant_from_entry`) and decides requests against an immutable :class:`Grants`.

Patterns follow the reference exactly: Go ``path.Match`` (ported byte for byte below, since
Python's ``fnmatch`` differs: its ``*`` crosses ``/`` and its classes negate with ``!``), plus
one ``**`` written as a trailing ``/**`` (anything strictly under the prefix) or an infix
``/**/`` (the prefix, then the rest matched at every segment boundary). Text before ``/**`` is
compared literally, as in the reference. A pattern ending in ``/`` also covers the directory
without its slash (``/team/`` covers ``/team``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import lru_cache

from markproto.protocol import digests, status, times
from markproto.protocol.errors import InvalidPattern, ProtocolError
from markproto.protocol.limits import MANIFEST_PATH

READ = "read"
PUBLISH = "publish"
"""The operation every write verb (PUBLISH, ARCHIVE, APPEND) needs."""

_ENTRY_KEYS = frozenset({"hash", "paths", "operations", "expires"})
_RUNE_ERROR = 0xFFFD
_SLASH, _STAR, _QUESTION, _BACKSLASH, _OPEN, _CLOSE, _CARET, _DASH = b"/*?\\[]^-"


class InvalidGrant(ProtocolError, ValueError):
    """A token entry the server cannot load; the message names the token's label."""


def hash_token(raw: str) -> str:
    """``sha256-`` + hex SHA-256 of the raw token: what token files store and lookups use."""
    return digests.hash_ref(_utf8(raw))


@dataclass(frozen=True, slots=True)
class Grant:
    """What one token may do: ``operations`` on paths matching ``paths``, until ``expires``."""

    label: str
    token_hash: str
    paths: tuple[str, ...]
    operations: frozenset[str]
    expires: datetime | None = None


class Decision(Enum):
    """An authorization outcome, in the order the checks run."""

    ALLOW = "allow"
    NO_TOKEN = "no-token"
    INVALID_TOKEN = "invalid-token"
    EXPIRED = "expired"
    NOT_PERMITTED = "not-permitted"

    @property
    def status(self) -> str:
        """The wire status: ``unauthorized`` for who-are-you failures, else ``not-permitted``."""
        if self is Decision.ALLOW:
            return "ok"
        return "not-permitted" if self is Decision.NOT_PERMITTED else "unauthorized"

    @property
    def message(self) -> str:
        """The fixed wire message of a refusal (empty for ALLOW)."""
        if self is Decision.ALLOW:
            return ""
        if self is Decision.NOT_PERMITTED:
            return status.INSUFFICIENT
        return status.AUTH_REQUIRED


class Grants:
    """The loaded grants, indexed by token hash, with read patterns precompiled.

    Token lookup hashes the presented token and looks the digest up in a dict. Any timing
    difference in that lookup depends only on the SHA-256 of the attacker's own input, which
    they cannot steer towards a stored hash byte by byte, so it reveals nothing usable about
    a stored token; the raw token is never compared.
    """

    __slots__ = ("_by_hash", "_read_patterns")

    def __init__(self, grants: Iterable[Grant]) -> None:
        by_hash: dict[str, tuple[Grant, tuple[_Pattern, ...]]] = {}
        read: dict[str, _Pattern] = {}
        for grant in grants:
            if grant.token_hash in by_hash:
                first = by_hash[grant.token_hash][0].label
                raise InvalidGrant(f"tokens {first!r} and {grant.label!r} have the same hash")
            if grant.expires is not None and grant.expires.utcoffset() is None:
                raise InvalidGrant(f"token {grant.label!r}: expires needs a UTC offset")
            patterns = tuple(_compile_for(grant.label, p) for p in grant.paths)
            by_hash[grant.token_hash] = (grant, patterns)
            if READ in grant.operations:
                read.update(zip(grant.paths, patterns, strict=True))
        self._by_hash = by_hash
        self._read_patterns = tuple(read.values())

    def __len__(self) -> int:
        return len(self._by_hash)

    def authorize(self, token: str, path: str, op: str, now: datetime) -> Decision:
        """Whether raw ``token`` may do ``op`` on ``path`` at ``now`` (timezone-aware).

        Checks run in the reference's order: no token, unknown token, expired (strictly after
        ``expires``), operation missing, no pattern matching the path.
        """
        if not token:
            return Decision.NO_TOKEN
        entry = self._by_hash.get(hash_token(token))
        if entry is None:
            return Decision.INVALID_TOKEN
        grant, patterns = entry
        if grant.expires is not None and now > grant.expires:
            return Decision.EXPIRED
        if op not in grant.operations or not any(p.matches(path) for p in patterns):
            return Decision.NOT_PERMITTED
        return Decision.ALLOW

    def refusal(self, token: str, path: str, op: str, now: datetime) -> tuple[str, str]:
        """Why ``authorize`` refuses, for the server's log, as (reason, label): the reason one of
        ``no token``, ``unknown token``, ``expired``, ``wrong operation``, ``wrong path``; the
        label the grant's, ``""`` when there is none. Never the token or its hash."""
        entry = self._by_hash.get(hash_token(token)) if token else None
        if entry is None:
            return ("unknown token" if token else "no token"), ""
        grant, patterns = entry
        if grant.expires is not None and now > grant.expires:
            return "expired", grant.label
        if op not in grant.operations:
            return "wrong operation", grant.label
        if not any(p.matches(path) for p in patterns):
            return "wrong path", grant.label
        return "", grant.label

    def authorize_read(self, token: str, path: str, now: datetime) -> Decision:
        """Read access: public paths allow any (even a bogus) token; protected ones need ``read``.

        With no token store at all every read is public; callers skip the call or pass an
        empty Grants, which protects nothing.
        """
        if not self.is_protected(path):
            return Decision.ALLOW
        return self.authorize(token, path, READ, now)

    def is_protected(self, path: str) -> bool:
        """Whether some ``read`` grant's pattern matches ``path`` (the manifest never is).

        Expired grants still protect their paths: expiry must not make a document public.
        """
        if not self._read_patterns or path == MANIFEST_PATH:
            return False
        return any(p.matches(path) for p in self._read_patterns)


def match_pattern(pattern: str, path: str) -> bool:
    """Whether ``path`` matches a token path pattern; InvalidPattern for a malformed one."""
    return _compile(pattern).matches(path)


def grant_from_entry(label: str, entry: Mapping[str, object]) -> Grant:
    """Validate one ``[tokens.<label>]`` table of a token file into a Grant.

    Stricter than the reference, so mistakes fail at load instead of silently granting
    nothing: unknown keys are refused (a misspelt ``path`` would otherwise give a token with
    no paths), and the hash must be ``sha256-`` + 64 lowercase hex, the only form a token can
    ever hash to. ``paths`` and ``operations`` are lists of strings (absent means none);
    ``expires`` is an RFC 3339 string (or a TOML offset date-time), empty meaning never.
    """
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise InvalidGrant(f"token {label!r}: unknown key {unknown[0]!r}")
    token_hash = entry.get("hash")
    if not isinstance(token_hash, str) or not digests.is_hash_ref(token_hash):
        raise InvalidGrant(
            f'token {label!r}: hash must be "sha256-" followed by 64 lowercase hex digits'
        )
    paths = _string_list(label, entry, "paths")
    for pattern in paths:
        try:
            _compile(pattern)
        except InvalidPattern as exc:
            raise InvalidGrant(f"token {label!r}: {exc}") from exc
    operations = frozenset(_string_list(label, entry, "operations"))
    return Grant(label, token_hash, paths, operations, _expires(label, entry.get("expires")))


def _string_list(label: str, entry: Mapping[str, object], key: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidGrant(f"token {label!r}: {key} must be a list of strings")
    return tuple(value)


def _expires(label: str, value: object) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):  # a TOML offset date-time, already read by tomllib
        moment: datetime | None = value
    else:
        moment = times.parse_time(value) if isinstance(value, str) else None
    if moment is None:
        raise InvalidGrant(
            f"token {label!r}: expires {value!r} is not an RFC 3339 time like 2026-12-31T23:59:59Z"
        )
    if moment.utcoffset() is None:
        raise InvalidGrant(f"token {label!r}: expires needs a UTC offset")
    return moment


@dataclass(frozen=True, slots=True)
class _Pattern:
    """A validated pattern: a plain glob, a trailing ``/**`` prefix, or an infix ``/**/``."""

    prefix: str | None  # set for the ** forms: the literal text before /**
    glob: tuple[tuple[bool, bytes], ...] | None  # path.Match chunks (infix: of the suffix)
    literal: bytes | None  # a glob without metacharacters matches only itself
    directory: bool  # ends in "/": also covers the path without its slash

    def matches(self, path: str) -> bool:
        if self._match(path):
            return True
        return self.directory and self._match(path + "/")

    def _match(self, path: str) -> bool:
        if self.prefix is None:
            name = _utf8(path)
            return name == self.literal if self.literal is not None else _glob(self.glob, name)
        if not path.startswith(self.prefix + "/"):
            return False
        if self.glob is None:
            return True
        rest = _utf8(path[len(self.prefix) + 1 :])
        return any(
            _glob(self.glob, rest[i:]) for i in range(len(rest)) if i == 0 or rest[i - 1] == _SLASH
        )


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> _Pattern:
    """Validate as the reference does, then precompile.

    At most one ``**``, written only as ``/**`` or ``/**/``; the whole pattern, with ``**``
    read as a plain name, must be well-formed ``path.Match`` syntax.
    """
    count = pattern.count("**")
    if count > 1:
        raise InvalidPattern(f"{pattern!r}: only one ** wildcard is supported per pattern")
    if count and "**" in pattern.replace("/**/", "/").removesuffix("/**"):
        raise InvalidPattern(f"{pattern!r}: ** must be delimited by slashes (use /** or /**/)")
    for _, chunk in _chunks(pattern.replace("**", "placeholder")):
        try:
            _match_chunk(chunk, b"", 0)
        except _BadPattern:
            raise InvalidPattern(f"{pattern!r}: syntax error in pattern") from None
    directory = pattern.endswith("/")
    if pattern.endswith("/**"):
        return _Pattern(pattern[:-3], None, None, directory)
    if count:
        prefix, suffix = pattern.split("/**/", 1)
        return _Pattern(prefix, _chunks(suffix), None, directory)
    literal = None if re.search(r"[*?\[\\]", pattern) else _utf8(pattern)
    return _Pattern(None, _chunks(pattern), literal, directory)


def _compile_for(label: str, pattern: str) -> _Pattern:
    try:
        return _compile(pattern)
    except InvalidPattern as exc:
        raise InvalidPattern(f"token {label!r}: {exc}") from exc


def _chunks(pattern: str) -> tuple[tuple[bool, bytes], ...]:
    """Go ``scanChunk``: the pattern as (preceded by ``*``, literal-or-class chunk) pairs."""
    data, chunks, i = _utf8(pattern), [], 0
    while i < len(data):
        star = False
        while i < len(data) and data[i] == _STAR:
            i, star = i + 1, True
        j, in_range = i, False
        while j < len(data):
            c = data[j]
            if c == _BACKSLASH:
                j += 1 if j + 1 < len(data) else 0
            elif c == _OPEN:
                in_range = True
            elif c == _CLOSE:
                in_range = False
            elif c == _STAR and not in_range:
                break
            j += 1
        chunks.append((star, data[i:j]))
        i = j
    return tuple(chunks)


class _BadPattern(Exception):
    """Go's ErrBadPattern, internal: validated patterns never raise it while matching."""


def _glob(chunks: tuple[tuple[bool, bytes], ...] | None, name: bytes) -> bool:
    """Go ``path.Match`` over precompiled chunks; a malformed chunk matches nothing.

    ``*`` never crosses ``/``, and each chunk is placed at its first fit, exactly as Go does
    (which differs from a regex when a class matches ``/``). Only the suffix of an infix
    ``/**/`` can be malformed on its own, as in the reference (``/[a/**/[]``).
    """
    try:
        return _glob_unchecked(chunks or (), name)
    except _BadPattern:
        return False


def _glob_unchecked(chunks: tuple[tuple[bool, bytes], ...], name: bytes) -> bool:
    pos, last = 0, len(chunks) - 1
    for index, (star, chunk) in enumerate(chunks):
        if star and not chunk:
            return _SLASH not in name[pos:]
        end = _match_chunk(chunk, name, pos)
        if end is not None and (end == len(name) or index < last):
            pos = end
            continue
        if not star:
            return False
        for skip in range(pos, len(name)):
            if name[skip] == _SLASH:
                return False
            end = _match_chunk(chunk, name, skip + 1)
            if end is not None and not (index == last and end < len(name)):
                pos = end
                break
        else:
            return False
    return pos == len(name)


def _match_chunk(chunk: bytes, s: bytes, si: int) -> int | None:
    """Go ``matchChunk``: the index after ``chunk`` matched at ``s[si:]``, or None.

    After a mismatch it keeps reading the chunk, so syntax errors surface either way.
    """
    failed, ci, n = False, 0, len(chunk)
    while ci < n:
        if not failed and si >= len(s):
            failed = True
        c = chunk[ci]
        if c == _OPEN:
            rune = 0
            if not failed:
                rune, width = _decode_rune(s, si)
                si += width
            ci += 1
            negated = ci < n and chunk[ci] == _CARET
            if negated:
                ci += 1
            matched, ranges = False, 0
            while True:
                if ci < n and chunk[ci] == _CLOSE and ranges:
                    ci += 1
                    break
                lo, ci = _class_char(chunk, ci)
                hi = lo
                if chunk[ci] == _DASH:
                    hi, ci = _class_char(chunk, ci + 1)
                matched = matched or lo <= rune <= hi
                ranges += 1
            failed = failed or matched == negated
        elif c == _QUESTION:
            if not failed:
                failed = s[si] == _SLASH
                si += _decode_rune(s, si)[1]
            ci += 1
        else:
            if c == _BACKSLASH:
                ci += 1
                if ci >= n:
                    raise _BadPattern
            if not failed:
                failed = chunk[ci] != s[si]
                si += 1
            ci += 1
    return None if failed else si


def _class_char(chunk: bytes, ci: int) -> tuple[int, int]:
    """Go ``getEsc``: one (possibly escaped) class character and the index after it."""
    if ci >= len(chunk) or chunk[ci] in (_DASH, _CLOSE):
        raise _BadPattern
    if chunk[ci] == _BACKSLASH:
        ci += 1
        if ci >= len(chunk):
            raise _BadPattern
    rune, width = _decode_rune(chunk, ci)
    if rune == _RUNE_ERROR and width == 1:
        raise _BadPattern
    ci += width
    if ci >= len(chunk):
        raise _BadPattern
    return rune, ci


def _decode_rune(data: bytes, i: int) -> tuple[int, int]:
    """Go ``utf8.DecodeRune``: (code point, width), or (U+FFFD, 1) for an invalid byte."""
    lead = data[i]
    if lead < 0x80:
        return lead, 1
    width = (
        2
        if 0xC2 <= lead <= 0xDF
        else 3
        if 0xE0 <= lead <= 0xEF
        else 4
        if 0xF0 <= lead <= 0xF4
        else 1
    )
    if width > 1:
        try:
            return ord(data[i : i + width].decode()), width
        except UnicodeDecodeError:
            pass
    return _RUNE_ERROR, 1


def _utf8(text: str) -> bytes:
    """UTF-8 bytes, with undecodable wire bytes (surrogate escapes) restored as they came."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
