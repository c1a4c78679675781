"""The CommonMark block parse under mdoutline: which headings goldmark finds, and their text.

The reference walks goldmark's CommonMark AST; we get the same headings from mistletoe's block
parser held to CommonMark (``mdtokens``). Only blocks are parsed; inline parsing runs on heading
contents alone, which keeps indexing fast. A piece whose headings can only be ATX lines at the
margin (most of real documents) is read by a line scan instead (``_scan``), which finds what
that parse finds (tests/protocol/test_mdparse_scan.py), and a heading whose inline syntax is
only code spans, simple emphasis or plain links gets its text without the inline parser
(``_quick_text``). This module never imports mistletoe itself: ``mdtokens`` (and mistletoe, a
slow import) is loaded by the first piece or heading text that needs it, so a typical docs
folder is read without it. Hostile input stays cheap and never raises: nesting deeper than
Python's stack yields no headings, and heading sources past the inline limits skip mistletoe's
quadratic inline parser.

Input is a document's content (frontmatter already cut off); offsets are ``str`` indices into it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from typing import Any, NamedTuple

__all__ = ["ParsedHeading", "find_headings", "iter_headings"]


class ParsedHeading(NamedTuple):
    """A heading as the parse finds it: its level, its text (what goldmark's ``ast.Text`` nodes
    hold), and the line its text starts on, number ``line`` (from 0) spanning ``[start, line_end)``
    of the content. A named tuple: made in half a frozen dataclass's time, one per heading."""

    level: int
    text: str
    line: int
    start: int
    line_end: int


# --- lines both readings share ----------------------------------------------------------------

ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+|$)")


def atx(line: str) -> tuple[int, str] | None:
    """An ATX heading line's level and inline source (``\n``-terminated line), or None: only
    spaces and tabs separate ``#``s from the text, and a closing ``#`` run counts only after a
    space or tab (``# foo#`` keeps ``foo#``), as CommonMark says."""
    match = ATX.match(line)
    if match is None:
        return None
    rest = line[match.end() :].rstrip("\n").rstrip(" \t")
    bare = rest.rstrip("#")
    if not bare or bare[-1] in " \t":
        rest = bare.rstrip(" \t")
    return len(match.group(1)), rest


HTML_OPEN = re.compile(r" {0,3}<")
RAW_HTML_OPEN = re.compile(r" {0,3}<(?:pre|script|style|textarea)(?:[ \t>]|$)", re.IGNORECASE)
_RAW_HTML_CLOSE = re.compile(r"</(?:pre|script|style|textarea)>", re.IGNORECASE)
RAW_HTML_END = "</>"
"""Stands for HTML block end condition 1: any of the four raw-text closing tags."""


def html_closed(end: str, line: str) -> bool:
    """Whether ``line`` holds an HTML block's end marker ``end``."""
    if end == RAW_HTML_END:
        return _RAW_HTML_CLOSE.search(line) is not None
    return end in line.casefold()


def lines_of(content: str | bytes) -> tuple[list[str], list[int]]:
    """The lines (split on ``\\n`` only, without it) and the offset of every line start, plus
    one past the end. Bytes are decoded line by line (an invalid sequence as U+FFFD, as decoding
    the whole would: a line break is never inside a sequence), so a whole decoded copy never
    exists; their offsets are byte offsets."""
    if isinstance(content, bytes):
        raw_bytes = content.split(b"\n")
        starts = [0, *accumulate(len(line) + 1 for line in raw_bytes)]
        if raw_bytes[-1] == b"":
            raw_bytes.pop()
        return [line.decode("utf-8", "replace") for line in raw_bytes], starts
    raw = content.split("\n")
    starts = [0, *accumulate(len(line) + 1 for line in raw)]
    if raw[-1] == "":
        raw.pop()
    return raw, starts


# --- heading text -----------------------------------------------------------------------------

_INLINE_SYNTAX = re.compile(r"[\\`*_\[\]<>&\n]")
"""Without any of these characters, a heading's source is its text."""
_INLINE_MAX = 1024
_INLINE_BUDGET = 32 * 1024
"""mistletoe's inline parser is quadratic on crafted input (``[a](`` repeated): heading sources
longer than ``_INLINE_MAX``, or past ``_INLINE_BUDGET`` characters in one document, get the
linear ``_rough_text`` instead. Real headings are far shorter; long ones are paragraphs that a
``---`` turned into setext headings by accident."""
_ESCAPED = re.compile(r"\\([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])")


_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
"""mistletoe's code span (``core_tokens.code_pattern``) where no backslash can precede one."""
_NOT_QUICK = re.compile(r"[\\\n]|&[#A-Za-z0-9]|!\[")
"""The inline syntax ``_quick_text`` leaves to mistletoe: escapes, line breaks, entities (a
``&`` before anything else is literal), images."""
_QUICK_TAG = re.compile(r"</?[a-z][a-z0-9]*>|<[a-z][a-z0-9]*(?: [a-z]+=\"[^\"<>`*_\[\]&\\\n]*\")+>")
"""A plain HTML tag: an open tag with double-quoted attributes, or a closing one."""
_OPENS = re.compile(r"<(?:[A-Za-z/!?]|[^\s<>]*>)")
"""A ``<`` that may open a tag or an autolink (any other is literal, and so is any ``>``)."""
_LINK_TEXT = r"[^\s\[\]()`*_&!<>](?:[^\[\]()`*_&!<>\n]*[^\s\[\]()`*_&!<>])?"
_QUICK_LINK = re.compile(rf"\[({_LINK_TEXT})\]\([A-Za-z0-9/:.#?=%~+\-@]+\)")
"""An inline link of plain text (no space at either end) to a plain destination: its text."""
_RUN = re.compile(r"\*+|_+")
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_PUNCTUATION = frozenset("\"#$%'(),-./:;=?@^{|}~+")
"""ASCII punctuation that is no inline syntax here (beside a run: ``**FastAPI**'s``)."""


def _quick_text(source: str) -> str | None:
    """The text of a heading source whose only inline syntax is code spans, simple emphasis,
    plain inline links and plain HTML tags, as mistletoe reads it (most headings with syntax:
    ``Use `foo```, ``The **FastAPI** app``, ``[Flask](https://flask.example)``), without its
    parser; None for any other source.

    The code spans are the same matches mistletoe finds left to right (no backslash can
    precede one); a span's text loses one space each side when both have one and it is not all
    spaces; an unmatched backtick run stays literal. Outside spans, tags (dropped) are read
    only where no ``*``, ``_``, ``[`` or ``]`` is, links only where no ``*`` or ``_`` is (a
    valid inline link is one whatever is defined), and emphasis only
    where each ``*`` or ``_`` run is literal by CommonMark's flanking rules (``_`` inside a
    word, a run with a space or an end on both sides) or is an opener (a space, the start or
    punctuation before it, an ASCII letter or digit after) closed by the next such run, of the
    same characters (1 or 2), with a letter or digit before and a space, the end or
    punctuation after: none can both open and close, so these pairs are the ones the delimiter
    algorithm makes, and the text is the source without their runs."""
    if _NOT_QUICK.search(source) is not None:
        return None
    parts = _CODE_SPAN.split(source)
    """Text outside spans, then each span's backticks, content and the text after it."""
    for at in range(2, len(parts), 3):
        code = parts[at]
        if code[:1] == " " == code[-1:] and not code.isspace():
            parts[at] = code[1:-1]
        parts[at - 1] = ""
    last = len(parts) - 1
    for at in range(0, len(parts), 3):
        part = parts[at]
        emphasis = "*" in part or "_" in part
        brackets = "[" in part or "]" in part
        if "<" in part:
            if emphasis:
                return None
            bare = _QUICK_TAG.sub("", part)
            if _OPENS.search(bare) or (brackets and bare != part):
                return None
            part = bare
        if brackets:
            if emphasis or "!" in source:  # mistletoe takes ``!`c`[a](b)`` for no link
                return None
            part = _QUICK_LINK.sub(r"\1", part)
            if "[" in part or "]" in part:
                return None
        elif emphasis:
            read = _emphasis(part, at == 0, at == last)
            if read is None:
                return None
            part = read
        parts[at] = part
    return "".join(parts)


def _emphasis(part: str, first: bool, last: bool) -> str | None:
    """``part`` (text outside code spans, at the source's start or end where ``first`` or
    ``last``) without its emphasis runs, where ``_quick_text`` reads them; else None."""
    kept = []
    done = 0
    opener: str | None = None
    for run in _RUN.finditer(part):
        at, end = run.span()
        marks = run.group()
        before = part[at - 1] if at else ("" if first else "`")
        after = part[end] if end < len(part) else ("" if last else "`")
        loose_before, loose_after = before in ("", " "), after in ("", " ")
        if (loose_before and loose_after) or (
            marks[0] == "_" and before in _WORD and after in _WORD
        ):
            continue  # literal
        if len(marks) > 2:
            return None
        if (loose_before or before in _PUNCTUATION) and after in _WORD and opener is None:
            opener = marks
        elif before in _WORD and (loose_after or after in _PUNCTUATION) and opener == marks:
            opener = None
        else:
            return None
        kept.append(part[done:at])
        done = end
    if opener is not None:
        return None
    kept.append(part[done:])
    return "".join(kept)


def _rough_text(source: str) -> str:
    """A heading's text without inline parsing: line breaks dropped, escapes and entities
    resolved, all other markup kept."""
    return html.unescape(_ESCAPED.sub(r"\1", source.replace("\\\n", "").replace("\n", "")))


# --- the parse --------------------------------------------------------------------------------

_MAYBE_HEADING = re.compile(r"^[ \t>*+\-0-9.)]*(?:#|=+[ \t\r]*$|-[ \t\r]*$)", re.MULTILINE)
"""Every ATX heading line and setext underline matches, so content without a match has none."""
_MAYBE_HEADING_BYTES = re.compile(_MAYBE_HEADING.pattern.encode(), re.MULTILINE)


CHUNK = 1 << 12
"""Characters (or bytes) of content parsed at a time (``iter_headings``): a piece's lines and
block tree are a few times its size, so this bounds the parse's memory, not the document."""
PIECE_LINES = 128
"""Lines of content parsed at a time at most: a line's block tree costs about a kilobyte
whatever its length, so short lines (a piece of one-line headings) are counted, not measured."""
_CUT = re.compile(r"\n(?=#{1,6}(?:[ \t]|$)|(?<=\n\n)[!-~]|(?<=\n\r\n)[!-~])", re.MULTILINE)
"""Where a piece may end, after the newline matched: before an ATX heading line at the left
margin (it closes every open container), or before a line at the margin after an empty line (no
paragraph is open to be lazy or underlined, and a line at the margin continues no list item,
quote or indented code). The parse before it cannot reach past it, unless a fence, an HTML block
or link definitions are still open. (Matched from the newline, not ``^``: a literal first
character is searched for in C, six times faster than trying every position.)"""
_CUT_BYTES = re.compile(_CUT.pattern.encode(), re.MULTILINE)
_DEEP = re.compile(r"^(?:[ \t>]|[-+*][ \t]|[0-9]{1,9}[.)][ \t]){64}", re.MULTILINE)
"""A line opening with 64 things that may each open a container or indent one (a tab indents
one or two list levels): only such a line can nest blocks deep enough (about 170 levels) to
exhaust Python's stack."""
_DEEP_BYTES = re.compile(_DEEP.pattern.encode(), re.MULTILINE)
_DEEP_HINT = re.compile(r"[ \t>\-+*0-9.)]{64}")
"""64 characters that those things are made of, opening every ``_DEEP`` line: searched for
after a newline (a literal, which C finds: six times faster than searching for ``_DEEP``)."""
_DEEP_HINT_BYTES = re.compile(_DEEP_HINT.pattern.encode())
_DEEP_AFTER = re.compile("\n" + _DEEP_HINT.pattern)
_DEEP_AFTER_BYTES = re.compile(_DEEP_AFTER.pattern.encode())
_DEFINITION_END = re.compile(r"\]:")
"""Every link reference definition holds this; content without it after a point defines no
label there."""
_DEFINITION_END_BYTES = re.compile(rb"\]:")


@lru_cache(maxsize=16)
def _line_run(count: int, is_bytes: bool) -> re.Pattern[Any]:
    """``count`` lines, each up to its newline (``_pieces``' piece of short lines)."""
    pattern = rf"(?:[^\n]*\n){{{count}}}"
    return re.compile(pattern.encode() if is_bytes else pattern)


@dataclass(frozen=True, slots=True)
class _Piece:
    """One parsed piece: where it ends, its headings' raw sources (level, inline source, line
    number from the piece's start, start and end of its first line from the content's start),
    its line count and the link reference definitions it holds."""

    end: int
    sources: list[tuple[int, str, int, int, int]]
    lines: int
    definitions: dict[str, Any]


def find_headings(content: str | bytes, chunk: int = CHUNK, start: int = 0) -> list[ParsedHeading]:
    """Every heading goldmark finds in ``content[start:]`` (``start`` a line start), in
    document order, with its text and offsets from ``start``; for UTF-8 ``bytes`` content the
    offsets are byte offsets."""
    return list(iter_headings(content, chunk, start))


def iter_headings(
    content: str | bytes, chunk: int = CHUNK, start: int = 0
) -> Iterator[ParsedHeading]:
    """``find_headings`` one heading at a time, holding one piece of the parse at a time.

    The content is parsed in pieces of about ``chunk`` characters, each ending before a heading
    line at the left margin or a line at the margin after an empty one (``_CUT``; a piece whose
    last block may still be open there grows to the next such line), and each piece's headings
    are given before the next piece is parsed. A heading's text may name a link reference
    defined anywhere in the document, so before the first text that could (one holding ``[``)
    the rest of the content is parsed once for its definitions
    alone, where it holds any (``]:``). Content nested deeper than Python's stack has no headings
    (both sides alike): where a line could nest that deep, the whole parse runs first.
    """
    is_bytes = isinstance(content, bytes)
    maybe = _MAYBE_HEADING_BYTES if is_bytes else _MAYBE_HEADING
    if maybe.search(content, start) is None:  # type: ignore[arg-type]
        return
    first, after, deep = (
        (_DEEP_HINT_BYTES, _DEEP_AFTER_BYTES, _DEEP_BYTES)
        if is_bytes
        else (_DEEP_HINT, _DEEP_AFTER, _DEEP)
    )
    if (
        first.match(content, start) is not None  # type: ignore[arg-type]
        or after.search(content, start) is not None  # type: ignore[arg-type]
    ) and deep.search(content, start) is not None:  # type: ignore[arg-type]
        try:
            found = list(_iter_headings(content, chunk, start, scan=False))
        except RecursionError:
            return
        yield from found
        return
    yield from _iter_headings(content, chunk, start, scan=SCAN)


def _iter_headings(
    content: str | bytes, chunk: int, start: int, scan: bool
) -> Iterator[ParsedHeading]:
    """``iter_headings``, raising ``RecursionError`` where the nesting is too deep; ``scan``:
    pieces ``_scan`` can read skip mistletoe (not where the nesting may be deep: mistletoe's
    ``RecursionError`` decides there)."""
    definitions: dict[str, Any] = {}
    complete = False  # every definition of the document is in ``definitions``
    budget = [_INLINE_BUDGET]
    line_base = 0
    for piece in _pieces(content, chunk, start, scan):
        for key, value in piece.definitions.items():
            definitions.setdefault(key, value)  # the first definition wins
        if not complete and any("[" in source for _, source, _, _, _ in piece.sources):
            more = _DEFINITION_END_BYTES if isinstance(content, bytes) else _DEFINITION_END
            if more.search(content, piece.end):  # type: ignore[arg-type]
                for later in _pieces(content, chunk, piece.end, scan):
                    for key, value in later.definitions.items():
                        definitions.setdefault(key, value)
            complete = True
        sources = [
            (level, source, line_base + line, first, line_end)
            for level, source, line, first, line_end in piece.sources
        ]
        yield from _with_text(sources, definitions, budget)
        line_base += piece.lines


def _pieces(content: str | bytes, chunk: int, start: int, scan: bool) -> Iterator[_Piece]:
    """The block parse of ``content[start:]``, one piece at a time (``mdtokens.parse_piece``).
    With ``scan``, a piece ``_scan`` can read is read so, without mistletoe."""
    is_bytes = isinstance(content, bytes)
    cuts = _CUT_BYTES if is_bytes else _CUT
    pos, size = start, chunk
    while pos < len(content):
        end = len(content)
        # short lines: fewer than ``size`` bytes, up to the end of the last line counted
        lines = _line_run(PIECE_LINES * size // chunk, is_bytes).match(content, pos, pos + size)
        cut = pos + size if lines is None else lines.end()
        if cut < len(content) and (next_cut := cuts.search(content, cut - 1)):  # type: ignore[arg-type]
            end = next_cut.start() + 1
        piece = content[pos:end]
        scanned = _scan(piece, end == len(content)) if scan else None
        if scanned is _GROW:
            size *= 2
            continue
        if scanned is not None:
            found, count = scanned
            base = pos - start
            sources = [(lv, text, ln, base + at, base + stop) for lv, text, ln, at, stop in found]
            yield _Piece(end, sources, count, {})
            pos, size = end, chunk
            continue
        from markproto.protocol import mdtokens

        raw, starts = lines_of(piece)
        del piece
        found_blocks, count, open_, definitions = mdtokens.parse_piece(raw)
        del raw
        if open_ and end < len(content):
            size *= 2
            continue
        base = pos - start
        sources = [
            (level, text, line, base + starts[line], base + min(starts[line + 1], end - pos))
            for level, text, line in found_blocks
        ]
        yield _Piece(end, sources, count, definitions)
        pos, size = end, chunk


# --- pieces without mistletoe -----------------------------------------------------------------

SCAN = True
"""Whether pieces that ``_scan`` can read skip mistletoe (tests turn it off to compare)."""
_SCAN_LINE = re.compile(
    r"""\n(?:
        (?P<top>\#{1,6}(?:[ \t]|$))
      | (?P<fence>```|~~~)
      | (?P<bracket>[^\S\n]*\[)
      | (?P<html>[^\S\n]*<)
      | (?P<rule>[ \t>*+\-0-9.)]*(?:=+[ \t\r]*$|-[ \t\r]*$))
      | [ \t>*+\-0-9.)]*\#
      | \ {1,3}(?:```|~~~)
    )""",
    re.MULTILINE | re.VERBOSE,
)
"""After a newline, the lines ``_scan`` looks at: a heading line at the margin, a fence at the
margin, a line starting with ``[``, a line that may open an HTML block (``HtmlBlock.start``
reads its ``lstrip()``), a line that may underline a setext heading, all named, and the lines
it cannot read (unnamed): any other line that may be (in) a heading (``_MAYBE_HEADING``), a
fence that may be indented at the top level."""
_SCAN_BLANK = re.compile(r"\n[^\S\n]*\n")
_SCAN_RAW = re.compile(r"\s*<(?:[!?]|(?i:pre|script|style|textarea))")
"""A line that may open an HTML block a blank line does not end (kinds 1 to 5): any other ends
at the next blank line at the latest, opened or not (``_blank_reach``)."""
_SCAN_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})([^\n]*)")
"""A fence opening line: its fence and info string (``mdtokens``' code fence reads the same)."""


_Scanned = tuple[list[tuple[int, str, int, int, int]], int]
_GROW: _Scanned = ([], -1)
"""``_scan``'s answer for a piece whose parse would end in an open fence: take a larger one."""


def _scan(piece: str | bytes, last: bool) -> _Scanned | None:
    """A piece's heading sources and line count (as ``_pieces`` gives them, offsets from the
    piece's start) where its headings can only be ATX lines at the left margin outside fenced
    code at the margin, and nothing else can hide one or keep a block open at the piece's
    end (else None: mistletoe parses it).

    Such a line is a heading at the top level whatever is open before it: it interrupts a
    paragraph, is neither lazy nor a continuation of a list item or a quote, and ends indented
    code; only a fence, an HTML block or link reference definitions (mistletoe reads those
    past a heading line) can hold it. So the piece is read here when: outside fences at the
    margin (followed here as ``_CodeFence`` reads them: inside, every line is code until the
    closing one), no line but those lines may be a heading at all (``_MAYBE_HEADING``; a line
    of ``-`` or ``=`` after a blank one underlines nothing) and every fence that may open at the
    top level is at the margin; every ``]:`` is inside such a fence, with no line starting with
    ``[`` before that fence unless a blank line comes between (a definition is read from such
    a line up to a blank line, so none reaches it: no definition); no line may open an HTML
    block that holds a heading or fence line; and, unless the piece ends the content, the last
    line starting with ``[`` has a blank line after it and no HTML block may be open at the end
    (mistletoe would try a larger piece: ``_parse_blocks``'s ``open_``). A fence open there
    is known to be: the answer is then ``_GROW``."""
    text = "\n" + (piece.decode("utf-8", "replace") if isinstance(piece, bytes) else piece)
    defined = text.find("]:")
    """The first ``]:`` not yet known to be inside a fence."""
    headings: list[tuple[int, str, int]] = []
    fence: str | None = None
    fenced = 0
    """Where the open fence's opening line starts."""
    reached = False
    """Whether a definition that started before the open fence may run into it."""
    bracket = -1
    html = 0
    """Where the text that an HTML block opened so far may hold ends."""
    for found in _SCAN_LINE.finditer(text):
        kind = found.lastgroup
        if kind is None and fence is None:
            return None
        at = found.start() + 1
        if kind == "bracket":
            bracket = at
            continue
        if kind == "rule":
            # after a blank line no paragraph is open, in any container, for it to underline
            if fence is None and text[text.rfind("\n", 0, at - 1) + 1 : at - 1].strip():
                return None
            continue
        stop = text.find("\n", at)
        line = text[at : stop if stop >= 0 else len(text)]
        line = (line[:-1] if line.endswith("\r") else line) + "\n"
        if kind == "html":
            if fence is None:
                reach = _html_reach(text, line, stop) if _SCAN_RAW.match(line) else 0
                html = max(html, reach or _blank_reach(text, stop))
            continue
        if at < html:
            return None  # a heading or fence line an HTML block may hold
        if fence is not None:
            # ``_CodeFence.read``'s closing test (a line that may close is a fence line)
            stripped = line.lstrip(" ")
            if (
                kind != "top"
                and stripped.startswith(fence)
                and len(stripped.split(maxsplit=1)) == 1
                and len(line) - len(stripped) < 4
            ):
                fence = None
                defined = _past_fence(text, defined, fenced, at, reached)
                if defined == -2:
                    return None
        elif kind == "fence":
            opened = _SCAN_FENCE_OPEN.match(line)
            if opened is not None and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
                if 0 <= defined < at:
                    return None  # a ``]:`` outside fences
                fence, fenced = opened.group(1), at
                reached = (
                    bracket >= 0 and _SCAN_BLANK.search(text, text.find("\n", bracket), at) is None
                )
        elif (heading := atx(line)) is not None and heading[1]:
            headings.append((*heading, at - 1))
    if fence is not None and not last:
        return _GROW  # mistletoe's last block, the fence, would be open (``_parse_blocks``)
    if fence is not None:
        defined = _past_fence(text, defined, fenced, len(text), reached)
    if defined != -1:
        return None  # a definition may be read
    if not last and (
        html > len(text)
        or (bracket >= 0 and _SCAN_BLANK.search(text, text.find("\n", bracket)) is None)
    ):
        return None
    count = text.count("\n") - text.endswith("\n")
    if not headings:
        return [], count
    lengths = None
    """Where the piece is non-ASCII bytes, the bytes before each line less its number."""
    if isinstance(piece, bytes) and not piece.isascii():
        lengths = list(accumulate(map(len, piece.split(b"\n")), initial=0))
    sources = []
    newline = b"\n" if isinstance(piece, bytes) else "\n"
    number, counted = -1, 0
    for level, source, at in headings:
        number += text.count("\n", counted, at + 1)
        counted = at + 1
        first = at if lengths is None else lengths[number] + number
        end = piece.find(newline, first) + 1 or len(piece)  # type: ignore[arg-type]
        sources.append((level, source, number, first, end))
    return sources, count


def _past_fence(text: str, defined: int, fenced: int, end: int, reached: bool) -> int:
    """The first ``]:`` of ``text`` from ``defined`` on that is not inside the fence from
    ``fenced`` to ``end`` (-1 for none), or -2 where a definition that started before the fence
    (``reached``) could end at one inside it."""
    while fenced <= defined < end:
        if reached:
            return -2
        defined = text.find("]:", defined + 1)
    return defined


def _blank_reach(text: str, stop: int) -> int:
    """Where an HTML block that a blank line ends, opened on the line ending at ``stop``, may
    end at the latest (past the text when no blank line comes)."""
    if stop < 0:
        return 0
    blank = _SCAN_BLANK.search(text, stop)
    return len(text) + 1 if blank is None else blank.start()


def _html_reach(text: str, line: str, stop: int) -> int:
    """Where an HTML block of kinds 1 to 5 opened at ``line`` (ending at ``stop`` of ``text``)
    may end at the latest: its end marker's first occurrence (0 when the line opens no such
    block or closes it: the caller bounds it by the next blank line; past the text when the
    block may run to its end). A block is one only where the line is at the top level; the
    bound holds either way."""
    if len(line) - len(line.lstrip()) >= 4:
        return 0
    end = _raw_html_end(line)
    if end is None or stop < 0 or html_closed(end, line):
        return 0
    if end == RAW_HTML_END:
        close = _RAW_HTML_CLOSE.search(text, stop)
        return len(text) + 1 if close is None else close.start()
    at = text.find(end, stop)
    return len(text) + 1 if at < 0 else at


def _raw_html_end(line: str) -> str | None:
    """The end marker of an HTML block of kinds 1 to 5 that ``line`` (``\\n``-terminated, less
    than four columns indented) opens, as ``mdtokens``' HTML block reads it; None for any other
    line (a blank line ends what it opens, if anything)."""
    if HTML_OPEN.match(line) is None:
        return None
    if RAW_HTML_OPEN.match(line):
        return RAW_HTML_END
    stripped = line.lstrip()
    if stripped.startswith("<!--"):
        return "-->"
    if stripped.startswith("<?"):
        return "?>"
    if stripped.startswith("<!") and stripped[2:3].isupper():
        return ">"
    if stripped.startswith("<![CDATA["):
        return "]]>"
    return None


def _with_text(
    sources: list[tuple[int, str, int, int, int]], definitions: dict[str, Any], budget: list[int]
) -> list[ParsedHeading]:
    """Each heading's text from its inline source, link references resolved against
    ``definitions``; ``budget`` is what is left of the document's inline budget."""
    marked = [text for _, text, _, _, _ in sources if _INLINE_SYNTAX.search(text)]
    if not marked:
        return [ParsedHeading(*source) for source in sources]  # each source is its text
    if all(_quick_text(text) is not None for text in marked):  # no mistletoe needed
        return [_text(source, budget, None) for source in sources]
    from markproto.protocol import mdtokens

    with mdtokens.inline_parser(definitions) as parse:
        return [_text(source, budget, parse) for source in sources]


def _text(
    source: tuple[int, str, int, int, int],
    budget: list[int],
    parse: Callable[[str], str] | None,
) -> ParsedHeading:
    """One heading's text; ``parse`` is mistletoe's inline parser (``mdtokens.inline_parser``),
    None where every source with inline syntax is one ``_quick_text`` reads."""
    level, text, line, start, line_end = source
    if _INLINE_SYNTAX.search(text):
        if len(text) <= min(_INLINE_MAX, budget[0]):
            budget[0] -= len(text)
            quick = _quick_text(text)
            if quick is None:
                assert parse is not None
                quick = parse(text)
            text = quick
        else:
            text = _rough_text(text)
    return ParsedHeading(level, text, line, start, line_end)
