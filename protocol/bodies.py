"""Every markdown body the server generates, rendered byte-exact and parsed back.

The server renders with these functions and the client parses with their inverses, so the parsers
are always tested against what the wire carries. Parsers are strict: a body they accept renders
back to the same bytes, and anything else is ``MalformedResponse``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from urllib.parse import unquote

from markproto.protocol.errors import MalformedResponse
from markproto.protocol.escape import escape, escape_cell, path_escape, unescape
from markproto.protocol.times import format_time, parse_time

HEALTH_BODY: Final = b"# Health Check\n\nServer is healthy.\n"
TRUNCATED_NOTE: Final = b"\n*...truncated, too many entries*\n"

_CONFLICT_HEAD = (
    "# Version Conflict\n\nThe document has been modified since you last fetched it.\n\n"
    "Your version: {your}\nServer version: {server}\n\n"
)
_PUBLISH_ADVICE = "Please fetch the latest version and reapply your edits.\n"
_APPEND_ADVICE = (
    "Fetch the latest version and verify whether your append was applied before retrying.\n"
)


def conflict_body(your: int, server: int, *, append: bool = False) -> bytes:
    """The PUBLISH (or APPEND) conflict body when ``expected-version`` is stale."""
    advice = _APPEND_ADVICE if append else _PUBLISH_ADVICE
    return (_CONFLICT_HEAD.format(your=your, server=server) + advice).encode()


def exists_conflict_body(server: int) -> bytes:
    """The PUBLISH conflict body for ``expected-version: 0`` on an existing document."""
    return (
        f"# Version Conflict\n\nA document already exists at this path (version {server}).\n\n"
        "Fetch the current version and publish with the correct expected-version to update it.\n"
    ).encode()


def _encode(text: str) -> bytes:
    """UTF-8, with undecodable file names (surrogate escapes) written back as their raw bytes,
    as the reference writes a name it read from disk."""
    return text.encode("utf-8", "surrogateescape")


def _lines(body: bytes, heading: str) -> tuple[str, list[str]]:
    """Split a generated body, ``\\n# <heading><text>\\n`` then LF-terminated lines, into the
    heading's text and the lines after the heading line."""
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        raise MalformedResponse("body is not valid UTF-8") from exc
    lines = text.split("\n")
    if len(lines) < 3 or lines[0] or lines[-1] or not lines[1].startswith(heading):
        raise MalformedResponse(f"body does not open with {heading!r}")
    return lines[1][len(heading) :], lines[2:-1]


def _after_blank(lines: list[str]) -> list[str]:
    """The entry lines of a LIST or VERSIONS body, which follow one blank line."""
    if not lines or lines[0]:
        raise MalformedResponse("no blank line after the heading")
    return lines[1:]


# --- LIST -------------------------------------------------------------------------------------

_INDEX_HEADING = "# Index of "
_TRUNCATED_LINES = ["", TRUNCATED_NOTE.decode().strip("\n")]
_INDEX_LINE = re.compile(r"- \[.*\]\(([^()]*)\)")


@dataclass(frozen=True, slots=True)
class IndexEntry:
    name: str
    is_dir: bool


def index_heading(dir_path: str) -> bytes:
    """The opening of a LIST page: the folder is shown with a trailing slash."""
    if not dir_path.endswith("/"):
        dir_path += "/"
    return _encode(f"\n{_INDEX_HEADING}{escape(dir_path)}\n\n")


def index_line(entry: IndexEntry) -> bytes:
    """One entry: escaped name as the label, path-escaped name as the link target."""
    slash = "/" if entry.is_dir else ""
    return _encode(f"- [{escape(entry.name)}{slash}]({path_escape(entry.name)}{slash})\n")


def parse_index(body: bytes) -> list[IndexEntry]:
    """The entries of a LIST page (or a generated directory FETCH), in page order."""
    lines = _after_blank(_lines(body, _INDEX_HEADING)[1])
    if lines[-2:] == _TRUNCATED_LINES:
        lines = lines[:-2]
    entries = []
    for line in lines:
        m = _INDEX_LINE.fullmatch(line)
        if m is None:
            raise MalformedResponse(f"not a LIST entry: {line!r}")
        target = m[1]
        is_dir = target.endswith("/")
        entry = IndexEntry(_unquote(target.removesuffix("/")), is_dir)
        if index_line(entry) != (line + "\n").encode():
            raise MalformedResponse(f"not a LIST entry: {line!r}")
        entries.append(entry)
    return entries


def _unquote(target: str) -> str:
    try:
        return unquote(target, errors="strict")
    except UnicodeDecodeError as exc:
        raise MalformedResponse(f"link target is not UTF-8: {target!r}") from exc


# --- VERSIONS ---------------------------------------------------------------------------------

_HISTORY_HEADING = "# Version History: "
_HISTORY_LINE = re.compile(r"- \[v([0-9]+)\]\([^()]*\) - (\S+)")


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    version: int
    modified: datetime


def render_history(path: str, entries: Sequence[HistoryEntry]) -> bytes:
    """The VERSIONS body; entries are written in the order given (the server gives newest
    first). Link targets path-escape the whole document path, slashes included."""
    target = path_escape(path)
    lines = [f"\n{_HISTORY_HEADING}{escape(path)}\n\n"]
    lines += (
        f"- [v{e.version}]({target}/v{e.version}) - {format_time(e.modified)}\n" for e in entries
    )
    return _encode("".join(lines))


def parse_history(body: bytes) -> list[HistoryEntry]:
    """The entries of a VERSIONS body, in body order; ``modified`` is an aware UTC datetime."""
    heading, lines = _lines(body, _HISTORY_HEADING)
    entries = []
    for line in _after_blank(lines):
        m = _HISTORY_LINE.fullmatch(line)
        if m is None:
            raise MalformedResponse(f"not a VERSIONS entry: {line!r}")
        stamp = parse_time(m[2])
        if stamp is None:
            raise MalformedResponse(f"not a VERSIONS time: {line!r}")
        entries.append(HistoryEntry(int(m[1]), stamp))
    if render_history(unescape(heading), entries) != body:
        raise MalformedResponse("VERSIONS body does not match its document path")
    return entries


# --- LOOKUP -----------------------------------------------------------------------------------

_LOOKUP_HEADING = '# Lookup matches for "'
_CATALOG_HEADER = ["| Path | Importance | Title | Tags |", "|------|------------|-------|------|"]
_BODY_HEADER = [
    "| Path | Importance | Title | Tags | Snippet |",
    "|------|------------|-------|------|---------|",
]
_ROW = re.compile(r"(?:\| (?:\\.|[^\\|])* )+\|")
_CELL = re.compile(r"\| ((?:\\.|[^\\|])*) ")
_LOCATION = re.compile(r"((?:\\.|[^\\#])*)(?:#(.*))?")


@dataclass(frozen=True, slots=True)
class LookupRow:
    path: str
    anchor: str
    """The section anchor, ``""`` for a whole-document row."""
    importance: float
    title: str
    """The display title; the server builds ``Title › Heading`` for a section row."""
    tags: tuple[str, ...]
    snippet: str | None
    """Body mode only: ``None`` in a catalog table."""


def _format_importance(value: float) -> str:
    """Go ``strconv.FormatFloat(v, 'f', 2, 64)``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.2f}"


def _row_line(row: LookupRow, body_mode: bool) -> str:
    location = escape_cell(row.path) + (f"#{row.anchor}" if row.anchor else "")
    cells = [
        location,
        _format_importance(row.importance),
        escape_cell(row.title),
        escape_cell(", ".join(row.tags)),
    ]
    if body_mode:
        cells.append(escape_cell(row.snippet or ""))
    return "| " + " | ".join(cells) + " |"


def render_lookup(query: str, scope: str, rows: Sequence[LookupRow], *, body_mode: bool) -> bytes:
    """The LOOKUP body: heading, the catalog or body-mode table header, one line per row."""
    header = _BODY_HEADER if body_mode else _CATALOG_HEADER
    lines = [f'\n{_LOOKUP_HEADING}{escape(query)}" in {escape(scope)}\n', *header]
    lines += (_row_line(row, body_mode) for row in rows)
    return _encode("\n".join(lines) + "\n")


def parse_lookup(body: bytes) -> list[LookupRow]:
    """The rows of a LOOKUP body. The header tells the mode: a catalog table has no snippets."""
    _, lines = _lines(body, _LOOKUP_HEADING)
    for start in range(len(lines) - 1):
        if lines[start : start + 2] in (_CATALOG_HEADER, _BODY_HEADER):
            break
    else:
        raise MalformedResponse("LOOKUP body has no table header")
    body_mode = lines[start] == _BODY_HEADER[0]
    return [_parse_row(line, body_mode) for line in lines[start + 2 :]]


def _parse_row(line: str, body_mode: bool) -> LookupRow:
    cells = _CELL.findall(line) if _ROW.fullmatch(line) else []
    location = _LOCATION.fullmatch(cells[0]) if cells else None
    if location is None or len(cells) != (5 if body_mode else 4):
        raise MalformedResponse(f"not a LOOKUP row: {line!r}")
    try:
        importance = float(cells[1])
    except ValueError:
        raise MalformedResponse(f"not a LOOKUP importance: {cells[1]!r}") from None
    tags = unescape(cells[3])
    row = LookupRow(
        path=unescape(location[1]),
        anchor=location[2] or "",
        importance=importance,
        title=unescape(cells[2]),
        tags=tuple(tags.split(", ")) if tags else (),
        snippet=unescape(cells[4]) if body_mode else None,
    )
    if _row_line(row, body_mode) != line:
        raise MalformedResponse(f"not a LOOKUP row: {line!r}")
    return row


# --- LOOKUP match: links ----------------------------------------------------------------------

_LINKS_HEADING = "# Links of "
_LINKS_HEADER = [
    "| Source | Line | Target | Raw | Kind | Relation | State | Label |",
    "|--------|------|--------|-----|------|----------|-------|-------|",
]
_DOCUMENTS_TITLE = "## Documents"
_DOCUMENTS_HEADER = ["| Path | Title | Depth |", "|------|-------|-------|"]
LINK_KINDS = ("internal", "external", "relation")
LINK_STATES = ("ok", "missing", "missing-anchor", "external")


@dataclass(frozen=True, slots=True)
class LinkRow:
    """One link of a ``match: links`` answer (SPEC §5.9): its source document and section, its
    line there, where it leads (a document path and anchor, or for state ``external`` a URL),
    its target as written, its kind, a relation's predicate, its state and its label."""

    source: str
    section: str
    line: int
    target: str
    anchor: str
    raw: str
    kind: str
    predicate: str
    state: str
    label: str

    @property
    def external(self) -> bool:
        return self.state == "external"

    @property
    def broken(self) -> bool:
        return self.state in ("missing", "missing-anchor")


@dataclass(frozen=True, slots=True)
class LinkDocument:
    """A document a ``match: links`` page names: its title, and how many steps from where
    the walk started (0 for the document or folder asked about)."""

    path: str
    title: str
    depth: int


def _place(path: str, anchor: str) -> str:
    return escape_cell(path) + (f"#{escape_cell(anchor)}" if anchor else "")


def link_line(row: LinkRow) -> str:
    target = escape_cell(row.target) if row.external else _place(row.target, row.anchor)
    cells = [
        _place(row.source, row.section),
        str(row.line),
        target,
        escape_cell(row.raw),
        row.kind,
        escape_cell(row.predicate),
        row.state,
        escape_cell(row.label),
    ]
    return "| " + " | ".join(cells) + " |"


def _document_line(document: LinkDocument) -> str:
    return f"| {escape_cell(document.path)} | {escape_cell(document.title)} | {document.depth} |"


def render_links(subject: str, rows: Sequence[LinkRow], documents: Sequence[LinkDocument]) -> bytes:
    """The body of a ``match: links`` answer: the links table, then the documents it names."""
    lines = [f"\n{_LINKS_HEADING}{escape(subject)}\n", *_LINKS_HEADER]
    lines += (link_line(row) for row in rows)
    lines += ["", _DOCUMENTS_TITLE, "", *_DOCUMENTS_HEADER]
    lines += (_document_line(document) for document in documents)
    return _encode("\n".join(lines) + "\n")


def parse_links(body: bytes) -> tuple[list[LinkRow], list[LinkDocument]]:
    """The rows and documents of a ``match: links`` body."""
    lines = _after_blank(_lines(body, _LINKS_HEADING)[1])
    if lines[:2] != _LINKS_HEADER:
        raise MalformedResponse("links body has no table header")
    try:
        split = lines.index("", 2)
    except ValueError:
        raise MalformedResponse("links body has no documents table") from None
    if lines[split : split + 5] != ["", _DOCUMENTS_TITLE, "", *_DOCUMENTS_HEADER]:
        raise MalformedResponse("links body has no documents table")
    rows = [_parse_link(line) for line in lines[2:split]]
    documents = [_parse_document(line) for line in lines[split + 5 :]]
    return rows, documents


def _cells(line: str, count: int, what: str) -> list[str]:
    cells = _CELL.findall(line) if _ROW.fullmatch(line) else []
    if len(cells) != count:
        raise MalformedResponse(f"not a {what} row: {line!r}")
    return cells


def _split_place(cell: str, line: str) -> tuple[str, str]:
    found = _LOCATION.fullmatch(cell)
    if found is None:
        raise MalformedResponse(f"not a links row: {line!r}")
    return unescape(found[1]), unescape(found[2] or "")


def _parse_link(line: str) -> LinkRow:
    cells = _cells(line, 8, "links")
    source, section = _split_place(cells[0], line)
    state = cells[6]
    if state == "external":
        target, anchor = unescape(cells[2]), ""
    else:
        target, anchor = _split_place(cells[2], line)
    if not cells[1].isascii() or not cells[1].isdigit():
        raise MalformedResponse(f"not a links row: {line!r}")
    row = LinkRow(
        source,
        section,
        int(cells[1]),
        target,
        anchor,
        unescape(cells[3]),
        cells[4],
        unescape(cells[5]),
        state,
        unescape(cells[7]),
    )
    if link_line(row) != line:
        raise MalformedResponse(f"not a links row: {line!r}")
    return row


def _parse_document(line: str) -> LinkDocument:
    cells = _cells(line, 3, "documents")
    if not cells[2].isascii() or not cells[2].isdigit():
        raise MalformedResponse(f"not a documents row: {line!r}")
    document = LinkDocument(unescape(cells[0]), unescape(cells[1]), int(cells[2]))
    if _document_line(document) != line:
        raise MalformedResponse(f"not a documents row: {line!r}")
    return document
