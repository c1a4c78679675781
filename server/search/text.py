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
import string
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from itertools import chain, compress, filterfalse, repeat

from markproto.protocol.gotext import fields, has_info_separators, lower, trim_space
from markproto.protocol.limits import TOKEN_MAX_BYTES

__all__ = [
    "catalog_terms",
    "field_words",
    "identifier_words",
    "line_cut",
    "loose_text",
    "name_length",
    "prose_counts",
    "query_terms",
    "strip_line",
    "strip_markup",
    "text_counts",
    "text_words",
    "word_set",
]


# --- words -------------------------------------------------------------------------------------

_WORD_RUNS = re.compile(r"\w+")
_TRIM = re.compile(r"\A\W+|\W+\Z")
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
    """Every word of every field of ``text``, with repeats (their count is the section length),
    each word's repeats together: ``text_counts`` spelt out."""
    return list(text_counts(text).elements())


def text_counts(text: str) -> Counter[str]:
    """Each word of ``text`` with its frequency (``field_words`` of each field, counted), words
    first seen in the order of: the fields of letters and digits alone, then the word runs of
    the other fields, then those fields' cores (the order a run of postings numbers its terms
    in; text with info separators counts field by field)."""
    if has_info_separators(text):
        return Counter([word for field in fields(text) for word in field_words(field)])
    return _counts(Counter(lower(text).split()), not text.isascii())


_MARKS = "".join(c for c in map(chr, range(0x80)) if not (c.isalnum() or c == "_" or c.isspace()))
"""The ASCII runes that are neither word runes nor whitespace."""
_MARKS_TO_SPACES = bytes.maketrans(_MARKS.encode(), b" " * len(_MARKS))
_HAS_WORD_RUNE = re.compile(r"\w").search


def _counts(counts: Counter[str], wide: bool) -> Counter[str]:
    """``text_counts`` of the lowered fields ``counts`` counts (``wide``: they may hold
    non-ASCII). The caller counts them: a list given here would be held until this returns.

    All fields are counted in C; the fields that are not letters and digits alone (``isalnum``,
    tested once a distinct field) are taken out again, each with its count, and give their
    words from one byte translation of the ASCII ones, marks to spaces: split, their word runs;
    split at the fields, a field whose translation has a space inside has a core. A field seen
    again adds its words again, after every field's first words (the order of the words' first
    sight is kept). A non-ASCII field with no word rune (an emoji, a dash) has no word; another
    takes the regex scans for all. Words off the length limits are dropped at the end, from the
    distinct words.
    """
    odd = list(filterfalse(str.isalnum, counts))
    if not odd:
        return _trimmed(counts, wide)
    often = list(map(counts.pop, odd))
    if wide and not all(map(str.isascii, odd)):
        if any(map(_HAS_WORD_RUNE, filterfalse(str.isascii, odd))):
            joined = " ".join(chain.from_iterable(map(repeat, odd, often)))
            counts.update(_WORD_RUNS.findall(joined))
            counts.update(_COMPOUNDS.findall(joined))
            return _trimmed(counts, wide)
        narrow = list(map(str.isascii, odd))
        odd, often = list(compress(odd, narrow)), list(compress(often, narrow))
        if not odd:
            return _trimmed(counts, wide)
    spaced = "\n".join(odd).encode().translate(_MARKS_TO_SPACES).decode()
    counts.update(spaced.split())
    lines = spaced.split("\n")
    del spaced
    if max(often) > 1:
        for line, times in zip(lines, often, strict=True):
            if times > 1:
                for run in line.split():
                    counts[run] += times - 1
    inner = list(map(str.count, map(str.strip, lines), repeat(" ")))
    for field, times in compress(zip(odd, often, strict=True), inner):
        counts[field.strip(_MARKS)] += times
    return _trimmed(counts, wide)


def _trimmed(counts: Counter[str], wide: bool) -> Counter[str]:
    """``counts`` without the words of one rune or over ``TOKEN_MAX_BYTES`` bytes."""
    drop = [word for word in counts if not 1 < len(word) <= TOKEN_MAX_BYTES]
    if wide:
        drop += [
            word
            for word in filterfalse(str.isascii, counts)
            if _SURELY_FITS < len(word) <= TOKEN_MAX_BYTES and not _utf8_fits(word)
        ]
    for word in drop:
        del counts[word]
    return counts


def word_set(texts: Iterable[str]) -> set[str]:
    """The distinct words of several texts (a heading trail; tags and a title)."""
    out: set[str] = set()
    for text in texts:
        out.update(text_counts(text))
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
_WORDS_RULE_LINES = re.compile(r"\n[^\S\n]*+([`~>0-9][^\n]*+)")
"""A line the line-start rules may change the words of: a fence, a quote, a numbered item
(its stripped form starts with one of these), from the line break before it; group 1 is the
line from that character. The other rules drop or cut only runs of ``-*+|:=``, spaces and a
``[ ]``, ``[x]`` or ``[X]`` box followed by a space (a setext underline, a table separator, a
bullet), which hold no word of two runes, start no link nor tag, and leave no ``~`` beside
another."""
_PROSE_BYTES = bytes.maketrans(
    string.ascii_uppercase.encode() + b"|", string.ascii_lowercase.encode() + b" "
)
"""ASCII lowered, ``|`` made a space (and `` ` `` and ``*`` deleted): the inline marks of
text without ``~``."""


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


def prose_counts(raw: str) -> Counter[str] | None:
    """``text_counts(strip_markup(raw))``, or None where the stripped text is empty: what the
    body index reads of a section's text. Collapsing each line's whitespace and dropping empty
    lines, stripMarkup's last step, changes no word, so it is skipped here."""
    if has_info_separators(raw):
        stripped = strip_markup(raw)
        return text_counts(stripped) if stripped else None
    # only the lines a line-start rule may change the words of are handled one by one (a few
    # in most sections); every other line stays unstripped, and emptied lines stay as line
    # breaks: no in-line rule's match starts or ends with whitespace, so the words are the same
    text = _spans(_WORDS_RULE_LINES.sub(_rule_line, "\n" + raw))
    wide = not text.isascii()
    if wide or "~" in text:
        text = lower(_marks(text))
    else:  # lowered, inline marks applied, in one pass over bytes
        text = text.encode().translate(_PROSE_BYTES, b"`*").decode()
    if text.isspace():
        return None
    fields = Counter(text.split())  # the list of fields is let go before the words are made
    del text  # not held beside the counts
    counts = _counts(fields, wide)
    if not counts:  # whether the stripped text is empty needs every rule (``---``, ``- *``)
        exact = _uncollapsed(raw)
        return None if not exact or exact.isspace() else counts
    return counts


def _rule_line(match: re.Match[str]) -> str:
    return "\n" + _line_start(match[1].rstrip())


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
    """The rules inside a line: images and links to their text, tags removed, then the marks."""
    return _marks(_spans(text))


def _spans(text: str) -> str:
    """Images and links to their text (a pattern's split holds its group between the parts it
    cuts: joined, each match is its text, in C), then tags removed."""
    if "](" in text:
        text = "".join(_LINKS.split("".join(_IMAGES.split(text))))
    if "<" in text:
        text = _HTML_TAGS.sub("", text)
    return text


def _marks(text: str) -> str:
    """`` ` ``, ``*`` and ``~~`` deleted and ``|`` made a space in one left-to-right pass (Go's
    Replacer)."""
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
        part = b"".join(_IMAGES_BYTES.split(part))
        if not _closed(part):
            return False
        part = b"".join(_LINKS_BYTES.split(part))
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
