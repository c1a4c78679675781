"""What Go's ``strings`` and ``unicode`` packages do, for rules the reference defines in Go terms.

Python differs in small ways that change anchors, tokens and matches: ``str.isspace`` (and so
``str.split``, ``str.strip`` and ``re``'s ``\\s``) also takes U+001C-U+001F, ``str.lower`` maps
``İ`` to two runes and lowers a final ``Σ`` to ``ς``, and ``str.casefold`` is full, not simple,
case folding. Python's ``\\w`` on ``str`` is exactly Go's word rune (``unicode.IsLetter``,
``unicode.IsNumber`` or ``_``), so patterns use it as is. Unicode tables are Python's.
"""

from __future__ import annotations

import re

__all__ = ["SPACE", "equal_fold", "fields", "fold", "has_info_separators", "lower", "trim_space"]

SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""``unicode.IsSpace``: Latin-1 spaces and the White_Space property."""

_FIELDS = re.compile(f"[^{re.escape(SPACE)}]+")


def has_info_separators(text: str) -> bool:
    """Whether ``text`` holds U+001C-U+001F: whitespace to Python, not to Go. Without them,
    Python's whitespace rules give Go's answers (four ``in`` scans beat one regex class)."""
    return "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text


def trim_space(text: str) -> str:
    """``strings.TrimSpace``."""
    return text.strip(SPACE)


def fields(text: str) -> list[str]:
    """``strings.Fields``: the runs between ``unicode.IsSpace`` runes."""
    return _FIELDS.findall(text) if has_info_separators(text) else text.split()


def lower(text: str) -> str:
    """``strings.ToLower``: each rune's simple lower case, so the rune count never changes."""
    # str.lower differs from unicode.ToLower only on İ (two runes) and Σ (final-sigma context);
    # two ``in`` scans beat one regex class
    if text.isascii() or ("\u0130" not in text and "\u03a3" not in text):
        return text.lower()
    return "".join(char.lower()[0] for char in text)


def _fold_rune(char: str) -> str:
    """One rune's simple case folding: ``str.casefold`` where that gives one rune (the common
    folding), else the one-rune lower case (``ẞ`` -> ``ß``, never ``ss``), else the rune itself
    (``İ``, whose only foldings are Turkic or full)."""
    folded = char.casefold()
    if len(folded) == 1:
        return folded
    lowered = char.lower()
    return lowered if len(lowered) == 1 else char


def fold(text: str) -> str:
    """A key equal for exactly the strings ``strings.EqualFold`` calls equal: each rune's simple
    case folding, which keeps ``İ`` and ``ı`` apart from ``i`` and ``I``, as Go's fold orbits do."""
    if text.isascii():
        return text.lower()
    folded = text.casefold()
    if len(folded) == len(text):  # every rune folded to one rune: its simple folding
        return folded
    return "".join(map(_fold_rune, text))


def equal_fold(a: str, b: str) -> bool:
    """``strings.EqualFold``: equal under simple case folding, rune by rune."""
    return a == b or fold(a) == fold(b)
