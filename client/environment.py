"""Where the client keeps its state, and the environment variables every face reads the same way.

``MARK_HOME`` (default ``~/.mark``) holds ``tokens.toml``, ``known_hosts`` and ``cache/``;
``MARK_HOST`` names the server bare paths go to; ``MARK_AUTH`` is a token for that server only.
``Client.from_environment`` applies them; the defaults of ``Trust``, ``TokenStore`` and ``Cache``
follow ``MARK_HOME`` too, so no part of the client looks anywhere else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HOME = "MARK_HOME"
HOST = "MARK_HOST"
AUTH = "MARK_AUTH"
DEFAULT_HOME = "~/.mark"


def variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value; unset and empty alike are None."""
    return (os.environ if environ is None else environ).get(name) or None


def home(environ: Mapping[str, str] | None = None) -> Path:
    """The client state directory: ``MARK_HOME``, else ``~/.mark``."""
    return Path(variable(HOME, environ) or DEFAULT_HOME).expanduser()
