"""LOOKUP's text rules (docs/SPEC.md §5.7, catalog and body mode): markup stripping, body-match
words, query terms.

The spec's "tokens" are called words here: in this code base a token is a credential.

Each rule is the reference's, character for character: Go's string semantics come from
``gotext`` (SPEC §1.1), RE2's ``\\s``/``\\d`` are written as ASCII classes, and Python's ``\\w`` is
Go's word rune. Python's own whitespace rules (``str.split``, ``str.strip``) run only on text
``gotext.has_info_separators`` clears.

Indexing speed matters (every startup splits every body into words), so the common cases run as
whole-text C-level operations and the exact per-field rules are the fallback for rare characters.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from operator import methodcaller

from markproto.protocol.gotext import fields, has_info_separators, lower, trim_space
from markproto.protocol.limits import TOKEN_MAX_BYTES

__all__ = [
    "catalog_terms",
    "field_words",
    "identifier_words",
    "line_cut",
    "loose_text",
    "name_length",
    "prose_words",
    "query_terms",
    "strip_line",
    "strip_markup",
    "text_words",
    "word_set",
]


# --- words -------------------------------------------------------------------------------------

_WORD_RUNS = re.compile(r"\w+")
_TRIM = re.compile(r"\A\W+|\W+\Z")
_SHORT_RUNS = re.compile(rf"(?<!\w)\w{{2,{TOKEN_MAX_BYTES}}}(?!\w)")
_COMPOUNDS = re.compile(r"(?<!\S)[^\w\s]*(\w+(?:[^\w\s]+\w+)+)")
"""The trimmed core of each field with two or more word runs (ends at a space or the end, as
``[^\\w\\s]`` can only be followed by a space, the end, or another run)."""


_SURELY_FITS = TOKEN_MAX_BYTES // 4
"""Runes of at most four bytes: a word this short is within the byte limit."""


def _fits(word: str) -> bool:
    return len(word) >= 2 and (len(word) <= _SURELY_FITS or _utf8_fits(word))


def _utf8_fits(word: str) -> bool:
    return len(word.encode()) <= TOKEN_MAX_BYTES


def field_words(field: str) -> list[str]:
    """The words of one whitespace-free field (SPEC §5.7): the trimmed, lower-cased whole word,
    then, if it holds a non-word rune, each of its word runs; each kept only at >= 2 runes and
    <= 32 bytes."""
    whole = lower(_TRIM.sub("", field))
    if not whole:
        return []
    out = [whole] if _fits(whole) else []
    runs = _WORD_RUNS.findall(whole)
    if len(runs) > 1:
        out.extend(run for run in runs if _fits(run))
    return out


def text_words(text: str) -> list[str]:
    """Every word of every field of ``text``, with repeats (their count is the section length).

    Equal to chaining ``field_words`` over ``fields(text)``, but mostly in C: a field of word
    runes alone is its own word, and the other fields, joined, give their words in two regex
    scans (each field's word runs, and the trimmed core of each field with several runs).
    """
    if has_info_separators(text):
        return [word for field in fields(text) for word in field_words(field)]
    parts = lower(text).split()
    odd = " ".join([part for part in parts if not part.isalnum()])
    if text.isascii():
        out = [part for part in parts if part.isalnum() and 1 < len(part) <= TOKEN_MAX_BYTES]
        del parts  # the odd ones are in ``odd``: not held beside its words
        if odd:
            out += _SHORT_RUNS.findall(odd)
            out += [core for core in _COMPOUNDS.findall(odd) if len(core) <= TOKEN_MAX_BYTES]
        return out
    out = [
        part
        for part in parts
        if part.isalnum()
        and 1 < len(part) <= TOKEN_MAX_BYTES
        and (len(part) <= _SURELY_FITS or part.isascii() or len(part.encode()) <= TOKEN_MAX_BYTES)
    ]
    del parts
    if odd:
        out += [
            run
            for run in _SHORT_RUNS.findall(odd)
            if len(run) <= _SURELY_FITS or run.isascii() or len(run.encode()) <= TOKEN_MAX_BYTES
        ]
        out += filter(_fits, _COMPOUNDS.findall(odd))
    return out


def word_set(texts: Iterable[str]) -> set[str]:
    """The distinct words of several texts (a heading trail; tags and a title)."""
    out: set[str] = set()
    for text in texts:
        out.update(text_words(text))
    return out


_ATTRIBUTE = r"(?:[#.][^\s{}=]+|[^\s{}=#.][^\s{}=]*=[^\s{}]*)"
_ATTRIBUTES = re.compile(rf"[\t ]*\{{:?[\t ]*{_ATTRIBUTE}(?:[\t ]+{_ATTRIBUTE})*[\t ]*\}}\Z")
"""A trailing attribute block (``{ #id .class key=value }``, also kramdown's ``{: #id}``): the
markup MkDocs, Pandoc and kramdown read as a heading's anchor and classes."""


def name_length(texts: Sequence[str], words: Collection[str]) -> int:
    """The length of a name field (a heading; tags and a title) for ranking, given the distinct
    ``words`` of its ``texts``: those words again once a trailing attribute block is dropped
    from the last text. The block's words still match (the protocol's tokens are the whole
    text's); it is markup, so it adds no length."""
    if not texts or "}" not in texts[-1]:
        return len(words)
    return len(word_set([*texts[:-1], _ATTRIBUTES.sub("", texts[-1])]))


def query_terms(query: str) -> list[str]:
    """Body-mode query terms (§5.7): each field trimmed and lower-cased; over 32 bytes it is
    replaced by its word runs; kept at >= 2 runes; duplicates dropped, first seen order kept."""
    out: dict[str, None] = {}
    for field in fields(query):
        term = lower(_TRIM.sub("", field))
        if _utf8_fits(term):
            if len(term) >= 2:
                out[term] = None
        else:
            out.update(dict.fromkeys(run for run in _WORD_RUNS.findall(term) if _fits(run)))
    return list(out)


def identifier_words(terms: Sequence[str]) -> dict[str, list[str]]:
    """The snake_case identifiers among query ``terms`` (SPEC §5.7, body mode: order), each
    with its words. An identifier is a term of word characters with two or more runs between
    underscores; its words are those runs, kept at >= 2 runes, that are not query terms
    themselves (an identifier without any is left out). ``_`` is a word character, so the
    index keeps such an identifier one word; a ``-`` or ``.`` compound is split by the index
    already (its runs are words wherever it is), so it is none here."""
    out: dict[str, list[str]] = {}
    for term in terms:
        runs = [run for run in term.split("_") if run]
        if len(runs) < 2 or not _WORD_RUNS.fullmatch(term):
            continue
        words = [run for run in dict.fromkeys(runs) if len(run) >= 2 and run not in terms]
        if words:
            out[term] = words
    return out


def catalog_terms(query: str) -> list[str]:
    """Catalog-mode terms (§5.7): the distinct whitespace fields of the lower-cased query."""
    return list(dict.fromkeys(fields(lower(query))))


# --- stripMarkup -------------------------------------------------------------------------------

_TABLE_SEPARATOR = re.compile(r"\|?[\t\n\f\r |:-]+\|?")
_QUOTE = re.compile(r"(?:>[\t\n\f\r ]?)+")
_LIST = re.compile(r"(?:[-*+]|[0-9]+[.)])[\t\n\f\r ]+(?:\[[ xX]\][\t\n\f\r ]+)?")
_LINE_RULES = frozenset("-*+0123456789>|=~`")
"""First characters of the lines the line-start rules (fences, setext underlines, table
separators, quotes, list markers) can apply to."""
# possessive runs: no backtracking into a run can match, as each run's class excludes the
# character after it, so they change no match and save the retries
_IMAGES = re.compile(r"!\[([^\]\n]*+)\]\([^)\n]*+\)")
_LINKS = re.compile(r"\[([^\]\n]*+)\]\([^)\n]*+\)")
_HTML_TAGS = re.compile(r"</?[A-Za-z][^>\n]*+>")
_INLINE_MARKS = re.compile(r"[`*|]|~~")
_TEXT = methodcaller("group", 1)
"""A link's or image's text, as a C-level callable (a template is expanded in Python)."""


def strip_markup(raw: str) -> str:
    """Markdown reduced to prose lines (SPEC §5.7, "Body mode: what is indexed").

    The reference applies every rule line by line. Here the line-start rules run per line, and
    the rules that work inside a line (links, tags, inline marks) run once over the kept lines,
    with patterns that never cross a line break: same order, same result, most of the work in C.
    Text holding Go non-spaces that Python calls spaces (``\\x1c``-``\\x1f``) takes the literal
    per-line path.
    """
    if has_info_separators(raw):
        return "\n".join(filter(None, map(_strip_line, raw.split("\n"))))
    text = _uncollapsed(raw)
    return "\n".join(filter(None, [" ".join(line.split()) for line in text.split("\n")]))


def prose_words(raw: str) -> list[str] | None:
    """``text_words(strip_markup(raw))``, or None where the stripped text is empty: what the
    body index reads of a section's text. Collapsing each line's whitespace and dropping empty
    lines, stripMarkup's last step, changes no word, so it is skipped here."""
    if has_info_separators(raw):
        stripped = strip_markup(raw)
        return text_words(stripped) if stripped else None
    text = _uncollapsed(raw)
    return text_words(text) if text and not text.isspace() else None


def _uncollapsed(raw: str) -> str:
    """stripMarkup of text free of info separators but its last step: each line's whitespace
    is still as written, and lines the rules emptied are still there."""
    kept = []
    for line in raw.split("\n"):
        line = line.strip()
        if line and (line[0] not in _LINE_RULES or (line := _line_start(line))):
            kept.append(line)
    return _inline("\n".join(kept))


def loose_text(raw: str) -> str:
    """``raw`` lower-cased with only stripMarkup's in-line rules applied (links and images to
    their text, tags removed, inline marks): line for line, every whitespace-free substring of a
    line's stripped form is a substring of the same line here (the other rules only drop lines,
    cut a prefix or collapse whitespace). A cheap bound on what a stripped line can hold."""
    return lower(_inline(raw))


def strip_line(line: str) -> str:
    """One raw line through every rule of stripMarkup ("" when the line is dropped)."""
    return _strip_line(line)


def _strip_line(line: str) -> str:
    """One line through the rules of stripMarkup, literally ("" when the line is dropped)."""
    line = trim_space(line)
    return " ".join(fields(_inline(_line_start(line)))) if line else ""


def _line_start(line: str) -> str:
    """The line-start rules on a non-empty trimmed line: "" when the line is dropped."""
    first = line[0]
    if first in "`~":
        if line.startswith(("```", "~~~")):
            return ""
    elif first in "=-":
        if not line.strip(first):
            return ""
    elif first == "|":
        if _TABLE_SEPARATOR.fullmatch(line):
            return ""
    elif first == ">":
        line = line[_QUOTE.match(line).end() :]  # type: ignore[union-attr]
        if not line:
            return ""
        first = line[0]
    if first in "-*+0123456789" and (marker := _LIST.match(line)) is not None:
        line = line[marker.end() :]
    return line


def _inline(text: str) -> str:
    """The rules inside a line: images and links to their text, tags removed, then `` ` ``,
    ``*`` and ``~~`` deleted and ``|`` made a space in one left-to-right pass (Go's Replacer)."""
    if "](" in text:
        text = _LINKS.sub(_TEXT, _IMAGES.sub(_TEXT, text))
    if "<" in text:
        text = _HTML_TAGS.sub("", text)
    if "~" in text:
        return _INLINE_MARKS.sub(_inline_mark, text)
    return text.replace("`", "").replace("*", "").replace("|", " ")


def _inline_mark(match: re.Match[str]) -> str:
    return " " if match.group() == "|" else ""


# --- long lines in pieces ----------------------------------------------------------------------

_CUT_AT = re.compile(
    b" (?=[" + re.escape(bytes(c for c in range(0x21, 0x7F) if chr(c) not in _LINE_RULES)) + b"])"
)
"""A space before a printable ASCII character that no line-start rule looks at."""
_LINE_HEAD = re.compile(rb"[ \t]*([!-~])")
_IMAGES_BYTES = re.compile(_IMAGES.pattern.encode())
_LINKS_BYTES = re.compile(_LINKS.pattern.encode())
_CUT_TRIES = 8
_CUT_STEP = 1024


def line_cut(data: bytes, start: int, low: int, high: int, continued: bool = False) -> int:
    """Where the UTF-8 line of ``data`` that runs from ``start`` past ``high`` may be cut, at
    or after ``low`` and before ``high``, so that its two parts' ``prose_words`` are its own
    words in order (-1 where no such place is found): a line of hundreds of kilobytes is then
    stripped and split a piece at a time. ``start`` is where the line starts, or (``continued``)
    an earlier cut of it.

    A cut goes after a space (no field, no ``~~`` is split) before a printable ASCII character
    that is no line-start rule's mark (``_CUT_AT``: the second part starts with none), in a
    line whose own first mark is none (the line-start rules then leave it whole), where no
    link, image or tag the in-line rules replace can span it: after the part's last ``[``
    there is a ``]``, after its last ``](`` a ``)`` (before and after images become their
    text), and after its last ``<`` a ``>`` (once links did). Those rules never cross a line,
    and a match that spans a cut but starts before an earlier one would span that one too, so
    the part since ``start`` decides."""
    if not continued:
        head = _LINE_HEAD.match(data, start)
        if head is None or head.group(1).decode() in _LINE_RULES:
            return -1
    tried = 0
    for found in _CUT_AT.finditer(data, low, high):
        at = found.end()
        if tried and at < low + tried * _CUT_STEP:
            continue
        if _cuts(data[start:at]):
            return at
        tried += 1
        if tried == _CUT_TRIES:
            break
    return -1


def _cuts(part: bytes) -> bool:
    """Whether no in-line rule's match can span the end of ``part`` (``line_cut``)."""
    if not _closed(part):
        return False
    if b"](" in part:
        part = _IMAGES_BYTES.sub(_TEXT, part)
        if not _closed(part):
            return False
        part = _LINKS_BYTES.sub(_TEXT, part)
    tag = part.rfind(b"<")
    return tag < 0 or part.find(b">", tag) >= 0


def _closed(part: bytes) -> bool:
    """No link or image can span the end of ``part``: its last ``[`` and its last ``](`` are
    each closed (by a ``]``, a ``)``) within it."""
    bracket = part.rfind(b"[")
    if bracket >= 0 and part.find(b"]", bracket) < 0:
        return False
    target = part.rfind(b"](")
    return target < 0 or part.find(b")", target + 2) >= 0
