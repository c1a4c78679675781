"""The CommonMark block parse under mdoutline: which headings goldmark finds, and their text.

The reference walks goldmark's CommonMark AST; we get the same headings from mistletoe's block
parser with a private set of token classes that fix where it strays from CommonMark (setext
headings in block quotes, lazy continuation lines, lenient tables, list markers, HTML block ends,
link reference definitions followed by paragraph text). Only blocks are parsed; inline parsing
runs on heading contents alone, which keeps indexing fast. A piece whose headings can only be
ATX lines at the margin (most of real documents) is read by a line scan instead (``_scan``),
which finds what that parse finds (tests/protocol/test_mdparse_scan.py). Hostile input stays
cheap and never raises: nesting deeper than Python's stack yields no headings, and heading
sources past the inline limits skip mistletoe's quadratic inline parser.

Input is a document's content (frontmatter already cut off); offsets are ``str`` indices into it.
"""

# mistletoe ships type information but leaves its functions unannotated.
# mypy: disable-error-code="no-untyped-call"
from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from mistletoe import block_token, block_tokenizer, span_token
from mistletoe import token as mistletoe_token

__all__ = ["ParsedHeading", "find_headings", "first_paragraph"]


@dataclass(frozen=True, slots=True)
class ParsedHeading:
    """A heading as the parse finds it: its level, its text (what goldmark's ``ast.Text`` nodes
    hold), and the line its text starts on, number ``line`` (from 0) spanning ``[start, line_end)``
    of the content."""

    level: int
    text: str
    line: int
    start: int
    line_end: int


# --- mistletoe, held to CommonMark block structure --------------------------------------------

_LOCK = threading.Lock()
"""mistletoe keeps parse state in module and class globals, so every use holds this lock."""

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+|$)")
_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_THEMATIC = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_HTML_OPEN = re.compile(r" {0,3}<")
_RAW_HTML_OPEN = re.compile(r" {0,3}<(?:pre|script|style|textarea)(?:[ \t>]|$)", re.IGNORECASE)
_RAW_HTML_CLOSE = re.compile(r"</(?:pre|script|style|textarea)>", re.IGNORECASE)
_RAW_HTML_END = "</>"
"""Stands for HTML block end condition 1: any of the four raw-text closing tags."""
_PLAIN = re.compile(r"(?: {4}| {0,3}[^\s<#>`~\-+*_=0-9])")
"""A line that can neither interrupt a paragraph nor underline it: it simply continues it."""
_LEAD = re.compile(r" {0,3}(\S)")
_CONTAINER_PREFIX = re.compile(r"(?: {0,3}(?:>|[-+*]|[0-9]{1,9}[.)])(?:[ \t]|$))*")


class _Lazy(str):
    """A lazy continuation line: it joins an open paragraph, never underlines a setext heading,
    and never continues a container nested deeper than the one it was lazy for."""

    __slots__ = ()


class _AfterRefs(str):
    """The line after link reference definitions that goes on with their paragraph (CommonMark
    reads definitions out of a paragraph; mistletoe reads them as a block of their own)."""

    __slots__ = ()


class _Heading(block_token.Heading):
    """ATX heading by CommonMark's rules: only spaces and tabs separate ``#``s from the text,
    and a closing ``#`` run counts only after a space or tab (``# foo#`` keeps ``foo#``)."""

    level: int
    content: str

    def __init__(self, match: tuple[int, str, str]) -> None:
        self.level, self.content, _ = match

    @classmethod
    def start(cls, line: str) -> bool:
        found = _atx(line)
        if found is None:
            return False
        cls.level, cls.content, cls.closing_sequence = *found, ""
        return True


def _atx(line: str) -> tuple[int, str] | None:
    """An ATX heading line's level and inline source (``\n``-terminated line), or None."""
    match = _ATX.match(line)
    if match is None:
        return None
    rest = line[match.end() :].rstrip("\n").rstrip(" \t")
    bare = rest.rstrip("#")
    if not bare or bare[-1] in " \t":
        rest = bare.rstrip(" \t")
    return len(match.group(1)), rest


class _SetextHeading(block_token.SetextHeading):
    """Setext heading keeping its raw inline source (text lines without the underline)."""

    level: int
    content: str

    def __init__(self, lines: list[str]) -> None:
        self.level = 1 if lines[-1].lstrip(" ")[0] == "=" else 2
        self.content = "\n".join(line.strip(" \t\n") for line in lines[:-1])


class _Paragraph(block_token.Paragraph):
    """Paragraph underlined into a setext heading only by a run of ``=`` or ``-`` on a line that
    is not lazy (mistletoe allows mixed runs and turns setext off inside block quotes). Only its
    extent is kept: its inline content is never needed."""

    line_count: int
    line_number: int

    def __init__(self, lines: list[str]) -> None:
        self.line_count = len(lines)

    @classmethod
    def read(cls, lines: Any) -> Any:
        buffer = [next(lines)]
        while (line := lines.peek()) is not None and line.strip():
            if _PLAIN.match(line) is None:
                if _interrupts(lines, block_token.ThematicBreak):
                    break
                if not isinstance(line, _Lazy) and _SETEXT.match(line):
                    buffer.append(next(lines))
                    return _SetextHeading(buffer)
                if block_token.ThematicBreak.start(line):
                    break
            buffer.append(next(lines))
        return buffer


class _ParagraphAfterRefs(_Paragraph):
    """A paragraph starting on an ``_AfterRefs`` line, whatever block that line looks like."""

    @staticmethod
    def start(line: str) -> bool:
        return isinstance(line, _AfterRefs)


class _Footnote(block_token.Footnote):
    """Link reference definitions, read 64 lines at a time (mistletoe copies the rest of the
    paragraph for each one: quadratic), handing a following line that cannot interrupt a
    paragraph on to one (``[a]: /u`` then ``<b>`` then ``---`` is a setext heading)."""

    @classmethod
    def read(cls, lines: Any) -> Any:
        matches: list[Any] = []
        while True:
            start = lines.get_pos() + 1
            window = block_tokenizer.FileWrapper(lines.lines[start : start + 64])
            matches += super().read(window) or ()
            lines.set_pos(start + window.get_pos())
            if window.get_pos() < 63 or not matches:
                break
        following = lines.peek()
        if matches and following is not None and following.strip() and not _interrupts(lines):
            lines.lines[lines.get_pos() + 1] = _AfterRefs(following)
        return matches or None


def _html_closed(end: str, line: str) -> bool:
    if end == _RAW_HTML_END:
        return _RAW_HTML_CLOSE.search(line) is not None
    return end in line.casefold()


class _HtmlBlock(block_token.HtmlBlock):
    """HTML block whose raw-text kind (``<pre>``, ``<script>``, ...) starts in any letter case
    and ends at any of the four closing tags, as CommonMark says (mistletoe wants the same tag)."""

    @classmethod
    def start(cls, line: str) -> int | bool:
        if _HTML_OPEN.match(line) is None:
            return False
        if _RAW_HTML_OPEN.match(line):
            cls._end_cond = _RAW_HTML_END
            return 1
        kind: int | bool = super().start(line)
        return kind

    closed: bool

    def __init__(self, closed: bool) -> None:
        self.closed = closed  # the source is never needed: only where the block ends

    @classmethod
    def read(cls, lines: Any) -> bool:
        """Consume the block; whether it ended by its own condition, not the end of input."""
        end = cls._end_cond
        for line in lines:
            if end is None and not line.strip():
                lines.backstep()
                return True
            if end is not None and _html_closed(end, line):
                return True
        return False


class _CodeFence(block_token.CodeFence):
    """Fenced code keeping no content, only whether its closing fence came."""

    closed: bool

    def __init__(self, match: tuple[bool, Any]) -> None:
        self.closed = match[0]

    @classmethod
    def read(cls, lines: Any) -> tuple[bool, Any]:
        next(lines)
        fence = cls._open_info[1]  # type: ignore[index]
        for line in lines:
            stripped = line.lstrip(" ")
            if (
                stripped.startswith(fence)
                and len(stripped.split(maxsplit=1)) == 1
                and len(line) - len(stripped) < 4
            ):
                return True, cls._open_info
        return False, cls._open_info


class _BlockCode(block_token.BlockCode):
    """Indented code keeping no content."""

    def __init__(self, lines: list[str]) -> None:
        pass


class _Tip:
    """What is open at the end of a container's content so far, fed line by line: a block that
    ends at its own marker (a code fence as its fence; an HTML block as ``"<"`` plus its end
    marker, ``"<"`` alone when a blank line ends it) and a paragraph (with the ``>`` count and
    column of its nested containers). A line that does not continue the container joins it
    lazily only while a paragraph is open. Nested containers are read from their markers alone:
    this is a close approximation of CommonMark's open blocks, not a parser."""

    __slots__ = ("block", "paragraph")

    def __init__(self) -> None:
        self.block: str | None = None
        self.paragraph: tuple[int, int] | None = None

    def feed(self, line: str) -> None:
        markers = _CONTAINER_PREFIX.match(line)
        prefix = markers.end() if markers else 0
        rest = line[prefix:]
        if self.block is not None:
            if self.block[0] == "<":
                end = self.block[1:]
                closed = _html_closed(end, rest) if end else not rest.strip()
            else:
                stripped = rest.strip()
                closed = stripped.startswith(self.block) and not stripped.strip(self.block[0])
            self.block = None if closed else self.block
            return
        if not rest.strip():
            self.paragraph = None
            return
        nesting = (line.count(">", 0, prefix), prefix)
        fence = _FENCE.match(rest)
        kind = _HtmlBlock.start(rest)
        if fence is not None:
            self.block, self.paragraph = fence.group(1), None
        elif kind and (kind != 7 or self.paragraph is None):
            end = _HtmlBlock._end_cond or ""
            self.block = None if end and _html_closed(end, rest) else "<" + end
            self.paragraph = None
        elif _ATX.match(rest) or _THEMATIC.match(rest):
            self.paragraph = None
        elif self.paragraph is None:
            self.paragraph = None if rest.startswith("    ") else nesting
        elif nesting[0] > self.paragraph[0] or nesting[1] > self.paragraph[1]:
            self.paragraph = nesting  # a paragraph in a new nested container
        elif (
            _SETEXT.match(rest)
            and nesting[0] >= self.paragraph[0]  # not lazy for a deeper quote
            and prefix + len(rest) - len(rest.lstrip(" ")) >= self.paragraph[1]  # nor list item
        ):
            self.paragraph = None


def _is_lazy(lines: Any, tip: _Tip) -> bool:
    """Whether the next line, which does not continue its container, joins the open paragraph:
    no block may start on it, not even a list item of any kind."""
    return (
        tip.paragraph is not None
        and _ListItem.parse_marker(lines.peek()) is None
        and not _interrupts(lines)
    )


def _unquote(line: str) -> str:
    """Strip a block quote marker and its optional space, expanding tabs by original column."""
    marker = line.index(">")
    column = index = marker + 1
    while index < len(line) and line[index] in " \t":
        column += 4 - column % 4 if line[index] == "\t" else 1
        index += 1
    return " " * max(column - marker - 2, 0) + line[index:]


class _Quote(block_token.Quote):
    """Block quote whose content may hold setext headings (goldmark finds them; mistletoe turns
    them off), taking a line without ``>`` lazily only while a paragraph is open."""

    @classmethod
    def read(cls, lines: Any) -> Any:
        first = _unquote(next(lines))
        start_line = lines.line_number()
        buffer = [first]
        tip = _Tip()
        tip.feed(first)
        while (line := lines.peek()) is not None:
            if cls.start(line):
                content = _unquote(line)
                tip.feed(content)
                buffer.append(content)
            elif line.strip() and _is_lazy(lines, tip):
                buffer.append(line if isinstance(line, _Lazy) else _Lazy(line))
            else:
                break
            next(lines)
        return _tokenize_block(buffer, start_line)


class _ListItem(block_token.ListItem):
    """List item taking a line lazily only while a paragraph is open, with 1-9 digit ordered
    markers, its lines numbered from where its content starts (after a bare marker line)."""

    pattern = re.compile(r"( {0,3})([0-9]{1,9}[.)]|[-+*])($|[ \t]+)")

    @classmethod
    def read(cls, lines: Any, prev_marker: Any = None) -> Any:
        line = next(lines)
        indentation, prepend, leader, content = prev_marker or cls.parse_marker(line)
        start_line = lines.line_number()
        buffer: list[str] = []
        tip = _Tip()
        if content.strip():
            buffer.append(content)
            tip.feed(content)
        else:
            prepend = indentation + len(leader) + 1
            start_line += 1
            if lines.peek() is None or not lines.peek().strip():
                while lines.peek() is not None and not lines.peek().strip():
                    next(lines)
                following = lines.peek()
                marker = None if following is None else cls.parse_marker(following)
                empty = block_tokenizer.ParseBuffer()
                return (empty, indentation, prepend, leader, start_line), marker
        blank = False
        next_marker = None
        while (line := lines.peek()) is not None:
            continued = None if isinstance(line, _Lazy) else cls.parse_continuation(line, prepend)
            if continued is not None:
                tip.feed(continued)
                blank = continued == "\n"
                buffer.append(continued)
            elif not blank and _is_lazy(lines, tip):
                buffer.append(line if isinstance(line, _Lazy) else _Lazy(line))
            else:
                if not block_token.ThematicBreak.start(line):
                    next_marker = cls.parse_marker(line)
                break
            next(lines)
        parsed = _tokenize_block(buffer, start_line)
        return (parsed, indentation, prepend, leader, start_line), next_marker


class _List(block_token.List):
    """List of ``_ListItem``s; ordered markers need a digit (mistletoe takes ``) x`` for one)."""

    pattern = re.compile(r" {0,3}(?:[0-9]{1,9}[.)]|[-+*])(?:[ \t]*$|[ \t]+)")

    @classmethod
    def check_interrupts_paragraph(cls, lines: Any) -> bool:
        marker = _ListItem.parse_marker(lines.peek())
        if marker is None or not marker[3].strip():
            return False
        leader: str = marker[2]
        return not leader[0].isdigit() or int(leader[:-1]) == 1

    @classmethod
    def read(cls, lines: Any) -> list[Any]:
        items: list[Any] = []
        marker = None
        while True:
            position = lines.get_pos()
            item, marker = _ListItem.read(lines, marker)
            if items and not cls.same_marker_type(items[0][3], item[3]):
                lines.set_pos(position)
                break
            items.append(item)
            if marker is None:
                break
        return items


_INTERRUPTERS = (
    _HtmlBlock,
    _Heading,
    _Quote,
    _CodeFence,
    block_token.ThematicBreak,
    _List,
)
"""The blocks that may interrupt a paragraph."""

_ALL_BLOCKS = (
    _ParagraphAfterRefs,
    _HtmlBlock,
    _BlockCode,
    _Heading,
    _Quote,
    _CodeFence,
    block_token.ThematicBreak,
    _List,
    _Footnote,
    _Paragraph,
)
"""goldmark's CommonMark blocks in the order mistletoe tries them: HTML blocks, no tables."""

_BLOCKS_BY_LEAD: dict[str, tuple[Any, ...]] = {
    "<": (_HtmlBlock, _Paragraph),
    "#": (_Heading, _Paragraph),
    ">": (_Quote,),
    "`": (_CodeFence, _Paragraph),
    "~": (_CodeFence, _Paragraph),
    "-": (block_token.ThematicBreak, _List, _Paragraph),
    "*": (block_token.ThematicBreak, _List, _Paragraph),
    "_": (block_token.ThematicBreak, _Paragraph),
    "+": (_List, _Paragraph),
    "[": (_Footnote, _Paragraph),
    **dict.fromkeys("0123456789", (_List, _Paragraph)),
}
"""Every block but a paragraph (and indented code) is marked by its first non-space character."""


def _interrupts(lines: Any, unless: type | None = None) -> bool:
    """Whether a block that may interrupt a paragraph starts on the next line."""
    return any(t is not unless and t.check_interrupts_paragraph(lines) for t in _INTERRUPTERS)


def _tokenize_block(lines: list[str], start_line: int = 1) -> Any:
    """mistletoe's block loop, trying on each line only the blocks its first character allows."""
    wrapper = block_tokenizer.FileWrapper(lines, start_line=start_line)
    parsed = block_tokenizer.ParseBuffer()
    while (line := wrapper.peek()) is not None:
        if line == "\n":
            next(wrapper)
            continue
        lead = _LEAD.match(line)
        if isinstance(line, _AfterRefs):
            candidates: Sequence[Any] = (_ParagraphAfterRefs,)
        elif lead is None:
            candidates = _ALL_BLOCKS
        else:
            candidates = _BLOCKS_BY_LEAD.get(lead.group(1), (_Paragraph,))
        for token_type in candidates:
            if token_type.start(line):
                line_number = wrapper.line_number() + 1
                result = token_type.read(wrapper)
                if result is not None:
                    parsed.append((token_type, result, line_number))
                    break
        else:
            next(wrapper)
    return parsed


@contextmanager
def _patched(*changes: tuple[object, str, object]) -> Iterator[None]:
    """Set mistletoe globals for one parse and put them back, so other users see no change."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in changes]
    try:
        for owner, name, value in changes:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def _new_root(definitions: dict[str, Any] | None = None) -> Any:
    """An empty document, to hold link reference definitions (``definitions``, shared, when
    given). The caller holds ``_LOCK``."""
    with _patched((mistletoe_token, "_root_node", None)):
        root = block_token.Document([])
    if definitions is not None:
        root.footnotes = definitions
    return root


def _parse_blocks(lines: list[str], root: Any) -> tuple[Any, bool]:
    """The block tree of ``\\n``-terminated lines, link definitions stored in ``root``, and
    whether the last block may still be open at the end (a fence or an HTML block that ran out
    of lines, or link reference definitions that reach the end). The caller holds
    ``_LOCK``."""
    with _patched((mistletoe_token, "_root_node", root)):
        parsed = _tokenize_block(lines)
        document = block_token.Document([])
        document.children = block_tokenizer.make_tokens(parsed)
    if not parsed:
        return document, False
    kind, result, _ = parsed[-1]
    open_ = (kind is _CodeFence and not result[0]) or (kind is _HtmlBlock and not result)
    return document, open_ or _definitions_reach_end(parsed, lines)


def _definitions_reach_end(parsed: Any, lines: list[str]) -> bool:
    """Whether a top-level block that mistletoe tried as link reference definitions has no blank
    line after it: mistletoe reads definitions up to a blank line, past heading lines, so more
    lines could still make them parse (or parse differently)."""
    for _, _, number in reversed(parsed):
        if lines[number - 1].lstrip().startswith("["):
            return not any(not line.strip() for line in lines[number:])
    return False


# --- heading text -----------------------------------------------------------------------------

_SPAN_TOKENS = [
    span_token.EscapeSequence,
    span_token.HtmlSpan,
    span_token.AutoLink,
    span_token.CoreTokens,
    span_token.InlineCode,
    span_token.LineBreak,
    span_token.RawText,
]
"""CommonMark inlines: raw HTML on, no strikethrough."""

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
_NOT_CODE = re.compile(r"[\\\[\]<>&\n]")
"""The inline syntax a code span cannot hide: escapes, links, tags, entities, line breaks."""


def _code_text(source: str) -> str | None:
    """The text of a heading source whose only inline syntax is code spans (``*`` and ``_``
    inside them alone), as mistletoe reads it (most headings with syntax: ``Use `foo```),
    without its parser; None for any other source. The spans are the same matches mistletoe
    finds left to right; a span's text loses one space each side when both have one and it
    is not all spaces; an unmatched backtick run stays literal."""
    if _NOT_CODE.search(source) is not None:
        return None
    parts = _CODE_SPAN.split(source)
    """Text outside spans, then each span's backticks, content and the text after it."""
    if any("*" in part or "_" in part for part in parts[::3]):
        return None
    for at in range(2, len(parts), 3):
        code = parts[at]
        if code[:1] == " " == code[-1:] and not code.isspace():
            parts[at] = code[1:-1]
        parts[at - 1] = ""
    return "".join(parts)


def _rough_text(source: str) -> str:
    """A heading's text without inline parsing: line breaks dropped, escapes and entities
    resolved, all other markup kept."""
    return html.unescape(_ESCAPED.sub(r"\1", source.replace("\\\n", "").replace("\n", "")))


def _inline_text(tokens: Iterable[Any]) -> str:
    """What goldmark's ``ast.Text`` nodes hold: emphasis markers, link URLs, autolinks, raw HTML
    and line breaks dropped; code, link text and image alt kept; escapes and entities resolved."""
    parts = []
    for tok in tokens:
        children: Any = tok.children
        if isinstance(tok, span_token.AutoLink | span_token.HtmlSpan | span_token.LineBreak):
            continue
        if isinstance(tok, span_token.InlineCode):
            parts.append(children[0].content)
        elif children is not None:
            parts.append(_inline_text(children))
        else:
            parts.append(tok.content)
    return "".join(parts)


def _walk(tokens: Iterable[Any]) -> Iterator[Any]:
    """Headings in document order, in block quotes and list items at any depth."""
    for tok in tokens:
        if isinstance(tok, _Heading | _SetextHeading):
            yield tok
        elif isinstance(tok, block_token.Quote | block_token.List | block_token.ListItem):
            yield from _walk(tok.children or ())


# --- the parse --------------------------------------------------------------------------------

_MAYBE_HEADING = re.compile(r"^[ \t>*+\-0-9.)]*(?:#|=+[ \t\r]*$|-[ \t\r]*$)", re.MULTILINE)
"""Every ATX heading line and setext underline matches, so content without a match has none."""
_MAYBE_HEADING_BYTES = re.compile(_MAYBE_HEADING.pattern.encode(), re.MULTILINE)


def _lines(content: str | bytes) -> tuple[list[str], list[int]]:
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


def _mistletoe_lines(raw: list[str]) -> list[str]:
    """Lines as mistletoe reads them: CRLF made LF, each ending in ``\\n``."""
    return [line[:-1] + "\n" if line.endswith("\r") else line + "\n" for line in raw]


CHUNK = 1 << 12
"""Characters (or bytes) of content parsed at a time (``iter_headings``): a piece's lines and
block tree are a few times its size, so this bounds the parse's memory, not the document."""
PIECE_LINES = 128
"""Lines of content parsed at a time at most: a line's block tree costs about a kilobyte
whatever its length, so short lines (a piece of one-line headings) are counted, not measured."""
_CUT = re.compile(r"^(?:#{1,6}(?:[ \t]|$)|(?:(?<=\n\n)|(?<=\n\r\n))[!-~])", re.MULTILINE)
"""Where a piece may end: before an ATX heading line at the left margin (it closes every open
container), or before a line at the margin after an empty line (no paragraph is open to be lazy
or underlined, and a line at the margin continues no list item, quote or indented code). The
parse before it cannot reach past it, unless a fence, an HTML block or link definitions are
still open."""
_CUT_BYTES = re.compile(_CUT.pattern.encode(), re.MULTILINE)
_DEEP = re.compile(r"^(?:[ \t>]|[-+*][ \t]|[0-9]{1,9}[.)][ \t]){64}", re.MULTILINE)
"""A line opening with 64 things that may each open a container or indent one (a tab indents
one or two list levels): only such a line can nest blocks deep enough (about 170 levels) to
exhaust Python's stack."""
_DEEP_BYTES = re.compile(_DEEP.pattern.encode(), re.MULTILINE)
_DEFINITION_END = re.compile(r"\]:")
"""Every link reference definition holds this; content without it after a point defines no
label there."""
_DEFINITION_END_BYTES = re.compile(rb"\]:")


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
    deep = _DEEP_BYTES if is_bytes else _DEEP
    if deep.search(content, start) is not None:  # type: ignore[arg-type]
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
                for later in _pieces(content, chunk, piece.end, scan=False):
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
    """The block parse of ``content[start:]``, one piece at a time; the lock is held while a
    piece is parsed, never between pieces. With ``scan``, a piece ``_scan`` can read is read
    so, without mistletoe."""
    cuts = _CUT_BYTES if isinstance(content, bytes) else _CUT
    newline = b"\n" if isinstance(content, bytes) else "\n"
    pos, size = start, chunk
    while pos < len(content):
        end = len(content)
        cut = pos
        for _ in range(PIECE_LINES * size // chunk):  # short lines: fewer than ``size`` bytes
            cut = content.find(newline, cut, pos + size) + 1  # type: ignore[arg-type]
            if not cut:
                cut = pos + size
                break
        if cut < len(content) and (next_cut := cuts.search(content, cut)):  # type: ignore[arg-type]
            end = next_cut.start()
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
        raw, starts = _lines(piece)
        del piece
        lines = _mistletoe_lines(raw)
        del raw
        with _LOCK:
            piece_root = _new_root()
            document, open_ = _parse_blocks(lines, piece_root)
        if open_ and end < len(content):
            _unlink(document.children)
            size *= 2
            continue
        sources = []
        for tok in _walk(document.children):
            if tok.content:  # goldmark skips a heading without inline content
                line = tok.line_number - 1
                first = pos - start + starts[line]
                line_end = pos - start + min(starts[line + 1], end - pos)
                sources.append((tok.level, tok.content, line, first, line_end))
        _unlink(document.children)
        del document
        yield _Piece(end, sources, len(lines), piece_root.footnotes)
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
_SCAN_FENCE_OPEN = block_token.CodeFence.pattern


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
    past a heading line) can hold it. So the piece is read here when: no line but those lines
    may be a heading at all (``_MAYBE_HEADING``; a line of ``-`` or ``=`` after a blank one
    underlines nothing), no ``]:`` (no definition), no line may open
    an HTML block, every fence that may open at the top level is at the margin (followed
    here as ``_CodeFence`` reads it), and, unless the piece ends the content, the last line
    starting with ``[`` has a blank line after it and no HTML block may be open at the end
    (mistletoe would try a larger piece: ``_parse_blocks``'s ``open_``). A fence open there
    is known to be: the answer is then ``_GROW``."""
    text = "\n" + (piece.decode("utf-8", "replace") if isinstance(piece, bytes) else piece)
    if "]:" in text:
        return None
    headings: list[tuple[int, str, int]] = []
    fence: str | None = None
    bracket = -1
    html = 0
    """Where the text that an HTML block opened so far may hold ends."""
    for found in _SCAN_LINE.finditer(text):
        kind = found.lastgroup
        if kind is None:
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
            if kind == "fence" and line.startswith(fence) and len(line.split(maxsplit=1)) == 1:
                fence = None
        elif kind == "fence":
            opened = _SCAN_FENCE_OPEN.match(line)
            if opened is not None and not (opened.group(2)[0] == "`" and "`" in opened.group(3)):
                fence = opened.group(2)
        elif (heading := _atx(line)) is not None and heading[1]:
            headings.append((*heading, at - 1))
    if fence is not None and not last:
        return _GROW  # mistletoe's last block, the fence, would be open (``_parse_blocks``)
    if not last and (
        html > len(text)
        or (bracket >= 0 and _SCAN_BLANK.search(text, text.find("\n", bracket)) is None)
    ):
        return None
    count = text.count("\n") - text.endswith("\n")
    if not headings:
        return [], count
    starts = None
    if isinstance(piece, bytes) and not piece.isascii():
        starts = [0, *accumulate(len(line) + 1 for line in piece.split(b"\n"))]
    sources = []
    newline = b"\n" if isinstance(piece, bytes) else "\n"
    for level, source, at in headings:
        number = text.count("\n", 0, at + 1) - 1
        first = at if starts is None else starts[number]
        end = piece.find(newline, first) + 1 or len(piece)  # type: ignore[arg-type]
        sources.append((level, source, number, first, end))
    return sources, count


def _blank_reach(text: str, stop: int) -> int:
    """Where an HTML block that a blank line ends, opened on the line ending at ``stop``, may
    end at the latest (past the text when no blank line comes)."""
    if stop < 0:
        return 0
    blank = _SCAN_BLANK.search(text, stop)
    return len(text) + 1 if blank is None else blank.start()


def _html_reach(text: str, line: str, stop: int) -> int:
    """Where an HTML block opened at ``line`` (ending at ``stop`` of ``text``) may end at the
    latest: its own line, the next blank line, or its end marker's first occurrence (0 when
    the line opens none; past the text when the block may run to its end). A block is one
    only where the line is at the top level; the bound holds either way."""
    if len(line) - len(line.lstrip()) >= 4:
        return 0
    with _LOCK:
        kind = _HtmlBlock.start(line)
        end = _HtmlBlock._end_cond
    if not kind or stop < 0:
        return 0
    if end is None:
        blank = _SCAN_BLANK.search(text, stop)
    elif _html_closed(end, line):
        return 0
    elif end == _RAW_HTML_END:
        blank = _RAW_HTML_CLOSE.search(text, stop)
    else:
        at = text.find(end, stop)
        return len(text) + 1 if at < 0 else at
    return len(text) + 1 if blank is None else blank.start()


def _unlink(tokens: Iterable[Any]) -> None:
    """Drop a block tree's parent links, so each piece's tree is freed when the next is built,
    not whenever the cycle collector runs."""
    for tok in tokens:
        vars(tok).pop("_parent", None)
        children = tok.children
        if children:
            _unlink(children)


def _with_text(
    sources: list[tuple[int, str, int, int, int]], definitions: dict[str, Any], budget: list[int]
) -> list[ParsedHeading]:
    """Each heading's text from its inline source, link references resolved against
    ``definitions``; ``budget`` is what is left of the document's inline budget."""
    marked = [text for _, text, _, _, _ in sources if _INLINE_SYNTAX.search(text)]
    if not marked:
        return [ParsedHeading(*source) for source in sources]  # each source is its text
    if all(_code_text(text) is not None for text in marked):  # no mistletoe needed
        return [_text(source, budget) for source in sources]
    with _LOCK:
        root = _new_root(definitions)
        with _patched(
            (span_token, "_token_types", _SPAN_TOKENS), (mistletoe_token, "_root_node", root)
        ):
            return [_text(source, budget) for source in sources]


def _text(source: tuple[int, str, int, int, int], budget: list[int]) -> ParsedHeading:
    """One heading's text; the caller holds ``_LOCK`` with the span tokens patched in, unless
    every source with inline syntax is one ``_code_text`` reads."""
    level, text, line, start, line_end = source
    if _INLINE_SYNTAX.search(text):
        if len(text) <= min(_INLINE_MAX, budget[0]):
            budget[0] -= len(text)
            code = _code_text(text)
            if code is None:
                tokens = span_token.tokenize_inner(text)
                code = _inline_text(tokens)
                _unlink(tokens)
            text = code
        else:
            text = _rough_text(text)
    return ParsedHeading(level, text, line, start, line_end)


def first_paragraph(content: str) -> tuple[int, int] | None:
    """``[start, end)`` of the first top-level paragraph's raw source lines, or ``None``."""
    raw, starts = _lines(content)
    lines = _mistletoe_lines(raw)
    with _LOCK:
        try:
            blocks = _parse_blocks(lines, _new_root())[0].children
        except RecursionError:
            return None
    for tok in blocks:
        if isinstance(tok, _Paragraph):
            first = tok.line_number - 1
            return starts[first], min(starts[first + tok.line_count], len(content))
    return None
