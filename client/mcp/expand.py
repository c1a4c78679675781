"""``budget`` on a lookup: the matched sections themselves, after the table, so one call can carry
the evidence (the reference's lookup expansion, surfaces.md §2.3).

Rows are expanded in rank order, whole sections only, each block headed by a frame line
``>>> path/vN#anchor`` that names the immutable version to cite; a line of a section that itself
starts with ``>>>`` is indented so no text can pose as a frame. A section row brings its section's
own text (its heading and the text up to the next heading: what the server matched; a subsection
that matched is a row of its own). A whole-document row brings the document when it is under
8 KB, else the sections holding every query word, else its outline. Text shown once is a one-line
stub the second time. The top document's ``rel-*`` relations are listed and up to three related
documents on the same server expanded. At most ten documents are fetched. Closing ``>>> note:``
lines say what did not fit, what could not be fetched, and how much was expanded.

The budget is in tokens, about four bytes each, for the whole result: the caller passes the bytes
left after the envelope and the table.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from markproto.client import MarkError, Result
from markproto.client.mcp.envelope import one_line
from markproto.protocol import mdoutline
from markproto.protocol.limits import OUTLINE_THRESHOLD
from markproto.protocol.metadata import split_tags
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL

BYTES_PER_TOKEN = 4
MAX_FETCHES = 10
MAX_RELATED = 3
RELATIONS = (
    "rel-supersedes",
    "rel-superseded-by",
    "rel-depends-on",
    "rel-implements",
    "rel-derived-from",
)
"""Relations whose documents are expanded first, in this order; other ``rel-*`` keys follow."""
FRAME = ">>> "
NOTE_ROOM = 360
"""Bytes kept for the closing notes."""
MIN_BLOCK = 80
"""Fewer bytes left than this and no block can fit: stop fetching."""
NAMES_SHOWN = 4

Fetch = Callable[[MarkURL], Awaitable[Result]]
Label = Callable[[MarkURL], str]
_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Expanded:
    """The frames and notes, and the rows whose section (or document) they show."""

    text: str
    rows: frozenset[MarkURL]


async def expand(
    rows: Sequence[MarkURL], query: str, fetch: Fetch, room: int, label: Label
) -> Expanded:
    """Frames and notes for ``rows`` (documents, ``anchor`` set for a section row) within
    ``room`` bytes; ``label`` names a document in frames (its path, or its full URL)."""
    expansion = _Expansion(query, fetch, room, label)
    text = await expansion.run(rows)
    return Expanded(text, frozenset(expansion.expanded))


class _Expansion:
    def __init__(self, query: str, fetch: Fetch, room: int, label: Label) -> None:
        self.terms = {word for word in _WORD.findall(query.lower()) if len(word) >= 2}
        self.fetch = fetch
        self.room = room - NOTE_ROOM
        self.label = label
        self.used = 0
        self.parts: list[str] = []
        self.docs: dict[MarkURL, Result | None] = {}
        self.shown: set[tuple[MarkURL, str]] = set()
        """(document, anchor) pairs shown; anchor "" is the whole document."""
        self.missed: list[str] = []
        self.failed: list[str] = []
        self.unfetched = 0
        self.expanded: list[MarkURL] = []

    async def run(self, rows: Sequence[MarkURL]) -> str:
        if self.room < MIN_BLOCK:
            return _note("the table used the budget: lower the limit or raise the budget")
        for row in rows:
            if self.room - self.used < MIN_BLOCK:
                break
            doc = await self.document(row)
            if doc is not None and self.row(row, doc):
                self.expanded.append(row)
        related = 0
        top = self.docs.get(replace(rows[0], anchor="")) if rows else None
        if top is not None:
            related = await self.related(rows[0], top)
        return "".join(self.parts) + self.notes(len(self.expanded), len(rows), related)

    async def document(self, url: MarkURL) -> Result | None:
        """The document of a row, fetched once; None when it could not be (noted)."""
        key = replace(url, anchor="")
        if key not in self.docs:
            if len(self.docs) >= MAX_FETCHES:
                self.unfetched += 1
                return None
            try:
                result = await self.fetch(key)
            except MarkError as exc:
                self.failed.append(f"{self.label(key)} ({one_line(exc)})")
                self.docs[key] = None
            else:
                ok = result.status == Status.OK and result.version is not None
                if not ok:
                    self.failed.append(f"{self.label(key)} ({result.status})")
                self.docs[key] = result if ok else None
        return self.docs[key]

    def row(self, url: MarkURL, doc: Result) -> bool:
        """Show one row; True when something of it is now in the result."""
        key = replace(url, anchor="")
        text = doc.body.decode("utf-8", "replace")
        frame = f"{FRAME}{self.label(key)}/v{doc.version}"
        if url.anchor:
            part = own_section(text, url.anchor)
            if part is None:
                where = f"{self.label(key)}#{url.anchor}"
                self.failed.append(f"{where} (no such section in v{doc.version})")
                return False
            return self.add(key, url.anchor, f"{frame}#{url.anchor}", part)
        return self.whole(key, frame, text)

    def whole(self, key: MarkURL, frame: str, text: str, *, sections: bool = True) -> bool:
        """A whole-document row: all of it when small, else (or when it does not fit) the
        sections holding every query word, else the outline."""
        if len(text.encode()) <= OUTLINE_THRESHOLD and self.add(key, "", frame, text, note=False):
            return True
        if (key, "") in self.shown:
            return True
        shown = False
        if sections and self.terms:
            for heading in mdoutline.headings(text):
                part = own_section(text, heading.anchor)
                if part is not None and self.terms <= set(_WORD.findall(part.lower())):
                    shown = (
                        self.add(key, heading.anchor, f"{frame}#{heading.anchor}", part) or shown
                    )
        if shown:
            return True
        outline = mdoutline.outline(text)
        return bool(outline) and self.add(key, "#outline", f"{frame} outline", outline)

    def add(self, key: MarkURL, anchor: str, frame: str, text: str, *, note: bool = True) -> bool:
        """Append one block if it fits (a stub if it was shown already); a block that does not
        fit is named in the closing note unless ``note`` is false (another form will be tried)."""
        if (key, anchor) in self.shown or (key, "") in self.shown:
            return self.place(f"{frame}: shown above\n")
        lines = (
            f" {line}" if line.startswith(FRAME.strip()) else line for line in text.splitlines()
        )
        block = f"{frame}\n" + "\n".join(lines) + "\n"
        if not self.place(block):
            if note:
                where = f"#{anchor}" if anchor and not anchor.startswith("#") else ""
                size = len(block.encode()) // BYTES_PER_TOKEN
                self.missed.append(f"{self.label(key)}{where} (~{size:,} tokens)")
            return False
        self.shown.add((key, anchor))
        return True

    def place(self, block: str) -> bool:
        size = len(block.encode())
        if self.used + size > self.room:
            return False
        self.parts.append(block)
        self.used += size
        return True

    async def related(self, top: MarkURL, doc: Result) -> int:
        """List the top document's relations; expand up to three on the same server."""
        pairs = [
            (key, target)
            for key, value in sorted(doc.publisher_meta.items())
            if key.startswith("rel-")
            for target in split_tags(value)
        ]
        if not pairs or not self.place(
            f"{FRAME}related: " + ", ".join(f"{key} {target}" for key, target in pairs) + "\n"
        ):
            return 0
        order = {key: rank for rank, key in enumerate(RELATIONS)}
        pairs.sort(key=lambda pair: order.get(pair[0], len(RELATIONS)))
        expanded = 0
        seen: set[MarkURL] = {replace(top, anchor="")}
        for _, target in pairs:
            if expanded == MAX_RELATED or self.room - self.used < MIN_BLOCK:
                break
            url = _same_server(top, target)
            if url is None or url in seen or url in self.docs:
                continue  # another server's, listed twice, or a row's (in the table already)
            seen.add(url)
            related = await self.document(url)
            if related is None:
                continue
            frame = f"{FRAME}{self.label(url)}/v{related.version}"
            text = related.body.decode("utf-8", "replace")
            if self.whole(url, frame, text, sections=False):
                expanded += 1
        return expanded

    def notes(self, expanded: int, rows: int, related: int) -> str:
        also = f" and {related} related document{'s' * (related != 1)}" if related else ""
        lines = [f"expanded {expanded} of {rows} rows{also} within the budget"]
        if self.missed:
            lines.append(f"did not fit: {_names(self.missed)}")
        if self.failed:
            lines.append(f"not shown: {_names(self.failed)}")
        if self.unfetched:
            lines.append(
                f"fetch limit reached ({MAX_FETCHES} documents): {self.unfetched} more rows "
                "not expanded"
            )
        text = "".join(_note(line) for line in lines)
        encoded = text.encode()
        if len(encoded) > NOTE_ROOM:
            text = encoded[: NOTE_ROOM - 4].decode("utf-8", "ignore").rsplit("\n", 1)[0] + "\n"
        return text


def own_section(text: str, anchor: str) -> str | None:
    """A heading's line and its own text, up to the next heading of any level."""
    found = mdoutline.headings(text)
    for index, heading in enumerate(found):
        if heading.anchor == anchor:
            end = found[index + 1].start if index + 1 < len(found) else len(text)
            return text[heading.start : end]
    return None


def _same_server(top: MarkURL, target: str) -> MarkURL | None:
    """A relation's target on the top document's server, None for any other server."""
    from markproto.protocol.errors import InvalidURL
    from markproto.protocol.url import parse_url

    try:
        url = parse_url(target, default_host=top.identity)
    except InvalidURL:
        return None
    return url if url.authority == top.authority else None


def _names(items: list[str]) -> str:
    more = len(items) - NAMES_SHOWN
    return ", ".join(items[:NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _note(line: str) -> str:
    return f"{FRAME}note: {line}\n"
