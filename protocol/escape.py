"""Markdown escaping for generated bodies (SPEC §10.7) and Go's ``url.PathEscape``.

Names, paths, titles and queries are shown as literal markdown text, so every character markdown
could read as syntax gets a backslash; link targets are percent-escaped instead.
"""

from __future__ import annotations

import re
from urllib.parse import quote

ESCAPABLE = "\\[]()*_`~#|"
"""Every character ``escape`` puts a backslash before."""

_ESCAPE = str.maketrans({c: "\\" + c for c in ESCAPABLE})
_UNESCAPE = re.compile(r"\\([\\\[\]()*_`~#|])")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


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
