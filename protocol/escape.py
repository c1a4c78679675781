"""Markdown escaping for generated bodies (SPEC §10.7), Go's ``url.PathEscape``, and TOML strings.

Names, paths, titles and queries are shown as literal markdown text, so every character markdown
could read as syntax gets a backslash; link targets are percent-escaped instead.

TOML is not on the wire, but both sides write it: the server its ``tokens.toml`` (SPEC §8.1) and
the client its token store. The escaping is a pure string rule both must get right (a file that
does not read back loses a token), and this floor is the one both import, so it lives here.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from markproto.protocol.chars import CONTROL

ESCAPABLE = "\\[]()*_`~#|"
"""Every character ``escape`` puts a backslash before."""

_ESCAPE = str.maketrans({c: "\\" + c for c in ESCAPABLE})
_UNESCAPE = re.compile(r"\\([\\\[\]()*_`~#|])")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_TOML = str.maketrans(
    {
        **{c: f"\\u{ord(c):04x}" for c in CONTROL},
        "\b": "\\b",
        "\t": "\\t",
        "\n": "\\n",
        "\f": "\\f",
        "\r": "\\r",
        '"': '\\"',
        "\\": "\\\\",
    }
)


def escape(s: str) -> str:
    """Backslash every markdown-significant character, each once, left to right."""
    return s.translate(_ESCAPE)


def escape_cell(s: str) -> str:
    """``escape`` for a table cell: each CRLF, CR or LF becomes one space, as a raw one ends
    the row."""
    if "\r" in s or "\n" in s:
        s = _LINE_BREAK.sub(" ", s)
    return s.translate(_ESCAPE)


def unescape(s: str) -> str:
    """Drop each backslash that precedes an escapable character (the inverse of ``escape``)."""
    return _UNESCAPE.sub(r"\1", s) if "\\" in s else s


def path_escape(s: str) -> str:
    """Go ``url.PathEscape``: keep ``A-Za-z0-9-_.~$&+:=@``, percent-escape every other UTF-8 byte
    in uppercase hex (``/`` included). Undecodable file names (surrogate escapes) are escaped as
    the bytes they stand for, as Go escapes a raw byte string."""
    return quote(s, safe="$&+:=@", errors="surrogateescape")


def toml_string(s: str) -> str:
    """A TOML basic string (TOML 1.0): quoted, with ``"`` and ``\\`` backslashed, the five
    controls TOML names written short (``\\b \\t \\n \\f \\r``) and every other control
    character, which TOML forbids raw, as ``\\uXXXX``."""
    return '"' + s.translate(_TOML) + '"'
