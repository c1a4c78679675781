"""The one section rule (docs/SPEC.md §9): headings, anchors, subtree sections, outlines and
own-text sections.

Client (``url#anchor`` fetch, outlines) and server (the LOOKUP body index) must cut a document the
same way, so both call this module. ``mdparse`` finds the headings; this module cuts the
frontmatter off, gives each heading its unique anchor and its subtree, and matches anchors.

Offsets are ``str`` indices into the body as given (BOM, CRLF and frontmatter included), so they
cut exactly the slices the reference's byte offsets cut.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from markproto.protocol.gotext import SPACE, equal_fold, lower, trim_space
from markproto.protocol.limits import MAX_FRONTMATTER

if TYPE_CHECKING:
    from markproto.protocol.mdparse import ParsedHeading

__all__ = [
    "Heading",
    "OwnSection",
    "OwnSpan",
    "anchor",
    "anchor_suffixes",
    "find_anchor",
    "heading_id",
    "headings",
    "iter_own_sections",
    "iter_own_spans",
    "opening_paragraph",
    "outline",
    "own_sections",
    "section",
    "slug",
    "split_frontmatter",
]


@dataclass(frozen=True, slots=True)
class Heading:
    """One heading: ``[start, end)`` is its subtree, ``[start, line_end)`` its first line."""

    level: int
    text: str
    anchor: str
    start: int
    end: int
    lines: int
    line_end: int


@dataclass(frozen=True, slots=True)
class OwnSection:
    """What the body index reads: a heading's own raw text (up to the next heading of any level)
    and its trail of ancestor heading texts. The preamble has anchor "", heading "" and level 0."""

    anchor: str
    heading: str
    level: int
    trail: tuple[str, ...]
    text: str


class OwnSpan(NamedTuple):
    """A section as ``iter_own_spans`` streams it: its heading's level and text (the preamble's
    are 0 and ""), its trail, and where its own text starts and stops in the body. A named
    tuple: made in half a frozen dataclass's time, one per section."""

    level: int
    heading: str
    trail: tuple[str, ...]
    start: int
    stop: int


# --- frontmatter ------------------------------------------------------------------------------

_FM_OPEN = re.compile(r"\ufeff?---[ \t]*\r?\n")
_FM_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.MULTILINE)
_BOM = "\ufeff"
_FM_OPEN_BYTES = re.compile(rb"(?:\xef\xbb\xbf)?---[ \t]*\r?\n")  # the same, in UTF-8
_FM_CLOSE_BYTES = re.compile(_FM_CLOSE.pattern.encode(), re.MULTILINE)


def split_frontmatter(body: str | bytes) -> tuple[str | None, int]:
    """A document's own YAML frontmatter and the offset where its content starts.

    Frontmatter is metadata, not content: a first line ``---`` (after an optional BOM) and the
    first later line that is ``---`` or ``...`` (both may end in spaces or tabs), at most
    ``MAX_FRONTMATTER`` characters of YAML apart. The YAML text comes back exactly, line endings
    kept, and the content starts after the closing line. Without such a block the answer is
    ``(None, 0)``, or ``(None, 1)`` past a BOM. For UTF-8 bytes the offset counts bytes and the
    YAML is decoded (invalid sequences as U+FFFD).
    """
    span = _frontmatter(body)
    if span is None:
        return None, _content_start(body)
    block = body[span[0] : span[1]]
    return block.decode("utf-8", "replace") if isinstance(block, bytes) else block, span[2]


def _frontmatter(body: str | bytes) -> tuple[int, int, int] | None:
    """Where ``split_frontmatter``'s block starts and ends and the content starts; for UTF-8
    bytes, in bytes (the YAML's size is still counted in characters)."""
    if isinstance(body, bytes):
        opening = _FM_OPEN_BYTES.match(body)
        closing = opening and _FM_CLOSE_BYTES.search(body, opening.end())
    else:
        opening = _FM_OPEN.match(body)  # type: ignore[assignment]
        closing = opening and _FM_CLOSE.search(body, opening.end())  # type: ignore[assignment]
    if not opening or not closing:
        return None
    start, end = opening.end(), closing.start()
    if (
        end - start > MAX_FRONTMATTER
        and (
            isinstance(body, str)
            or end - start > 4 * MAX_FRONTMATTER  # a character is at most four bytes
            or len(body[start:end].decode("utf-8", "replace")) > MAX_FRONTMATTER
        )
    ):
        return None
    return start, end, closing.end()


def _content_start(body: str | bytes) -> int:
    span = _frontmatter(body)
    if span is not None:
        return span[2]
    if isinstance(body, bytes):
        return 3 if body.startswith(_BOM.encode()) else 0
    return 1 if body.startswith(_BOM) else 0


# --- slugs and anchors ------------------------------------------------------------------------

_SLUG_DROPS = re.compile(rf"[^\w\-{re.escape(SPACE)}]")
"""What a slug drops: all but letters, numbers, ``_``, ``-`` and space runes (``\\w`` is Go's
word rune)."""
_SPACE_TO_DASH = str.maketrans(dict.fromkeys(SPACE, "-"))
_ASCII_SLUG = bytes.maketrans(
    bytes(range(65, 91)) + SPACE[:6].encode(), bytes(range(97, 123)) + b"-" * 6
)
_ASCII_SLUG_DROPS = bytes(c for c in range(128) if _SLUG_DROPS.fullmatch(chr(c)))


def slug(text: str) -> str:
    """The reference's anchor slug (§9): runes lowered one by one, letters, numbers, ``_`` and
    ``-`` kept, each space rune turned into ``-`` (runs not collapsed), everything else dropped.
    An ASCII heading (most are) takes one ``bytes.translate``: the same rule as a table."""
    if text.isascii():
        return text.encode().translate(_ASCII_SLUG, _ASCII_SLUG_DROPS).decode()
    return _SLUG_DROPS.sub("", lower(text)).translate(_SPACE_TO_DASH)


def anchor(text: str, suffix: int) -> str:
    """The anchor of a heading whose text is ``text`` and whose dedupe suffix is ``suffix``."""
    base = slug(text)
    return f"{base}-{suffix}" if suffix else base


_SUFFIXED = re.compile(r"(.*)-([0-9]+)", re.DOTALL)


def anchor_suffixes(texts: Sequence[str]) -> Iterator[int]:
    """The dedupe suffix of each heading's anchor, in document order (§9): a slug already used
    by an earlier anchor gets ``-1``, ``-2``, ... (the first one free, counting on from the last
    one its slug took).

    Exact, and small on documents of many unique headings: a first pass over the slugs marks in
    a bit set (16 bits a heading) each slug seen before, so the ones that may repeat are known
    (a few per cent more than those that do); only the anchors that can collide are kept while
    the suffixes are given: those slugs, and slugs that a suffix could make (``x-1`` of such an
    ``x``, or of such an ``x-1``). Every other slug is unique and no suffix makes it, so it is
    its own anchor. ``texts`` is read twice.

    Of the anchors given, only those without a suffix are kept as strings: a slug's suffixed
    ones are known from the last suffix it took, as every suffix below that one is taken (a
    document of 20,000 headings of 40 texts held 20,000 anchors, 12 times its size).
    """
    bits = max(64, 16 * len(texts))
    seen = bytearray((bits + 7) >> 3)
    repeats: set[str] = set()
    for text in texts:
        base = slug(text)
        h = hash(base)
        one, two = h % bits, (h >> 32) % bits
        if seen[one >> 3] >> (one & 7) & 1 and seen[two >> 3] >> (two & 7) & 1:
            repeats.add(base)
        seen[one >> 3] |= 1 << (one & 7)
        seen[two >> 3] |= 1 << (two & 7)
    del seen
    plain: set[str] = set()
    """The anchors given without a suffix."""
    suffixes: dict[str, int] = {}
    """The last suffix each slug took: every anchor ``slug-n`` to it is taken."""
    for text in texts:
        base = slug(text)
        if not _may_collide(base, repeats):
            yield 0
            continue
        suffix = 0
        if base in plain or _suffixed_taken(base, suffixes):
            suffix = suffixes.get(base, 0) + 1
            while f"{base}-{suffix}" in plain:
                suffix += 1
            suffixes[base] = suffix
        else:
            plain.add(base)
        yield suffix


def _suffixed_taken(anchor: str, suffixes: dict[str, int]) -> bool:
    """Whether ``anchor`` is one a slug's suffix made (``x-3``, with ``x`` past 3 already)."""
    match = _SUFFIXED.fullmatch(anchor)
    if match is None:
        return False
    number = match.group(2)
    return number[0] != "0" and 0 < int(number) <= suffixes.get(match.group(1), 0)


def _may_collide(base: str, repeats: set[str]) -> bool:
    """Whether ``base`` may repeat, or a suffix could make it (it is a repeating slug with
    suffixes, or such a slug's suffixed anchor with one more)."""
    while True:
        if base in repeats:
            return True
        match = _SUFFIXED.fullmatch(base)
        if match is None:
            return False
        base = match.group(1)


def _parse(body: str | bytes) -> tuple[Heading, ...]:
    """The one parse everything here shares: anchors deduplicated in document order, each
    subtree ending at the next heading of a level <= its. Offsets index ``body``: ``str``
    offsets, or byte offsets of UTF-8 bytes."""
    content_start = _content_start(body)
    found = list(_find_headings(body, content_start))
    stops: list[int | None] = [None] * len(found)  # the heading that ends each subtree
    open_: list[int] = []
    for index, heading in enumerate(found):
        while open_ and found[open_[-1]].level >= heading.level:
            stops[open_.pop()] = index
        open_.append(index)
    newline = b"\n" if isinstance(body, bytes) else "\n"
    unterminated = not body.endswith(newline)  # type: ignore[arg-type]
    suffixes = anchor_suffixes([heading.text for heading in found])
    result = []
    for heading, stop, suffix in zip(found, stops, suffixes, strict=True):
        if stop is None:
            end = len(body)
            count = body.count(newline, content_start + heading.start) + unterminated  # type: ignore[arg-type]
        else:
            end, count = content_start + found[stop].start, found[stop].line - heading.line
        start, line_end = content_start + heading.start, content_start + heading.line_end
        result.append(
            Heading(
                heading.level,
                heading.text,
                anchor(heading.text, suffix),
                start,
                end,
                count,
                line_end,
            )
        )
    return tuple(result)


def _find_headings(body: str | bytes, content_start: int) -> Iterator[ParsedHeading]:
    """``iter_headings`` of the content, without copying it when it starts on a line.

    ``mdparse`` (and mistletoe, a slow import) is loaded here, by the first body parsed: a server
    that has parsed none, or reads frontmatter only, never loads it."""
    from markproto.protocol.mdparse import iter_headings

    if content_start and body[content_start - 1 : content_start] not in ("\n", b"\n"):
        return iter_headings(body[content_start:])  # past a BOM alone
    return iter_headings(body, start=content_start)


_headings = lru_cache(maxsize=8)(_parse)
"""``headings``, ``section`` and ``outline`` share a parse (a client outlines, then fetches a
section). The body index parses each body once and does not keep it here."""


# --- the rule ---------------------------------------------------------------------------------


def headings(body: str) -> list[Heading]:
    """Every heading goldmark finds, in document order, with unique anchors (§9)."""
    return list(_headings(body))


def section(body: str, anchor: str) -> str | None:
    """The subtree of the heading an anchor names (§9.3, ``find_anchor``), or ``None``."""
    found = _headings(body)
    match = find_anchor(anchor, [h.anchor for h in found], [h.text for h in found])
    return None if match is None else body[found[match].start : found[match].end]


def find_anchor(wanted: str, anchors: Sequence[str], texts: Sequence[str]) -> int | None:
    """Which heading an anchor names (§9.3), given each heading's anchor and text: the first
    whose anchor equals it case-insensitively, else the first whose anchor is its slug (raw
    heading text), else the first whose own id (``heading_id``) equals it case-insensitively."""
    wanted = trim_space(wanted).removeprefix("#")
    for index, anchor in enumerate(anchors):
        if equal_fold(anchor, wanted):
            return index
    slugged = slug(wanted)
    for index, anchor in enumerate(anchors):
        if anchor == slugged:
            return index
    for index, text in enumerate(texts):
        if "{" in text and equal_fold(heading_id(text), wanted):
            return index
    return None


_HEADING_ID = re.compile(r"\{[ \t]*#([^\s{}#]+)(?:[ \t][^{}]*)?\}[ \t]*\Z")


def heading_id(text: str) -> str:
    """The id a heading gives itself with an attribute list at its end, as MkDocs and Pandoc
    write one (``## Install { #install }``), or ""."""
    found = _HEADING_ID.search(text)
    return found.group(1) if found is not None else ""


def outline(body: str) -> str:
    """One line per heading, ``"  " * (level - 1) + "- <text> (#<anchor>, <lines> lines)"``."""
    return "".join(
        f"{'  ' * (h.level - 1)}- {h.text} (#{h.anchor}, {h.lines} lines)\n"
        for h in _headings(body)
    )


def opening_paragraph(body: str) -> str:
    """The first top-level paragraph's raw source, trimmed, or ""; frontmatter is not one."""
    _, content_start = split_frontmatter(body)
    content = body[content_start:]
    from markproto.protocol.mdtokens import first_paragraph

    span = first_paragraph(content)
    return "" if span is None else trim_space(content[span[0] : span[1]])


def own_sections(body: str) -> list[OwnSection]:
    """The body index's sections (SPEC §9.4). The preamble always comes first, even when blank:
    the indexer drops it when its stripped text is empty. Then each heading's own text runs
    from the end of its first line to the next heading of any level; its trail is its ancestors'
    texts (pop while the top's level >= its level) and its own."""
    return [found for _, _, found in iter_own_sections(body)]


def iter_own_sections(body: str | bytes) -> Iterator[tuple[int, int, OwnSection]]:
    """``own_sections`` one at a time, each with where its own text starts and ends: a caller
    that handles one section at a time holds one section's text, not the whole body again. A
    body given as UTF-8 bytes is never decoded whole: offsets are byte offsets, and each
    section's text is decoded on its own (invalid sequences as U+FFFD)."""
    spans = list(iter_own_spans(body))
    suffixes = itertools.chain((0,), anchor_suffixes([span.heading for span in spans[1:]]))
    for index, (span, suffix) in enumerate(zip(spans, suffixes, strict=True)):
        own = body[span.start : span.stop]
        text = own.decode("utf-8", "replace") if isinstance(own, bytes) else own
        name = anchor(span.heading, suffix) if index else ""
        yield span.start, span.stop, OwnSection(name, span.heading, span.level, span.trail, text)


def iter_own_spans(body: str | bytes) -> Iterator[OwnSpan]:
    """The sections of ``own_sections`` without anchors or text, streamed from the parse: what a
    caller handling one section at a time needs, holding one piece of the parse, never a list
    of every heading. Offsets as ``iter_own_sections``'s."""
    content_start = _content_start(body)
    found = _find_headings(body, content_start)
    current = next(found, None)
    stop = content_start + current.start if current is not None else len(body)
    yield OwnSpan(0, "", (), content_start, stop)
    stack: list[tuple[int, str]] = []
    while current is not None:
        following = next(found, None)
        while stack and stack[-1][0] >= current.level:
            stack.pop()
        stack.append((current.level, current.text))
        stop = content_start + following.start if following is not None else len(body)
        # from a list: a generator's tuple is made 10 long and shrunk, so each span took a
        # new block and freed one into another length's free list (CPython keeps 2,000 a
        # length: 0.36x of a body of 20,000 headings of every level, held after the parse)
        trail = tuple([text for _, text in stack])
        yield OwnSpan(current.level, current.text, trail, content_start + current.line_end, stop)
        current = following
