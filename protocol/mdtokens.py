"""mistletoe held to CommonMark: the block parse of a piece and the inline parse of heading
text that ``mdparse`` hands over when its own readings cannot say.

mistletoe's block parser runs with a private set of token classes that fix where it strays from
CommonMark (setext headings in block quotes, lazy continuation lines, lenient tables, list
markers, HTML block ends, link reference definitions followed by paragraph text). A module of
its own so that mistletoe (whose import scans every code point for its punctuation set: 0.4 s
of CPU) is loaded only by ``mdparse``'s first piece or heading text that needs it.
"""

# mistletoe ships type information but leaves its functions unannotated.
# mypy: disable-error-code="no-untyped-call"
from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mistletoe import block_token, block_tokenizer, span_token
from mistletoe import token as mistletoe_token

from markproto.protocol.mdparse import (
    ATX,
    HTML_OPEN,
    RAW_HTML_END,
    RAW_HTML_OPEN,
    atx,
    html_closed,
    lines_of,
)

__all__ = ["first_paragraph", "inline_parser", "parse_piece"]


# --- mistletoe, held to CommonMark block structure --------------------------------------------

_LOCK = threading.Lock()
"""mistletoe keeps parse state in module and class globals, so every use holds this lock (never
between pieces)."""

_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_THEMATIC = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
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
        found = atx(line)
        if found is None:
            return False
        cls.level, cls.content, cls.closing_sequence = *found, ""
        return True


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


class _HtmlBlock(block_token.HtmlBlock):
    """HTML block whose raw-text kind (``<pre>``, ``<script>``, ...) starts in any letter case
    and ends at any of the four closing tags, as CommonMark says (mistletoe wants the same tag)."""

    @classmethod
    def start(cls, line: str) -> int | bool:
        if HTML_OPEN.match(line) is None:
            return False
        if RAW_HTML_OPEN.match(line):
            cls._end_cond = RAW_HTML_END
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
            if end is not None and html_closed(end, line):
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
                closed = html_closed(end, rest) if end else not rest.strip()
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
            self.block = None if end and html_closed(end, rest) else "<" + end
            self.paragraph = None
        elif ATX.match(rest) or _THEMATIC.match(rest):
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


def _mistletoe_lines(raw: list[str]) -> list[str]:
    """Lines as mistletoe reads them: CRLF made LF, each ending in ``\\n``."""
    return [line[:-1] + "\n" if line.endswith("\r") else line + "\n" for line in raw]


def _unlink(tokens: Iterable[Any]) -> None:
    """Drop a block tree's parent links, so each piece's tree is freed when the next is built,
    not whenever the cycle collector runs."""
    for tok in tokens:
        vars(tok).pop("_parent", None)
        children = tok.children
        if children:
            _unlink(children)


def parse_piece(raw: list[str]) -> tuple[list[tuple[int, str, int]], int, bool, dict[str, Any]]:
    """The block parse of one piece's lines (without their ``\\n``): each heading with inline
    content as its level, inline source and line number (from 0), the line count, whether the
    last block may still be open at the end (``_parse_blocks``) and the link reference
    definitions the piece holds. The tree is unlinked before this returns."""
    lines = _mistletoe_lines(raw)
    with _LOCK:
        root = _new_root()
        document, open_ = _parse_blocks(lines, root)
    found = [
        (tok.level, tok.content, tok.line_number - 1)
        for tok in _walk(document.children)
        if tok.content  # goldmark skips a heading without inline content
    ]
    _unlink(document.children)
    return found, len(lines), open_, root.footnotes


@contextmanager
def inline_parser(definitions: dict[str, Any]) -> Iterator[Callable[[str], str]]:
    """mistletoe's inline parser of heading sources, giving their text (``_inline_text``), with
    link references resolved against ``definitions``; it holds ``_LOCK`` while open."""

    def parse(source: str) -> str:
        tokens = span_token.tokenize_inner(source)
        text = _inline_text(tokens)
        _unlink(tokens)
        return text

    with _LOCK:
        root = _new_root(definitions)
        with _patched(
            (span_token, "_token_types", _SPAN_TOKENS), (mistletoe_token, "_root_node", root)
        ):
            yield parse


def first_paragraph(content: str) -> tuple[int, int] | None:
    """``[start, end)`` of the first top-level paragraph's raw source lines, or ``None``."""
    raw, starts = lines_of(content)
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
