"""The LOOKUP service: the catalog, the body index and the link index kept current as one
``Index``, and the query execution of docs/SPEC.md §5.7 (rank up to 1000 rows, drop what the
reader may not read, then cut to ``limit``).

Indexing a document is two steps: ``prepare`` (a pure function of the new body, its analysis;
any thread) and ``settle`` (applying that to the indexes, cheap: the version replaced needs no
analysis, as its slots are cut out of the postings by range). ``put`` does both: ``Content``
calls it on the event loop for a lone write, on its backlog's thread during a burst.

At startup the indexes are built in the background (``build``): until then the service is not
``ready``, a LOOKUP waits for it, and the changes settled meanwhile are held (the latest per path)
and applied over the built indexes when they are swapped in, so each ends up indexed once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from markproto.protocol import status
from markproto.protocol.bodies import LookupRow
from markproto.protocol.gotext import trim_space
from markproto.protocol.limits import (
    LOOKUP_DEFAULT_LIMIT,
    LOOKUP_MAX,
    LOOKUP_MAX_TERMS,
    LOOKUP_MIN_QUERY_RUNES,
)
from markproto.protocol.metadata import go_quote
from markproto.protocol.paths import atoi, in_scope
from markproto.server.search.bodyindex import BodyIndex, Hit, Weights
from markproto.server.search.catalog import Catalog, Clause, Entry, FilterError, parse_filter
from markproto.server.search.links import LinkIndex
from markproto.server.search.text import catalog_terms, query_terms
from markproto.server.storage.store import Version

if TYPE_CHECKING:
    from markproto.server.search.analysis import Analysis

__all__ = ["BadQuery", "Change", "Lookup", "Query", "parse_query"]

_HEADING_SEPARATOR = " \u203a "
_MODES = ("catalog", "body")


class BadQuery(ValueError):
    """A LOOKUP request that does not validate; ``str()`` is the wire message."""


@dataclass(frozen=True, slots=True)
class Query:
    """A validated LOOKUP request, scope aside."""

    text: str
    """The trimmed query."""
    mode: str
    limit: int
    clauses: tuple[Clause, ...]

    @property
    def body(self) -> bool:
        return self.mode == "body"


def parse_query(meta: Mapping[str, str]) -> Query:
    """The request keys of §5.7, checked in the reference's order with its messages (the scope,
    checked last, is the caller's: it needs the snapshot)."""
    text = trim_space(meta.get("query", ""))
    if text != "*" and len(text) < LOOKUP_MIN_QUERY_RUNES:
        raise BadQuery(status.QUERY_TOO_SHORT)
    terms = min(len(catalog_terms(text)), LOOKUP_MAX_TERMS + 1)
    if terms > LOOKUP_MAX_TERMS:
        raise BadQuery(status.too_many_terms(terms))
    limit = _limit(meta.get("limit", ""))
    if limit is None:
        raise BadQuery(status.INVALID_LIMIT)
    try:
        clauses = parse_filter(meta.get("filter", ""))
    except FilterError as exc:
        raise BadQuery(str(exc)) from None
    mode = meta.get("match", "") or "catalog"
    if mode not in _MODES:
        raise BadQuery(status.unknown_match(go_quote(mode)))
    return Query(text, mode, limit, clauses)


def _limit(value: str) -> int | None:
    """Absent or empty: the default; else a Go ``Atoi`` integer >= 1, capped at 1000."""
    if not value:
        return LOOKUP_DEFAULT_LIMIT
    number = atoi(value)
    return min(number, LOOKUP_MAX) if number is not None and number >= 1 else None


@dataclass(frozen=True, slots=True)
class Change:
    """One document's change, prepared off the event loop for ``Lookup.settle``."""

    path: str
    doc: Version | None
    """The new current version (its body dropped), or None when the path leaves the index."""
    analysis: Analysis | None


class Lookup:
    """The catalog, the body index and the link index behind LOOKUP, as one
    ``content.Index``."""

    def __init__(self, weights: Weights | None = None) -> None:
        self.weights = weights
        self.catalog = Catalog()
        self.bodies = BodyIndex(weights)
        self.links = LinkIndex()
        self._held: dict[str, Change] | None = None
        """While a build runs: the changes settled meanwhile, the latest per path."""
        self._built = asyncio.Event()
        self._built.set()
        self.dirty = False
        """Whether the indexes changed since they were built or restored (a save is due)."""

    # -- keeping current -------------------------------------------------------------------------

    @staticmethod
    def prepare(path: str, doc: Version | None) -> Change:
        """The work of a change that needs no index (any thread): the new body's analysis.
        ``doc`` None: the path leaves the index."""
        if doc is None:
            return Change(path, None, None)
        # Imported here, at the first write: the analysis (its parsers and link patterns) is a
        # slow import that a server only reading, or an empty one, never needs.
        from markproto.server.search.analysis import analyze

        return Change(path, replace(doc, body=b""), analyze(doc.body))

    def settle(self, change: Change) -> None:
        """Apply a prepared change (event loop); held while a build runs."""
        self.dirty = True
        if self._held is not None:
            self._held[change.path] = change
            return
        path = change.path
        if self.bodies.indexed(path) is not None:
            self.catalog.remove(path)
            self.bodies.remove(path)
        self.links.remove(path)
        if change.doc is not None and change.analysis is not None:
            doc = change.doc
            entry = Entry.build(doc.path, doc.meta, doc.modified, change.analysis.facts)
            self.catalog.put(entry)
            self.bodies.apply(entry, doc.content_hash, change.analysis)
            self.links.apply(path, change.analysis, doc.meta)

    def put(self, doc: Version) -> None:
        """Index ``doc`` inline."""
        self.settle(self.prepare(doc.path, doc))

    def stage(self, doc: Version) -> Callable[[], None]:
        """``content.Index.stage``: ``doc``'s analysis, and its settling to call later."""
        return partial(self.settle, self.prepare(doc.path, doc))

    def remove(self, path: str) -> None:
        self.settle(Change(path, None, None))

    def freeze(self) -> None:
        """Pack what the writes since the last call added (``BodyIndex.freeze``): once they
        pause, on the thread that changes the indexes."""
        self.bodies.freeze()

    # -- the background build --------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """False while a build runs: the indexes are not yet those of every document."""
        return self._built.is_set()

    def begin_build(self) -> None:
        """From now until ``finish_build``, settled changes are held (call it before the
        server takes writes)."""
        self._held = {}
        self._built.clear()

    def finish_build(
        self, catalog: Catalog, bodies: BodyIndex, links: LinkIndex, *, changed: bool
    ) -> None:
        """Swap in the built indexes, then apply the changes held meanwhile (event loop).
        ``changed``: they are not just what was saved."""
        assert self._held is not None, "no build running"
        links.authorities = self.links.authorities  # told to this one once the server bound
        self.catalog, self.bodies, self.links = catalog, bodies, links
        held, self._held = self._held, None
        for change in held.values():
            self.settle(change)
        self.dirty = changed or bool(held)
        self._built.set()

    async def wait_built(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a running build; whether the indexes are ready."""
        if not self.ready:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._built.wait(), timeout)
        return self.ready

    # -- queries ---------------------------------------------------------------------------------

    def answer(
        self,
        query: Query,
        scope: str,
        readable: Callable[[str], bool],
        load: Callable[[str], Version | None],
    ) -> list[LookupRow]:
        """The rows a LOOKUP shows: ranked (at most 1000), unreadable ones dropped silently,
        cut to the query's limit. ``load`` gives a document's current version, for body-mode
        snippets of the rows shown."""
        rows: list[LookupRow] = []
        limit, clauses = query.limit, query.clauses
        if not query.body:
            for entry in self.catalog.match(query.text, scope, clauses):
                if len(rows) == limit:
                    break
                if readable(entry.path):
                    rows.append(_catalog_row(entry))
            return rows

        def accept(entry: Entry) -> bool:
            return in_scope(entry.path, scope) and all(c.holds(entry) for c in clauses)

        terms = query_terms(query.text)
        everything = scope == "/" and not clauses
        ranking = self.bodies.rank(terms, None if everything else accept)
        for hit in ranking:
            if len(rows) == limit:
                break
            if readable(hit.entry.path):
                rows.append(_body_row(hit, terms, ranking.rarity, load))
        return rows


def _catalog_row(entry: Entry) -> LookupRow:
    return LookupRow(entry.path, "", entry.importance, entry.title, entry.tags, None)


def _body_row(
    hit: Hit,
    terms: Sequence[str],
    rarity: Sequence[float],
    load: Callable[[str], Version | None],
) -> LookupRow:
    entry = hit.entry
    if hit.section < 0:
        return LookupRow(entry.path, "", entry.importance, entry.title, entry.tags, "")
    doc = load(entry.path)
    text = ""
    if doc is not None and doc.content_hash == hit.content_hash:  # the spans fit this body
        text = hit.snippet(doc.body, terms, rarity)
    # a section without heading text (the preamble) is titled by its document alone
    anchor, heading = hit.names()
    title = entry.title + _HEADING_SEPARATOR + heading if heading else entry.title
    return LookupRow(entry.path, anchor, entry.importance, title, entry.tags, text)
