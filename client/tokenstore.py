"""Stored capability tokens (``environment.home()/tokens.toml``) and which token a request carries.

The file is the reference client's format, one table per authority, so both clients share it::

    ["localhost:6309"]
    token = "abc123..."

A token typed on the command line (or set in the environment) is meant for the server the user
named; sending it to any other host would hand a capability to a stranger. So selection is per
authority: an explicit override for the named host, the stored token for every host.
"""

from __future__ import annotations

import logging
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from markproto.client.environment import home
from markproto.client.errors import TokenStoreError
from markproto.client.trust import write_private
from markproto.protocol.chars import CONTROL_CLASS
from markproto.protocol.escape import toml_string

_TOKEN = re.compile(rf"[^\s{CONTROL_CLASS}]+")

log = logging.getLogger(__name__)


def valid_token(token: str) -> bool:
    """A token travels as one metadata value: non-empty, no whitespace, no control characters
    (a token pasted with its trailing newline would otherwise fail in a confusing way)."""
    return _TOKEN.fullmatch(token) is not None


def parse_tokens(text: str, source: str = "tokens.toml") -> dict[str, str]:
    """Tokens by lowercase authority; anything but ``[authority]`` tables with a string ``token``
    raises, because rewriting a misread file would lose tokens."""
    import tomllib  # here: a client with no tokens file never needs the parser

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TokenStoreError(f"{source}: {exc}") from None
    tokens: dict[str, str] = {}
    for authority, table in data.items():
        token = table.get("token") if isinstance(table, dict) else None
        if not isinstance(token, str) or not valid_token(token):
            raise TokenStoreError(f'{source}: [{authority!r}] needs a token = "..." line')
        tokens[authority.lower()] = token
    return tokens


def format_tokens(tokens: Mapping[str, str]) -> str:
    """The whole file, one table per authority in the given order."""
    return "\n".join(f"[{toml_string(a)}]\ntoken = {toml_string(t)}\n" for a, t in tokens.items())


class TokenStore:
    """The tokens file. Reads are forgiving (a broken file is warned about and counts as empty, so
    reads still go out unauthenticated); edits are strict (a broken file is never rewritten)."""

    def __init__(self, path: Path | None = None, *, warn: Callable[[str], None] | None = None):
        self.path = (path or home() / "tokens.toml").expanduser()
        self._warn = warn or log.warning
        self._warned: set[str] = set()

    def load(self) -> dict[str, str]:
        try:
            return self._read_strict()
        except TokenStoreError as exc:
            self._warn_once(f"{exc}; no stored token is used")
            return {}

    def get(self, authority: str) -> str | None:
        return self.load().get(authority.lower())

    def add(self, authority: str, token: str) -> None:
        """Store ``token`` for ``authority``, replacing any token it had."""
        if not valid_token(token):
            raise TokenStoreError("a token is one word without spaces or control characters")
        tokens = self._read_strict()
        tokens[authority.lower()] = token
        self._write(tokens)

    def remove(self, authority: str) -> bool:
        """Forget ``authority``'s token; False when there was none."""
        tokens = self._read_strict()
        if tokens.pop(authority.lower(), None) is None:
            return False
        self._write(tokens)
        return True

    def _read_strict(self) -> dict[str, str]:
        try:
            text = self.path.read_text(encoding="utf-8")
            mode = self.path.stat().st_mode
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenStoreError(f"{self.path}: {getattr(exc, 'strerror', None) or exc}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            self._warn_once(f"{self.path} is accessible by other users: chmod 600 it")
        return parse_tokens(text, str(self.path))

    def _warn_once(self, message: str) -> None:
        """The file is re-read for every request; one warning per problem is enough."""
        if message not in self._warned:
            self._warned.add(message)
            self._warn(message)

    def _write(self, tokens: Mapping[str, str]) -> None:
        try:
            write_private(self.path, format_tokens(tokens))
        except OSError as exc:
            raise TokenStoreError(f"{self.path}: cannot write: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True)
class Tokens:
    """Which token a request to an authority carries: its override, else its stored token."""

    store: TokenStore | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    """Explicit tokens by authority: the CLI puts ``-auth``/``MARK_AUTH`` under the named host
    only, so hosts reached any other way never see them."""

    def for_authority(self, authority: str) -> str | None:
        authority = authority.lower()
        token = self.overrides.get(authority)
        if token is None and self.store is not None:
            token = self.store.get(authority)
        return token
