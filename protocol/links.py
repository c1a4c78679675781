"""Links in markdown (docs/SPEC.md §5.9): which links a body holds, and where each one leads.

Both sides need the same answer: the server's link index (built in the body index's one pass over
each document) and ``mark check`` on a local folder, before anything is published. So the rules
live here once, as pure functions: ``Extractor`` finds the links of a body fed to it a section
at a time, ``parse_target`` reads a link's target into the document paths it may mean, and
``resolve`` picks the one that exists, given what exists (the caller's view: the server asks
with the reader's read filter, so a link never resolves to a document its reader may not read).

What counts as a link: inline links ``[label](target "title")``, reference links ``[label][ref]``
``[ref][]`` ``[ref]`` with their ``[ref]: target`` definitions anywhere in the document,
autolinks ``<scheme:...>``, bare ``http(s)://``, ``www.`` and ``mark://`` URLs, HTML
``<a href="...">``, and wikilinks ``[[Note]]``, ``[[Note#Heading|label]]`` (Obsidian's). Images
are not links, nor is anything inside code (fenced, indented, or a code span) or an HTML
comment; a target holding a template placeholder (``{{ x }}``) is a template, not a link.
Typed relations (``rel-<predicate>: target`` metadata) are links too; they are not in the body,
so ``relations`` reads them from the metadata.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote

from markproto.protocol import mdoutline, paths
from markproto.protocol.gotext import equal_fold
from markproto.protocol.linkkinds import (
    AUTOLINK,
    EXTERNAL,
    HTML,
    INLINE,
    INTERNAL,
    LABEL_MAX,
    LINKS_MAX,
    MISSING,
    MISSING_ANCHOR,
    OK,
    REFERENCE,
    RELATION,
    TARGET_MAX,
    WIKI,
    Link,
)
from markproto.protocol.mdoutline import OwnSection

__all__ = [
    "Destination",
    "Extractor",
    "Target",
    "World",
    "extract",
    "follow",
    "lands",
    "offsite",
    "parse_target",
    "resolve",
]

# --- extraction ---------------------------------------------------------------------------------

_FENCE = re.compile(r"[ \t]*(?:>[ \t]?)*[ \t]*(`{3,}|~{3,})(.*)")
_FENCE_STARTS = frozenset("`~>")
_LIST_STARTS = frozenset("-*+0123456789")
_PARAGRAPH = re.compile(r"[^\n]+(?:\n(?![ \t]*(?:\n|$))[^\n]*)*+")
"""A run of lines without a blank one (possessive: a long one keeps no backtracking state)."""
_LIST_ITEM = re.compile(r" {0,3}(?:[-*+]|[0-9]{1,9}[.)])(?:[ \t]|$)")
_DEFINITION = re.compile(
    r"[ \t]{0,3}(?:>[ \t]?)*[ \t]*\[((?:\\.|[^\\\[\]]){1,999})\]:[ \t]*"
    r"(?:<([^<>\n]*)>|(\S+))"
    r"""(?:[ \t]+(?:"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|\((?:\\.|[^()\\])*\)))?[ \t]*"""
)
_ESCAPE = re.compile(r"\\[!-/:-@\[-`{-~]")
_TICKS = re.compile(r"`+")
_BRACKETS = re.compile(r"[\[\]]")
_NESTED = re.compile(r"\[[^\[\]]*+(?:\[|\Z)")
"""A ``[`` whose next bracket is another ``[``, or none: where brackets nest (or one is open)."""
_ONE_TICK_SPAN = re.compile(r"`[^`]*`")
_DESTINATION = re.compile(
    r"\([ \t\n]*(?:<((?:\\.|[^<>\\\n])*)>|((?:\\.|[^\s()\\]|\((?:\\.|[^\s()\\])*\))*))"
    r"""(?:[ \t\n]+(?:"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|\((?:\\.|[^()\\])*\)))?[ \t\n]*\)"""
)
_SPACE = "\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
"""What ``\\s`` matches (``str.isspace``), spelled out: in a class, a table lookup a character,
not a test of its category."""
_SIMPLE = re.compile(f"\\(([^{_SPACE}()<>\\\\\"']++)\\)")
"""A destination that is nothing but a target: no space, parenthesis, bracket, escape or quote."""
_SIMPLE_LINK = re.compile(f"\\[([^\\[\\]]*)\\]{_SIMPLE.pattern}")
"""A whole inline link of a label without brackets and a ``_SIMPLE`` destination (most)."""
_WIKI = re.compile(r"\[\[([^\[\]\n]{1,1000})\]\]")
_AUTO = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>")
_ANCHOR_TAG = re.compile(
    r"<a\s(?:[^>]*?\s)?href\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'=<>`]+))[^>]*>", re.IGNORECASE
)
_ID_ATTRIBUTE = re.compile(
    r"\s(id|name)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'=<>`]+))", re.IGNORECASE
)
_ANCHOR_END = re.compile(r"</a\s*>", re.IGNORECASE)
_BARE = re.compile(r"(?:[Hh][Tt][Tt][Pp][Ss]?://|[Mm][Aa][Rr][Kk]://|[Ww][Ww][Ww]\.)[^\s<]*")
_BARE_TRAIL = re.compile(r"[?!.,:*_~'\";]+$")
_COMMENT_END = "-->"
_TEMPLATE = re.compile(r"\{\{|\{%|%7B%7B", re.IGNORECASE)
_FANCY = re.compile(
    r"[\[<*_~`\\\t-\r\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)
"""What ``_plain`` would change in a label but a double space (a fast test for the common
plain one: a class alone is searched for by the regex engine's fast scan)."""
_LABEL_LINK = re.compile(r"!?\[((?:\\.|[^\\\[\]])*)\]\((?:\\.|[^()\\]|\([^()]*\))*\)")
_TAG = re.compile(r"</?[A-Za-z][^>\n]*>")
_MARKS = re.compile(r"\*\*|__|~~|[`*]")
_SPACES = re.compile(r"\s+")
_LABEL_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_new_link = tuple.__new__
"""``Link(...)`` without its Python ``__new__`` (a named tuple's): one made for every link."""
_NOT_REFERENCE = frozenset({" ", "x", "X", ""})
"""Bracketed text that is a task box or empty, never a shortcut reference."""


def _marked(text: str) -> bool:
    """Whether ``text`` may hold a link or a definition (a paragraph without these holds none)."""
    return "[" in text or "<" in text or "://" in text or "www." in text


def _blocks(text: str) -> bool:
    """Whether a section may be more than paragraphs: a fence, a comment, an indented line."""
    return (
        "```" in text
        or "~~~" in text
        or "<!--" in text
        or "\n    " in text
        or "\n\t" in text
        or text.startswith(("    ", "\t"))
    )


def _plain(label: str) -> str:
    """A label as plain text on one line: nested links and images by their text, tags and
    emphasis marks dropped, escapes resolved, whitespace collapsed, cut to ``LABEL_MAX``."""
    if (
        len(label) <= LABEL_MAX
        and not _FANCY.search(label)
        and "  " not in label
        and label.strip() == label
    ):
        return label
    if "[" in label:
        label = _LABEL_LINK.sub(r"\1", label)
    if "<" in label:
        label = _TAG.sub("", label)
    label = _MARKS.sub("", label)
    if "\\" in label:
        label = _LABEL_ESCAPE.sub(r"\1", label)
    label = " ".join(label.split())
    return label if len(label) <= LABEL_MAX else label[: LABEL_MAX - 1] + "\u2026"


def _normal(label: str) -> str:
    """A reference label as CommonMark matches it: case-folded, whitespace collapsed."""
    return _SPACES.sub(" ", label.strip()).casefold()


_LABEL_DEFINED = re.compile(r"\[((?:[^\\\[\]\n]++|\\.)+)\]:")
"""Every link reference definition's label and colon (``_DEFINITION``), wherever it stands,
and longer ones: a run of plain characters is read at once, not one alternative a character."""
_LABEL_DEFINED_BYTES = re.compile(_LABEL_DEFINED.pattern.encode())


class _Labels:
    """The labels a body may define, as a bit set (two bits a label, 16 bits per ``]:`` in the
    body): every label ``_DEFINITION`` may read is in it, and a few that are not. A reference
    use whose label is not in it can never be matched, so it is not kept."""

    __slots__ = ("_bits", "_seen")

    def __init__(self, body: str | bytes) -> None:
        count = body.count(b"]:" if isinstance(body, bytes) else "]:")  # type: ignore[arg-type]
        self._bits = max(64, 16 * count)
        self._seen = bytearray((self._bits + 7) >> 3 if count else 0)
        if not count:
            return
        if isinstance(body, bytes):
            for label in _LABEL_DEFINED_BYTES.finditer(body):
                self._add(_normal(label.group(1).decode("utf-8", "replace")))
        else:
            for found in _LABEL_DEFINED.finditer(body):
                self._add(_normal(found.group(1)))

    def _places(self, label: str) -> tuple[int, int]:
        h = hash(label)
        return h % self._bits, (h >> 32) % self._bits

    def _add(self, label: str) -> None:
        for place in self._places(label):
            self._seen[place >> 3] |= 1 << (place & 7)

    def __contains__(self, label: str) -> bool:
        if not self._seen:
            return False
        one, two = self._places(label)
        return bool(self._seen[one >> 3] >> (one & 7) & 1 and self._seen[two >> 3] >> (two & 7) & 1)


class Extractor:
    """The links of one body, fed a section at a time (``feed``), then ``links()``.

    One pass over the text: reference uses wait for their definitions, which may come later in
    the document, and are matched at the end (``references``). At most ``LINKS_MAX`` links are
    kept. With a ``sink``, each link but the reference links is handed to it as it is found
    (``drain`` then gives none): a caller that packs links as they come never holds them as
    objects, and reads the reference links from ``references`` as it packs.
    """

    def __init__(self, body: str | bytes, sink: Callable[[Link], None] | None = None) -> None:
        self._body = body
        self._links: list[Link] = []
        self._sink = sink
        self._kept = 0
        """Links kept so far, those ``drain`` gave included."""
        self._labels = _Labels(body)
        self._uses = bytearray()
        """Each reference use kept, one after the other (``_use``): a body dense with uses
        holds a few bytes each, not a tuple and two strings."""
        self._use_count = 0
        self._use_line = 0
        """The line of the last use kept (a use holds its line as a rise from it)."""
        self._sections: list[str] = []
        self._section_starts = array("I")
        """The sections of the uses kept, each with the number of its first use."""
        self._definitions: dict[str, str] = {}
        self.ids: list[str] = []
        """The ids HTML elements of the body set (``<a name="x">``, ``id="x"``): anchors a
        link may name besides the headings'."""
        self._end = 0
        """Where the last section fed ends (a heading's line starts there)."""
        self._counted = 0
        self._line = 1
        """The line number at offset ``_counted``."""

    def section(self, start: int, stop: int, section: OwnSection) -> None:
        """One of ``mdoutline.iter_own_sections(body)``, in order: its heading's line, then its
        own text (``section.text``, decoded already)."""
        self.section_parts(start, stop, section.anchor, section.level, section.text)

    def section_parts(self, start: int, stop: int, anchor: str, level: int, text: str) -> None:
        """``section`` of a section given by the parts it reads (no ``OwnSection`` made)."""
        if level:
            head = self._body[self._end : start]
            line = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
            self.feed(anchor, line, self._line_at(self._end))
        self.feed(anchor, text, self._line_at(start))
        self._end = stop

    def skip(self, stop: int) -> None:
        """A section up to ``stop`` that holds none of ``feed``'s marks, nor does its heading's
        line: nothing to read in it."""
        self._end = stop

    def _line_at(self, offset: int) -> int:
        body = self._body
        newline = b"\n" if isinstance(body, bytes) else "\n"
        self._line += body.count(newline, self._counted, offset)  # type: ignore[arg-type]
        self._counted = offset
        return self._line

    def feed(self, section: str, text: str, line: int) -> None:
        """One section's raw text (a heading line, or its own text), starting on ``line``."""
        if not _marked(text):
            return
        if not _blocks(text):  # paragraphs alone: no code, no comment can start here
            counted = 0
            for paragraph in _PARAGRAPH.finditer(text):
                whole = not paragraph.start() and paragraph.end() >= len(text) - 1
                lines = text if whole else paragraph.group()  # a final newline changes nothing
                if _marked(lines):
                    line += text.count("\n", counted, paragraph.start())
                    counted = paragraph.start()
                    self._block(lines, line, section)
            return
        fence: tuple[str, int] | None = None
        comment = listed = False
        blank = True
        head, begin, end = "", -1, -1
        """The block so far: ``head`` (a first line a comment's end blanked the start of), then
        ``text[begin:end]``: a block's lines are cut from ``text`` once, not one by one and
        joined (``begin`` -1: no block)."""
        start = line
        at = 0
        rows = text.split("\n") if len(text) <= _SPLIT_MAX else _lines(text)
        for number, raw in enumerate(rows, line):
            here = at
            at += len(raw) + 1
            stop = at - 1
            stripped = raw.strip()
            first = stripped[:1]
            if fence is not None:
                if first in _FENCE_STARTS and (found := _FENCE.match(raw)):
                    ticks, rest = found.groups()
                    if ticks[0] == fence[0] and len(ticks) >= fence[1] and not rest.strip():
                        fence = None
                continue
            patched = comment
            if comment:
                closed = raw.find(_COMMENT_END)
                if closed < 0:
                    continue
                comment = False
                raw = " " * (closed + 3) + raw[closed + 3 :]
                stripped = raw.strip()
                first = stripped[:1]
            if not stripped:
                if begin >= 0:  # most blank lines follow another, or a fence: no call
                    self._flush(text, head, begin, end, start, section)
                head, begin, blank = "", -1, True
                continue
            if first in _FENCE_STARTS and (found := _FENCE.match(raw)):
                ticks, rest = found.groups()
                if not (ticks[0] == "`" and "`" in rest):
                    self._flush(text, head, begin, end, start, section)
                    head, begin, fence = "", -1, (ticks[0], len(ticks))
                    continue
            if blank and begin < 0 and not listed and raw[:1] in " \t":
                indent = 4 if raw[:1] == "\t" else len(raw) - len(raw.lstrip(" "))
                if indent >= 4 or raw[indent : indent + 1] == "\t":
                    continue  # an indented code block
            if first in _LIST_STARTS and _LIST_ITEM.match(raw):
                listed = True
            elif blank and first != ">" and raw[:1] not in " \t":
                listed = False
            if first == "<" and stripped.startswith("<!--") and _COMMENT_END not in stripped[4:]:
                self._flush(text, head, begin, end, start, section)
                head, begin, comment = "", -1, True
                continue
            if begin < 0:  # a block's first line (a patched one is always the first)
                start = number
                head, begin = (raw, stop) if patched else ("", here)
            end = stop
            blank = False
        self._flush(text, head, begin, end, start, section)

    def _flush(self, text: str, head: str, begin: int, end: int, line: int, section: str) -> None:
        """The block ``feed`` gathered (if any): ``head`` and ``text[begin:end]``."""
        if begin < 0:
            return
        if not head and not begin and end >= len(text) - 1:
            self._block(text, line, section)  # the whole text: a final newline changes nothing
        else:
            self._block(head + text[begin:end], line, section)

    def _block(self, text: str, line: int, section: str) -> None:
        """One paragraph-like run of lines: definitions at its start, then its inline links."""
        pos = 0
        while pos < len(text):
            stop = text.find("\n", pos)
            stop = len(text) if stop < 0 else stop
            if "]:" not in text[pos:stop]:
                break
            found = _DEFINITION.fullmatch(text, pos, stop)
            if found is None:
                break
            key = _normal(found.group(1))
            target = found.group(2) if found.group(2) is not None else found.group(3)
            self._definitions.setdefault(key, target)
            pos = stop + 1
            line += 1
        if pos < len(text):
            self._inline(text[pos:] if pos else text, line, section)

    def _use(self, line: int, section: str, label: str, reference: str) -> None:
        """A reference use, kept only if its reference may be defined: its line (as a rise
        from the last use's, zigzag: never less than 0), its normalized reference, and its
        label only where that differs from the reference (a shortcut ``[ref]`` most often
        is its own)."""
        reference = _normal(reference)
        if reference not in self._labels:
            return
        if not self._sections or self._sections[-1] != section:
            self._sections.append(section)
            self._section_starts.append(self._use_count)
        self._use_count += 1
        uses = self._uses
        rise = line - self._use_line
        self._use_line = line
        _put(uses, rise << 1 if rise >= 0 else -rise << 1 | 1)
        data = reference.encode("utf-8", "surrogatepass")
        apart = label != reference
        _put(uses, len(data) << 1 | apart)
        uses += data
        if apart:
            data = label.encode("utf-8", "surrogatepass")
            _put(uses, len(data))
            uses += data

    def _add(self, line: int, section: str, target: str, label: str, syntax: str) -> None:
        link = self._link(line, section, target, label, syntax)
        if link is not None:  # ``_keep`` inlined: one call less a link
            if self._sink is not None:
                self._sink(link)
            else:
                self._links.append(link)

    def _keep(self, link: Link) -> None:
        if self._sink is not None:
            self._sink(link)
        else:
            self._links.append(link)

    def _link(self, line: int, section: str, target: str, label: str, syntax: str) -> Link | None:
        """The link, counted among those kept, or None where it is not kept."""
        target = target.strip()
        if (
            self._kept >= LINKS_MAX
            or not target
            or len(target) > TARGET_MAX
            or (("{" in target or "%" in target) and _TEMPLATE.search(target))
        ):
            return None
        self._kept += 1
        return _new_link(Link, (line, section, target, _plain(label), syntax, ""))

    def _inline(self, text: str, line: int, section: str) -> None:
        bare = "://" in text or "www." in text
        if "[" not in text and "<" not in text and not bare:
            return
        counted, counted_line = 0, line
        """Lines are counted on from the last offset asked for: links are found in the order
        of the text (and then the bare URLs, again from the start)."""

        def line_of(offset: int) -> int:
            nonlocal counted, counted_line
            if offset < counted:
                counted, counted_line = 0, line
            counted_line += text.count("\n", counted, offset)
            counted = offset
            return counted_line

        masked = _masked(text)
        """``text`` with its code spans and backslash escapes blanked (the same offsets): where
        link syntax is looked for. Labels and targets are read from ``text``."""
        closing: dict[int, int] | _Closing | None = None
        """Each ``[``'s matching ``]``; None where nothing nests (the common case), so that a
        ``[``'s match is the next ``]``."""
        if _NESTED.search(masked) is not None:
            closing = _closing_brackets(masked) if len(masked) < _SMALL else _Closing(masked)
        taken = array("I")
        """Where links and comments start and end, ascending (kept only if ``bare``): a bare
        URL there is none of its own."""
        pos, size = 0, len(masked)
        bracket = angle = -1
        """The next ``[`` and ``<`` at or after ``pos`` (``size``: none)."""
        while True:
            if bracket < pos:
                bracket = masked.find("[", pos)
                bracket = size if bracket < 0 else bracket
            if angle < pos:
                angle = masked.find("<", pos)
                angle = size if angle < 0 else angle
            at = bracket if bracket < angle else angle
            if at == size:
                break
            pos = at + 1
            if masked[at] == "<":
                pos = self._angle(text, at, line_of, section)
                if pos > at + 1 and bare:
                    taken.extend((at, pos))
                continue
            image = at > 0 and masked[at - 1] == "!"
            if (
                closing is None
                and (simple := _SIMPLE_LINK.match(masked, at)) is not None
                and (masked is text or text.startswith(simple.group(), at))
            ):  # what the steps below find for it (nothing nests; nothing masked in it)
                pos = simple.end()
                if bare:
                    taken.extend((at, pos))
                if not image:
                    self._add(line_of(at), section, simple.group(2), simple.group(1), INLINE)
                continue
            wiki = _WIKI.match(masked, at) if masked.startswith("[[", at) else None
            if wiki is not None:
                pos = wiki.end()
                if bare:
                    taken.extend((at, pos))
                inner = text[at + 2 : pos - 2]
                target, bar, label = inner.replace("\\|", "|").partition("|")
                name = target.split("#", 1)[0]
                if image and "." in paths.base(name) and not name.lower().endswith(".md"):
                    continue  # an embedded image or file, not a note
                self._add(line_of(at), section, target, label if bar else target, WIKI)
                continue
            close = masked.find("]", at) if closing is None else closing.get(at)
            if close is None:
                continue
            label = text[at + 1 : close]
            after = close + 1
            if masked.startswith("(", after):
                if simple := _SIMPLE.match(text, after):  # most: (target) alone
                    target, pos = simple.group(1), simple.end()
                elif (destination := _DESTINATION.match(text, after)) is not None:
                    target = destination.group(1)
                    if target is None:
                        target = destination.group(2)
                    target, pos = unescaped(target), destination.end()
                else:
                    target = ""
                if target or pos > after:
                    if bare:
                        taken.extend((at, pos))
                    if not image:
                        self._add(line_of(at), section, target, label, INLINE)
                    continue
            if (
                masked.startswith("[", after)
                and (end := masked.find("]", after) if closing is None else closing.get(after))
                is not None
            ):
                reference = text[after + 1 : end] or label
                pos = end + 1
                if not image:
                    self._use(line_of(at), section, label, reference)
                continue
            if not image and label not in _NOT_REFERENCE and not label.startswith("^"):
                self._use(line_of(at), section, label, label)
            # not a link: brackets inside may still hold one
        if bare:
            self._bare(masked, taken, line_of, section)

    def _bare(
        self, masked: str, taken: array[int], line_of: Callable[[int], int], section: str
    ) -> None:
        """Bare URLs (GFM's extended autolinks, and ``mark://`` ones) in ``masked`` outside the
        ``taken`` spans (links and comments), each span read as blanks: the URLs of the gaps
        between them, a gap after a span starting after a blank. ``taken`` gets an empty span
        at the end (the gap after the last one): its caller is done with it."""
        gap, find = 0, masked.find
        www = "w." in masked or "W." in masked  # most paragraphs hold none: one test a gap
        taken.extend((len(masked), len(masked)))
        spans = iter(taken)
        for start, end in zip(spans, spans, strict=True):
            if start > gap and (
                find("://", gap, start) >= 0
                or (www and (find("w.", gap, start) >= 0 or find("W.", gap, start) >= 0))
            ):  # most gaps hold no URL (``://``, ``www.``): the links' own targets held it
                self._bare_in(masked, gap, start, line_of, section)
            if end > gap:
                gap = end

    def _bare_in(
        self, masked: str, gap: int, stop: int, line_of: Callable[[int], int], section: str
    ) -> None:
        for found in _BARE.finditer(masked, gap, stop):
            at = found.start()
            before = masked[at - 1] if at > gap else " " if at else ""
            if before and not (before.isspace() or before in "*_~("):
                continue
            url = _BARE_TRAIL.sub("", found.group())
            while url.endswith(")") and url.count(")") > url.count("("):
                url = url[:-1]
            if "://" in url or url[:4].lower() == "www.":
                self._add(line_of(at), section, url, url, AUTOLINK)

    def _angle(self, text: str, at: int, line_of: Callable[[int], int], section: str) -> int:
        """An autolink, an HTML anchor or a comment at ``at``; where scanning goes on."""
        if text.startswith("<!--", at):
            end = text.find(_COMMENT_END, at + 4)
            return len(text) if end < 0 else end + 3
        found = _AUTO.match(text, at)
        if found is not None:
            self._add(line_of(at), section, found.group(1), found.group(1), AUTOLINK)
            return found.end()
        found = _ANCHOR_TAG.match(text, at)
        if found is not None:
            self._tag_ids(found.group())
            href = next(group for group in found.groups() if group is not None)
            closed = _ANCHOR_END.search(text, found.end(), found.end() + 1000)
            label = text[found.end() : closed.start()] if closed is not None else ""
            self._add(line_of(at), section, href, label, HTML)
            return closed.end() if closed is not None else found.end()
        found = _TAG.match(text, at)
        if found is None:
            return at + 1
        if "=" in found.group():
            self._tag_ids(found.group())
        return found.end()

    def _tag_ids(self, tag: str) -> None:
        """The ids an HTML tag gives the place it stands (``id``, and ``name`` on ``<a>``)."""
        for found in _ID_ATTRIBUTE.finditer(tag):
            if found.group(1).lower() == "id" or tag[:3].lower() in ("<a ", "<a\t", "<a\n"):
                value = next(group for group in found.groups()[1:] if group is not None)
                if value and len(self.ids) < LINKS_MAX:
                    self.ids.append(value)

    def drain(self) -> list[Link]:
        """The links found since the last drain, in the order found, but the reference links
        (they wait for their definitions): a caller that packs them as it goes holds a
        section's links, not the body's. ``links`` then gives the rest; the links in the order
        of the body are those of every drain and then ``links``, sorted stably by line."""
        found, self._links = self._links, []
        return found

    def links(self) -> list[Link]:
        """Every link fed (but those ``drain`` gave), in the order of the body (reference links
        matched now)."""
        for link in self.references():
            self._keep(link)
        self._links.sort(key=lambda link: link.line)
        return self._links

    def reference_sections(self) -> list[str]:
        """The sections holding the reference uses that ``references`` will match."""
        return self._sections

    def references(self) -> Iterator[Link]:
        """The reference links, once every section is fed, in the order of the body (lines
        never fall), each matched to its definition as it is read: a caller packing the links
        merges these by line after the others it was given, and never holds them all. Once:
        the uses are let go as they are read."""
        uses, starts, sections = self._uses, self._section_starts, self._sections
        count, definitions = self._use_count, self._definitions
        self._uses, self._section_starts, self._sections = bytearray(), array("I"), []
        self._use_count = self._use_line = 0
        at = line = 0
        section = ""
        changes = iter(zip(starts, sections, strict=True))
        change, upcoming = next(changes, (count, ""))
        for number in range(count):
            if number == change:
                section = upcoming
                change, upcoming = next(changes, (count, ""))
            rise, at = _get(uses, at)
            line += -(rise >> 1) if rise & 1 else rise >> 1
            size, at = _get(uses, at)
            end = at + (size >> 1)
            reference = label = uses[at:end].decode("utf-8", "surrogatepass")
            at = end
            if size & 1:
                size, at = _get(uses, at)
                label = uses[at : at + size].decode("utf-8", "surrogatepass")
                at += size
            target = definitions.get(reference)
            if target is not None:
                link = self._link(line, section, unescaped(target), label, REFERENCE)
                if link is not None:
                    yield link


_SPLIT_MAX = 1 << 16
"""A section's text this long is split into its lines at once (faster); a longer one's lines
are cut one at a time (``_lines``), never all held."""


def _lines(text: str) -> Iterator[str]:
    """``text.split("\n")``, one line at a time."""
    at = 0
    while True:
        stop = text.find("\n", at)
        if stop < 0:
            yield text[at:]
            return
        yield text[at:stop]
        at = stop + 1


def _put(out: bytearray, value: int) -> None:
    """``value`` (>= 0) appended to ``out`` as a varint: 7 bits a byte, low bits first."""
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _get(data: bytearray, at: int) -> tuple[int, int]:
    """The varint ``_put`` wrote at ``at``, and where the next value starts."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def unescaped(target: str) -> str:
    """A destination with its backslash escapes resolved."""
    return _LABEL_ESCAPE.sub(r"\1", target) if "\\" in target else target


def _code_spans(text: str) -> list[tuple[int, int]]:
    """The code spans of a paragraph (CommonMark: a backtick run opens one, the next run of the
    same length closes it; a run without a partner is literal), ascending."""
    if "`" not in text:
        return []
    escaped = {m.start() + 1 for m in _ESCAPE.finditer(text) if text[m.start() + 1] == "`"}
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(text)]
    runs = [(s + (s in escaped), e) for s, e in runs if e - s - (s in escaped) > 0]
    partner: dict[int, int] = {}
    last: dict[int, int] = {}
    for index in range(len(runs) - 1, -1, -1):
        size = runs[index][1] - runs[index][0]
        if size in last:
            partner[index] = last[size]
        last[size] = index
    spans = []
    index = 0
    while index < len(runs):
        other = partner.get(index)
        if other is None:
            index += 1
            continue
        spans.append((runs[index][0], runs[other][1]))
        index = other + 1
    return spans


def _masked(text: str) -> str:
    """``text`` with each code span and each backslash escape replaced by as many spaces."""
    if "`" not in text and "\\" not in text:
        return text
    if "\\" not in text and "``" not in text:  # single backticks: each pairs with the next
        return _ONE_TICK_SPAN.sub(_spaces, text)
    spans = _code_spans(text)
    if "\\" in text:
        spans += [m.span() for m in _ESCAPE.finditer(text)]
    return _blanked(text, spans) if spans else text


def _blanked(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with the (possibly overlapping) ``spans`` replaced by spaces."""
    if not spans:
        return text
    parts, done = [], 0
    for start, end in sorted(spans):
        if end <= done:
            continue
        start = max(start, done)
        parts += [text[done:start], " " * (end - start)]
        done = end
    parts.append(text[done:])
    return "".join(parts)


def _spaces(found: re.Match[str]) -> str:
    return " " * (found.end() - found.start())


_SMALL = 1 << 14
"""A paragraph this long holds its brackets' matches in a dict (faster); a longer one in
arrays (``_Closing``)."""


def _closing_brackets(masked: str) -> dict[int, int]:
    """``_Closing`` as a dict, for a short paragraph."""
    stack: list[int] = []
    out: dict[int, int] = {}
    for found in _BRACKETS.finditer(masked):
        at = found.start()
        if masked[at] == "[":
            stack.append(at)
        elif stack:
            out[stack.pop()] = at
    return out


class _Closing:
    """Each ``[``'s matching ``]`` (balanced) in a masked paragraph (``get``), held as two
    arrays: where each ``[`` is, and where its ``]`` is (or ``_OPEN``)."""

    __slots__ = ("_closes", "_opens")

    def __init__(self, masked: str) -> None:
        opens, closes = array("I"), array("I")
        stack: list[int] = []
        for found in _BRACKETS.finditer(masked):
            at = found.start()
            if masked[at] == "[":
                stack.append(len(opens))
                opens.append(at)
                closes.append(_OPEN)
            elif stack:
                closes[stack.pop()] = at
        self._opens, self._closes = opens, closes

    def get(self, at: int) -> int | None:
        """The ``]`` matching the ``[`` at ``at``, or None."""
        index = bisect_left(self._opens, at)
        if index == len(self._opens) or self._opens[index] != at:
            return None
        close = self._closes[index]
        return None if close == _OPEN else close


_OPEN = 0xFFFFFFFF
"""A ``[`` without its ``]``."""


def extract(body: str | bytes) -> list[Link]:
    """The links of a whole body, in sections as ``mdoutline`` cuts them: what the server's
    analysis finds in the same body."""
    found = Extractor(body)
    for start, stop, section in mdoutline.iter_own_sections(body):
        found.section(start, stop, section)
    return found.links()


# --- targets ------------------------------------------------------------------------------------

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{1,31}:")


@dataclass(frozen=True, slots=True)
class Target:
    """What a link's target means. An internal target names a document on this server:
    ``path`` as written (cleaned), ``candidates`` the documents it may be, in order, and a
    wikilink's file ``name`` to look for when none exists; ``anchor`` is the section asked
    for. An external one is a URL elsewhere (``url``); a ``mark://`` URL is internal or
    external depending on whether ``authority`` is this server's, which only the server knows.
    """

    path: str = ""
    candidates: tuple[str, ...] = ()
    anchor: str = ""
    name: str = ""
    authority: str = ""
    url: str = ""

    @property
    def internal(self) -> bool:
        return bool(self.path)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every document path (and wikilink file name, lower-cased, no slash) whose coming
        or going may change what this target resolves to."""
        name = (paths.base(self.name).lower(),) if self.name else ()
        return self.candidates + name


def parse_target(raw: str, source: str, syntax: str) -> Target:
    """Read a link's target as written in the document at ``source``.

    Relative paths resolve against the source's folder, ``/``-rooted ones against the root.
    A path ending in ``.md`` names that document; one ending in ``/`` (or the root) names
    ``<path>.md`` or ``<path>/index.md``, whichever exists, and so does any other path (a
    site-style link without ``.md``). ``#anchor`` alone is the source itself. A wikilink is a
    path relative to its folder, then to the root, then its file name anywhere (when unique).
    """
    if syntax == WIKI:
        return _wiki(raw, source)
    text, url = _written(raw, syntax)
    if url:
        return Target(url=text)
    if text[:7].lower() == "mark://":
        return _mark_url(text)
    location, _, anchor = text.partition("#")
    location = location.partition("?")[0]
    anchor = unquote(anchor)
    if not location:
        return Target(source, (source,), anchor)
    location = unquote(location)
    rooted = location if location.startswith("/") else paths.parent(source) + "/" + location
    return _site_path(rooted, anchor)


def offsite(raw: str, syntax: str) -> bool:
    """Whether a target written so is a URL off every server, whatever document holds it: one
    ``parse_target`` gives no path (a ``mark://`` URL is not: it may name this server)."""
    if raw.startswith(_WEB):  # most: what ``_written`` reads it as, without reading it
        return syntax != WIKI
    return syntax != WIKI and _written(raw, syntax)[1]


_WEB = ("https://", "http://")


def _written(raw: str, syntax: str) -> tuple[str, bool]:
    """A target but a wikilink's as written, out of its angle brackets (a ``www.`` autolink as
    an ``http://`` URL), and whether it is a URL off every server (``offsite``)."""
    text = raw.strip()
    if text.startswith("<") and text.endswith(">"):
        text = text[1:-1]
    if syntax == AUTOLINK and text[:4].lower() == "www.":
        return "http://" + text, True
    scheme = _SCHEME.match(text)
    if scheme is not None:
        return text, scheme.group().lower() != "mark:" or text[5:7] != "//"
    return text, text.startswith("//") or syntax == AUTOLINK


def _site_path(rooted: str, anchor: str, authority: str = "") -> Target:
    path = paths.clean(rooted)
    if path.endswith(".md"):
        return Target(path, (path,), anchor, authority=authority)
    if path == "/":
        return Target(path, ("/index.md",), anchor, authority=authority)
    return Target(path, (path + ".md", path + "/index.md"), anchor, authority=authority)


def _mark_url(text: str) -> Target:
    from markproto.protocol.errors import InvalidURL
    from markproto.protocol.url import parse_url

    try:
        url = parse_url(text)
    except InvalidURL:
        return Target(url=text)
    return _site_path(url.path, url.anchor, url.authority)


def _wiki(raw: str, source: str) -> Target:
    name, _, anchor = raw.strip().partition("#")
    if anchor.startswith("^"):
        anchor = ""  # a block reference: the note itself
    name = name.strip()
    if not name:
        return Target(source, (source,), anchor.strip())
    if not name.lower().endswith(".md"):
        name += ".md"
    relative = paths.clean(paths.parent(source) + "/" + name)
    rooted = paths.clean("/" + name)
    candidates = (relative,) if relative == rooted else (relative, rooted)
    return Target(relative, candidates, anchor.strip(), name=name)


def resolve(
    target: Target,
    exists: Callable[[str], bool],
    named: Callable[[str], Iterable[str]],
) -> str | None:
    """The document ``target`` leads to: its first candidate that ``exists``; for a wikilink
    without one, the only document ``named`` by its file name (case-insensitively) whose path
    ends with the name as written; else None. ``named`` gives the documents with a file name
    (lower-cased): the caller decides which exist for whom."""
    for candidate in target.candidates:
        if exists(candidate):
            return candidate
    if not target.name:
        return None
    wanted = "/" + target.name.lower().lstrip("/")
    candidates = named(paths.base(target.name).lower())
    found = [path for path in candidates if path.lower().endswith(wanted)]
    return found[0] if len(found) == 1 else None


# --- where a link leads, in a given world ------------------------------------------------------


class World(Protocol):
    """What exists, as one reader sees it (the server's index for a token, a local folder)."""

    def exists(self, path: str) -> bool: ...

    def named(self, name: str) -> Iterable[str]:
        """The documents whose file name, lower-cased, is ``name``."""
        ...

    def anchors(self, path: str) -> tuple[Sequence[str], Sequence[str], Sequence[str]]:
        """An existing document's heading anchors, heading texts and HTML ids."""
        ...

    def ours(self, authority: str) -> bool:
        """Whether a ``mark://`` URL of ``authority`` names this server."""
        ...


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a link leads: its kind, the document (or the path it names when none answers, or
    the URL of an external link), the anchor, and its state."""

    kind: str
    target: str
    anchor: str
    state: str


def _elsewhere(target: Target, world: World) -> bool:
    """Whether ``target`` leads off this server (a URL, or a ``mark://`` URL of another)."""
    return not target.internal or bool(target.authority and not world.ours(target.authority))


def lands(link: Link, source: str, world: World) -> str | None:
    """The document ``link`` leads to in ``world`` (what ``follow`` names when its state is not
    ``MISSING`` or ``EXTERNAL``), or None; the cheap part of ``follow``, anchors unchecked."""
    target = parse_target(link.target, source, link.syntax)
    return None if _elsewhere(target, world) else resolve(target, world.exists, world.named)


def follow(link: Link, source: str, world: World) -> Destination:
    """Where ``link`` (written in document ``source``) leads in ``world`` (SPEC §5.9)."""
    target = parse_target(link.target, source, link.syntax)
    kind = RELATION if link.syntax == RELATION else INTERNAL
    if _elsewhere(target, world):
        url = target.url or link.target
        return Destination(kind if kind == RELATION else EXTERNAL, url, "", EXTERNAL)
    found = resolve(target, world.exists, world.named)
    if found is None:
        return Destination(kind, target.path, target.anchor, MISSING)
    if not target.anchor:
        return Destination(kind, found, "", OK)
    anchor = _anchor(target.anchor, *world.anchors(found))
    if anchor is None:
        return Destination(kind, found, target.anchor, MISSING_ANCHOR)
    return Destination(kind, found, anchor, OK)


def _anchor(
    wanted: str, anchors: Sequence[str], texts: Sequence[str], ids: Sequence[str]
) -> str | None:
    """The anchor ``wanted`` names (§9.4, then the document's HTML ids): the heading's own anchor
    when a heading's anchor or slug rule found it (``[[Note#Some Heading]]`` is
    ``#some-heading``), else as written; None when nothing answers to it."""
    found = mdoutline.find_anchor(wanted, anchors, texts)
    wanted = wanted.strip().removeprefix("#")
    if found is not None:
        anchor = anchors[found]
        return anchor if equal_fold(anchor, wanted) or anchor == mdoutline.slug(wanted) else wanted
    return wanted if any(equal_fold(i, wanted) for i in ids) else None
