"""The one section rule (docs/SPEC.md §9): headings, anchors, subtree sections, outlines and
own-text sections.

Client (``url#anchor`` fetch, outlines) and server (the LOOKUP body index) must cut a document the
same way, so both call this module. ``mdparse`` finds the headings; this module cuts the
frontmatter off, gives each heading its unique anchor and its subtree, and matches anchors.

Offsets are ``str`` indices into the body as given (BOM, CRLF and frontmatter included), so they
cut exactly the slices the reference's byte offsets cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from markproto.protocol.gotext import SPACE, equal_fold, lower, trim_space
from markproto.protocol.limits import MAX_FRONTMATTER
from markproto.protocol.mdparse import ParsedHeading, find_headings, first_paragraph

__all__ = [
    "Heading",
    "OwnSection",
    "find_anchor",
    "heading_id",
    "headings",
    "iter_own_sections",
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


def slug(text: str) -> str:
    """The reference's anchor slug (§9): runes lowered one by one, letters, numbers, ``_`` and
    ``-`` kept, each space rune turned into ``-`` (runs not collapsed), everything else dropped."""
    return _SLUG_DROPS.sub("", lower(text)).translate(_SPACE_TO_DASH)


def _parse(body: str | bytes) -> tuple[Heading, ...]:
    """The one parse everything here shares: anchors deduplicated in document order, each
    subtree ending at the next heading of a level <= its. Offsets index ``body``: ``str``
    offsets, or byte offsets of UTF-8 bytes."""
    content_start = _content_start(body)
    found = _find_headings(body, content_start)
    stops: list[int | None] = [None] * len(found)  # the heading that ends each subtree
    open_: list[int] = []
    for index, heading in enumerate(found):
        while open_ and found[open_[-1]].level >= heading.level:
            stops[open_.pop()] = index
        open_.append(index)
    newline = b"\n" if isinstance(body, bytes) else "\n"
    unterminated = not body.endswith(newline)  # type: ignore[arg-type]
    used: set[str] = set()
    suffixes: dict[str, int] = {}  # the last suffix tried per slug: those below are all taken
    result = []
    for heading, stop in zip(found, stops, strict=True):
        anchor = base = slug(heading.text)
        if anchor in used:
            suffix = suffixes.get(base, 0)
            while anchor in used:
                suffix += 1
                anchor = f"{base}-{suffix}"
            suffixes[base] = suffix
        used.add(anchor)
        if stop is None:
            end = len(body)
            count = body.count(newline, content_start + heading.start) + unterminated  # type: ignore[arg-type]
        else:
            end, count = content_start + found[stop].start, found[stop].line - heading.line
        start, line_end = content_start + heading.start, content_start + heading.line_end
        result.append(Heading(heading.level, heading.text, anchor, start, end, count, line_end))
    return tuple(result)


def _find_headings(body: str | bytes, content_start: int) -> list[ParsedHeading]:
    """``find_headings`` of the content, without copying it when it starts on a line."""
    if content_start and body[content_start - 1 : content_start] not in ("\n", b"\n"):
        return find_headings(body[content_start:])  # past a BOM alone
    return find_headings(body, start=content_start)


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
    content_start = _content_start(body)
    found = _parse(body)

    def text(start: int, stop: int) -> str:
        own = body[start:stop]
        return own.decode("utf-8", "replace") if isinstance(own, bytes) else own

    stop = found[0].start if found else len(body)
    yield content_start, stop, OwnSection("", "", 0, (), text(content_start, stop))
    stack: list[Heading] = []
    for index, heading in enumerate(found):
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        stack.append(heading)
        stop = found[index + 1].start if index + 1 < len(found) else len(body)
        trail = tuple(h.text for h in stack)
        own = OwnSection(
            heading.anchor, heading.text, heading.level, trail, text(heading.line_end, stop)
        )
        yield heading.line_end, stop, own
