"""LOOKUP ``match: links`` (docs/SPEC.md §5.9): the links around a document or a folder, as one
reader sees them, walked up to five steps out, one page at a time.

The walk is breadth-first from the document (or every document of the folder the reader may
read): at each step it takes the links of each document reached, in byte order of path, those
it holds first (``outgoing``), then those that lead to it from others (``incoming``), each
link once, and reaches the documents they lead to (or come from) that it has not reached yet.
External links are listed, never followed. The rows are numbered in that order; a page is a
slice of them, and ``next-cursor`` is where the next one starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from markproto.protocol import status
from markproto.protocol.bodies import LinkDocument, LinkRow, link_line
from markproto.protocol.limits import (
    LINK_DEPTH_MAX,
    LINK_NODES_MAX,
    LINKS_DEFAULT_LIMIT,
    LOOKUP_MAX,
    MAX_BODY,
)
from markproto.protocol.linkkinds import EXTERNAL, MISSING
from markproto.protocol.metadata import go_quote
from markproto.protocol.paths import atoi, in_scope
from markproto.server.search.links import Edge, LinkIndex

__all__ = ["DIRECTIONS", "LINKS", "BadLinksQuery", "LinksQuery", "Page", "answer", "parse"]

LINKS = "links"
"""The ``match`` value that asks for links."""
INCOMING, OUTGOING, BOTH = "incoming", "outgoing", "both"
DIRECTIONS = (INCOMING, OUTGOING, BOTH)
_PREDICATE = re.compile(r"[a-z0-9-]*")
_RELATIONS_MAX = 32
_PAGE_BYTES = MAX_BODY // 2
"""Bytes of rows on one page at most: room left for the documents table."""


class BadLinksQuery(ValueError):
    """A ``match: links`` request that does not validate; ``str()`` is the wire message."""


@dataclass(frozen=True, slots=True)
class LinksQuery:
    direction: str = BOTH
    relations: frozenset[str] | None = None
    """Which kinds of link: predicates, ``""`` for body links; None for all."""
    depth: int = 1
    limit: int = LINKS_DEFAULT_LIMIT
    offset: int = 0

    @property
    def outgoing(self) -> bool:
        return self.direction != INCOMING

    @property
    def incoming(self) -> bool:
        return self.direction != OUTGOING

    def wants(self, edge: Edge) -> bool:
        return self.relations is None or edge.predicate in self.relations


def parse(meta: Mapping[str, str]) -> LinksQuery:
    """The request keys of §5.9, checked in this order: direction, relations, depth, limit,
    cursor."""
    direction = meta.get("direction", "") or BOTH
    if direction not in DIRECTIONS:
        raise BadLinksQuery(status.bad_direction(go_quote(direction)))
    relations = None
    if "relations" in meta:
        items = [item.strip() for item in meta["relations"].split(",")]
        if len(items) > _RELATIONS_MAX or not all(map(_PREDICATE.fullmatch, items)):
            raise BadLinksQuery(status.BAD_RELATIONS)
        relations = frozenset(items)
    depth = _number(meta.get("depth", ""), 1)
    if depth is None or not 1 <= depth <= LINK_DEPTH_MAX:
        raise BadLinksQuery(status.BAD_DEPTH)
    limit = _number(meta.get("limit", ""), LINKS_DEFAULT_LIMIT)
    if limit is None or limit < 1:
        raise BadLinksQuery(status.INVALID_LIMIT)
    offset = _number(meta.get("cursor", ""), 0)
    if offset is None or offset < 0:
        raise BadLinksQuery(status.BAD_LINKS_CURSOR)
    return LinksQuery(direction, relations, depth, min(limit, LOOKUP_MAX), offset)


def _number(value: str, default: int) -> int | None:
    return default if not value else atoi(value)


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[LinkRow]
    documents: list[LinkDocument]
    total: int
    """Rows in the whole answer."""
    next: int | None
    """Where the next page starts; None on the last."""


def answer(
    index: LinkIndex,
    query: LinksQuery,
    start: str,
    folder: bool,
    readable: Callable[[str], bool],
    title: Callable[[str], str],
) -> Page:
    """One page of the links around ``start`` (a live document, or a folder) for a reader."""
    if not folder and query.depth == 1:
        return _around(index, query, start, readable, title)
    if folder:
        level = sorted(p for p in index.paths() if in_scope(p, start) and readable(p))
    else:
        level = [start]
    reached = dict.fromkeys(level, 0)
    rows: list[Edge] = []
    seen: set[tuple[str, int]] = set()
    for depth in range(query.depth):
        following: list[str] = []
        for path in level:
            edges = []
            if query.outgoing:
                edges = index.outbound(path, readable, wanted=query.relations)
            if query.incoming:
                edges += index.inbound(path, readable)
            for edge in edges:
                key = (edge.source, edge.number)
                if key in seen or not query.wants(edge):
                    continue
                seen.add(key)
                rows.append(edge)
                for near in _ends(edge):
                    if near not in reached:
                        reached[near] = depth + 1
                        if depth + 1 < query.depth and len(reached) <= LINK_NODES_MAX:
                            following.append(near)
        level = sorted(following)
        if not level:
            break
    shown = rows[query.offset : query.offset + query.limit]
    return _page(shown, query.offset, len(rows), reached, title)


def _around(
    index: LinkIndex,
    query: LinksQuery,
    start: str,
    readable: Callable[[str], bool],
    title: Callable[[str], str],
) -> Page:
    """One step from one document: its own links are counted without being read, its
    backlinks by where they lead alone, and only the rows on the page are followed in full, so
    a page of a document with thousands of links either way costs little more than a page."""
    outgoing = index.outbound_count(start, query.relations) if query.outgoing else 0
    first, last = query.offset, query.offset + query.limit
    rows = []
    if first < outgoing:
        rows = index.outbound(
            start, readable, wanted=query.relations, start=first, stop=min(last, outgoing)
        )
    incoming = 0
    if query.incoming:
        page, incoming = index.inbound_page(
            start,
            readable,
            wanted=query.relations,
            start=max(first - outgoing, 0),
            stop=max(last - outgoing, 0),
        )
        rows += page
    total = outgoing + incoming
    reached = {start: 0}
    for edge in rows:
        for near in _ends(edge):
            reached.setdefault(near, 1)
    return _page(rows, first, total, reached, title)


def _ends(edge: Edge) -> tuple[str, ...]:
    """The documents a link joins (the external end and a missing one are no documents)."""
    if edge.state in (EXTERNAL, MISSING) or edge.kind == EXTERNAL:
        return (edge.source,)
    return edge.source, edge.target


def _page(
    edges: list[Edge],
    offset: int,
    total: int,
    reached: dict[str, int],
    title: Callable[[str], str],
) -> Page:
    """The page of ``edges`` (the rows from ``offset`` on) that fits the page's bytes."""
    shown: list[LinkRow] = []
    budget = _PAGE_BYTES
    for edge in edges:
        row = _row(edge)
        cost = len(link_line(row).encode()) + 1
        if cost > budget and shown:
            break
        budget -= cost
        shown.append(row)
    named: dict[str, None] = {}
    for row in shown:
        named[row.source] = None
        if not row.external and row.state != MISSING:
            named[row.target] = None
    documents = [
        LinkDocument(path, title(path), reached.get(path, 0))
        for path in sorted(named, key=lambda p: (reached.get(p, 0), p))
    ]
    stop = offset + len(shown)
    return Page(shown, documents, total, stop if stop < total else None)


def _row(edge: Edge) -> LinkRow:
    return LinkRow(
        edge.source,
        edge.section,
        edge.line,
        edge.target,
        edge.anchor,
        edge.raw,
        edge.kind,
        edge.predicate,
        edge.state,
        edge.label,
    )
