"""Where the client keeps its state, and the environment variables every face reads the same way.

The state is ``tokens.toml`` and ``known_hosts`` (``home``) and the response cache
(``cache_dir``). They live in, first match wins:

1. ``MARK_HOME``: both, the cache in ``MARK_HOME/cache``;
2. ``~/.mark`` where that directory already exists: the reference client's home, so both
   clients keep sharing its tokens file (the cache in ``~/.mark/cache``);
3. the XDG base directories: ``$XDG_CONFIG_HOME/markproto`` (``~/.config/markproto``) and
   ``$XDG_CACHE_HOME/markproto`` (``~/.cache/markproto``); a relative XDG value is ignored, as
   the specification says.

``MARK_HOST`` names the server bare paths go to; ``MARK_AUTH`` is a token for that server only.
``Client.from_environment`` applies them; the defaults of ``Trust``, ``TokenStore`` and ``Cache``
follow the same rules, so no part of the client looks anywhere else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HOME = "MARK_HOME"
HOST = "MARK_HOST"
AUTH = "MARK_AUTH"
LEGACY_HOME = ".mark"
APP_DIR = "markproto"


def variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value; unset and empty alike are None."""
    return (os.environ if environ is None else environ).get(name) or None


def home(environ: Mapping[str, str] | None = None) -> Path:
    """The directory of ``tokens.toml`` and ``known_hosts``."""
    explicit = _explicit(environ)
    if explicit is not None:
        return explicit
    return _xdg(environ, "XDG_CONFIG_HOME", ".config") / APP_DIR


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The directory of the response cache."""
    explicit = _explicit(environ)
    if explicit is not None:
        return explicit / "cache"
    return _xdg(environ, "XDG_CACHE_HOME", ".cache") / APP_DIR


def _explicit(environ: Mapping[str, str] | None) -> Path | None:
    """``MARK_HOME``, else an existing ``~/.mark``, else None (the XDG directories)."""
    value = variable(HOME, environ)
    if value is not None:
        return Path(value).expanduser()
    legacy = _user_home(environ) / LEGACY_HOME
    return legacy if legacy.is_dir() else None


def _xdg(environ: Mapping[str, str] | None, name: str, fallback: str) -> Path:
    value = variable(name, environ)
    if value is not None and Path(value).is_absolute():
        return Path(value)
    return _user_home(environ) / fallback


def _user_home(environ: Mapping[str, str] | None) -> Path:
    user = variable("HOME", environ)
    return Path(user) if user is not None else Path.home()
