"""The tokens file (``tokens.toml``, SPEC §8.1): loading, live reload, and the CLI's edits.

The file holds only token hashes, never raw tokens, and this module never logs either. Loading is
strict and all-or-nothing: one bad table fails the whole file with a message naming the file and
the token's label, and a running server keeps its previous grants rather than serve a half-read
or empty set (a broken edit must not quietly make protected documents public).

Edits are atomic and durable (``markproto.durable.replace``) and keep the file 0600. ``generate``
appends text, so comments survive; ``revoke`` rewrites the file from its parsed tables with the
small emitter below (comments are lost, as with the reference's TOML encoder).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import tomllib
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from markproto import durable
from markproto.protocol import times
from markproto.protocol.errors import ProtocolError
from markproto.protocol.escape import toml_string
from markproto.protocol.grants import PUBLISH, READ, Grant, Grants, grant_from_entry, hash_token

log = logging.getLogger("markproto.auth")

OPERATIONS = (READ, PUBLISH)
"""What ``generate`` grants; the server checks no other operation (all writes need publish)."""
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,64}")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ENTRY_ORDER = ("hash", "paths", "operations", "expires")
_ERROR_LINE = re.compile(r"\(at line (\d+), column \d+\)")
_TABLE_HEADER = re.compile(r"\s*\[\s*tokens\s*\.\s*(.+?)\s*\]\s*(?:#.*)?$")


class TokensError(Exception):
    """A tokens file that cannot be loaded or edited; the message names the file (and label)."""


# ---------------------------------------------------------------------------------------------
# Loading


def _tables(path: Path, data: bytes) -> dict[str, Mapping[str, object]]:
    """The ``[tokens.<label>]`` tables of a tokens file, checked for shape but not content."""
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise TokensError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise TokensError(f"{path}: {exc}{_label_near(data, str(exc))}") from None
    unknown = sorted(set(document) - {"tokens"})
    if unknown:
        raise TokensError(
            f"{path}: unknown top-level key {unknown[0]!r} (tokens go in [tokens.<label>] tables)"
        )
    tokens = document.get("tokens", {})
    if not isinstance(tokens, dict):
        raise TokensError(f"{path}: 'tokens' must be a table of [tokens.<label>] tables")
    for label, entry in tokens.items():
        if not isinstance(entry, dict):
            raise TokensError(f"{path}: token {label!r}: must be a [tokens.{label}] table")
    return tokens


def _label_near(data: bytes, message: str) -> str:
    """`` in token 'x'`` for a syntax error inside a token's table, so the message names it."""
    lines = data.decode("utf-8").splitlines()
    match = _ERROR_LINE.search(message)
    if match is not None:
        lines = lines[: int(match.group(1))]
    elif "(at end of document)" not in message:
        return ""
    for line in reversed(lines):
        header = _TABLE_HEADER.match(line)
        if header:
            return f" in token {header.group(1).strip(chr(34) + chr(39))!r}"
    return ""


def _grants(path: Path, data: bytes) -> list[Grant]:
    try:
        grants = [grant_from_entry(label, entry) for label, entry in _tables(path, data).items()]
        Grants(grants)  # the cross-entry checks: duplicate hashes
    except ProtocolError as exc:
        raise TokensError(f"{path}: {exc}") from None
    return grants


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TokensError(f"{path}: cannot read: {exc.strerror}") from None


def load(path: Path) -> Grants:
    """Load and validate a whole tokens file; TokensError names the file and the bad label."""
    return Grants(_grants(path, _read(path)))


def entries(path: Path) -> list[Grant]:
    """The file's grants sorted by label, for listing; a missing file has none."""
    if not path.exists():
        return []
    return sorted(_grants(path, _read(path)), key=lambda grant: grant.label)


# ---------------------------------------------------------------------------------------------
# Live reload

_Signature = tuple[int, int, int, int]


def _signature(path: Path) -> _Signature | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class TokenFile:
    """The current grants of one tokens file, replaced only by a complete, valid new version.

    ``required`` is whether the file was configured explicitly: then its absence at startup is an
    error; otherwise the server starts with no tokens (reads public, writes refused) and picks the
    file up once it appears. A bad or vanished file later keeps the previous grants.
    """

    def __init__(self, path: Path, *, required: bool) -> None:
        self.path = path
        self._signature = _signature(path)
        if self._signature is None and not required:
            self._grants = Grants(())
            log.info("auth: no tokens file; writes are refused", extra={"file": str(path)})
        else:
            self._grants = load(path)
            log.info("auth: loaded tokens", extra={"count": len(self._grants), "file": str(path)})

    @property
    def grants(self) -> Grants:
        return self._grants

    def reload(self) -> bool:
        """Reread the file (SIGHUP); on any error log it and keep the current grants."""
        self._signature = _signature(self.path)
        if self._signature is None and not len(self._grants):
            return False
        try:
            grants = load(self.path)
        except TokensError as exc:
            log.error("auth: tokens not reloaded, keeping the previous ones: %s", exc)
            return False
        self._grants = grants
        log.info("auth: tokens reloaded", extra={"count": len(grants), "file": str(self.path)})
        return True

    def check_changed(self) -> bool:
        """Reload if the file's identity, size or mtime changed (one ``stat``; call it often)."""
        if _signature(self.path) == self._signature:
            return False
        return self.reload()


# ---------------------------------------------------------------------------------------------
# Editing (the ``mark-server token`` commands)


def generate(
    path: Path,
    label: str,
    paths: Sequence[str],
    ops: Sequence[str],
    expires: datetime | None,
) -> str:
    """Append a new ``[tokens.<label>]`` table and return the raw token (64 hex characters).

    The raw token exists only in the return value: the file gets its hash. Refuses a label that
    exists, an unknown operation, and anything the server would then fail to load.
    """
    if not _LABEL.fullmatch(label):
        raise TokensError(f"label {label!r}: use 1 to 64 letters, digits, '-' or '_'")
    if not paths:
        raise TokensError(f"token {label!r}: give at least one path pattern")
    bad_ops = [op for op in ops if op not in OPERATIONS]
    if bad_ops or not ops:
        raise TokensError(
            f"token {label!r}: operations must be among {', '.join(OPERATIONS)}, "
            f"not {', '.join(map(repr, bad_ops)) or 'none'}"
        )
    if expires is not None and expires.utcoffset() is None:
        raise TokensError(f"token {label!r}: expires needs a time zone")
    existing = _read(path) if path.exists() else b""
    if existing.strip() and label in _tables(path, existing):
        raise TokensError(f"{path}: token {label!r} already exists")
    raw = secrets.token_hex(32)
    entry: dict[str, object] = {
        "hash": hash_token(raw),
        "paths": list(paths),
        "operations": list(dict.fromkeys(ops)),
    }
    if expires is not None:
        entry["expires"] = times.format_time(expires)
    separator = b"" if not existing else b"\n" if existing.endswith(b"\n") else b"\n\n"
    data = existing + separator + _emit_table(label, entry).encode()
    _grants(path, data)  # the result must load, or nothing is written
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    durable.replace(str(path), data, mode=0o600)
    return raw


def revoke(path: Path, label: str, *, if_present: bool = False) -> bool:
    """Rewrite the file without ``label``'s table; False if it was absent and ``if_present``."""
    if not path.exists():
        if if_present:
            return False
        raise TokensError(f"{path}: no such file")
    tables = _tables(path, _read(path))
    if label not in tables:
        if if_present:
            return False
        raise TokensError(f"{path}: no token {label!r}")
    kept = {name: entry for name, entry in tables.items() if name != label}
    try:
        text = "\n".join(_emit_table(name, entry) for name, entry in kept.items())
    except TypeError as exc:
        raise TokensError(f"{path}: cannot rewrite: {exc}") from None
    if tomllib.loads(text) != ({"tokens": kept} if kept else {}):
        raise TokensError(f"{path}: cannot rewrite it faithfully; edit it by hand")
    durable.replace(str(path), text.encode(), mode=0o600)
    return True


def _emit_table(label: str, entry: Mapping[str, object]) -> str:
    """One ``[tokens.<label>]`` table in the fixed shape of a token entry."""
    unknown = sorted(set(entry) - set(_ENTRY_ORDER))
    if unknown:
        raise TypeError(f"token {label!r}: unknown key {unknown[0]!r}")
    lines = [f"[tokens.{_toml_key(label)}]"]
    lines += [f"{key} = {_toml_value(label, entry[key])}" for key in _ENTRY_ORDER if key in entry]
    return "\n".join(lines) + "\n"


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def _toml_value(label: str, value: object) -> str:
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "[" + ", ".join(toml_string(item) for item in value) + "]"
    raise TypeError(f"token {label!r}: unexpected value {value!r}")
