"""The LOOKUP service: the catalog, the body index and the link index kept current as one
``Index``, and the query execution of docs/SPEC.md §5.7 (rank up to 1000 rows, drop what the
reader may not read, then cut to ``limit``).

Indexing a document is two steps: ``analyze`` (a pure function of the body, which may run
anywhere: a thread, a worker process) and ``apply`` (appending its arrays to the indexes, cheap,
on the event loop). ``put`` does both inline (a 10 KB body re-indexes in a few milliseconds).
The startup walk puts every document; inside ``bulk()`` the analyses run in worker processes,
merged here in put order.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

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
from markproto.server.search.analysis import Analysis, Postings, analyze, analyze_many
from markproto.server.search.bodyindex import BodyIndex, Hit, Weights
from markproto.server.search.catalog import Catalog, Clause, Entry, FilterError, parse_filter
from markproto.server.search.links import LinkIndex
from markproto.server.search.text import catalog_terms, query_terms
from markproto.server.storage.store import Version

__all__ = ["BadQuery", "Lookup", "Query", "analyze", "parse_query"]

_Batch = tuple[list[Analysis], Postings]

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


class Lookup:
    """The catalog, the body index and the link index behind LOOKUP, as one
    ``content.Index``."""

    def __init__(self, weights: Weights | None = None) -> None:
        self.catalog = Catalog()
        self.bodies = BodyIndex(weights)
        self.links = LinkIndex()
        self._pool: concurrent.futures.Executor | None = None
        self._batch: list[Version] = []
        self._batch_bytes = 0
        self._inflight: deque[tuple[list[Version], concurrent.futures.Future[_Batch]]]
        self._inflight = deque()
        self._workers = 0
        self._batch_limit = 0
        self._pending: set[str] = set()
        """Paths in the queued batch or in flight."""

    # -- keeping current -------------------------------------------------------------------------

    def put(self, doc: Version) -> None:
        if self._workers:
            self._enqueue(doc)
        else:
            self.apply(doc, analyze(doc.body))

    def apply(self, doc: Version, analysis: Analysis) -> None:
        """Make ``doc`` current from its ``analyze(doc.body)``, done wherever the caller chose."""
        self._drain()
        self._apply([(doc, analysis)], analysis.postings)

    def remove(self, path: str) -> None:
        self._drain()
        self.catalog.remove(path)
        self.bodies.remove(path)
        self.links.remove(path)

    def _apply(self, docs: Sequence[tuple[Version, Analysis]], block: Postings | None) -> None:
        batch = []
        for doc, analysis in docs:
            entry = Entry.build(doc.path, doc.meta, doc.modified, analysis.facts)
            self.catalog.put(entry)
            self.links.apply(doc.path, analysis, doc.meta)
            batch.append((entry, doc.content_hash, analysis))
        assert block is not None
        self.bodies.apply_batch(batch, block)

    @contextmanager
    def bulk(self, workers: int | None = None, batch_bytes: int = 1 << 20) -> Iterator[None]:
        """Analyze the bodies of the puts made inside in ``workers`` processes (default: one
        per CPU; 0: inline), applying the results in put order; everything is applied on exit.

        Bodies go to the workers in batches of about ``batch_bytes``, so a content root smaller
        than one batch is indexed inline and starts no process. At most two batches per worker
        are in flight, which bounds the bodies held in memory. Queries and removals inside wait
        for what is pending first.
        """
        self._workers = (os.cpu_count() or 1) if workers is None else workers
        self._batch_limit = batch_bytes
        try:
            yield
            self._drain()
        finally:
            self._workers = 0
            self._batch, self._batch_bytes = [], 0
            self._inflight.clear()
            self._pending.clear()
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None

    def _enqueue(self, doc: Version) -> None:
        if doc.path in self._pending:  # a batch holds one version of a path
            self._drain()
        self._pending.add(doc.path)
        self._batch.append(doc)
        self._batch_bytes += len(doc.body)
        if self._batch_bytes >= self._batch_limit:
            self._submit()
            while self._inflight and (
                self._inflight[0][1].done() or len(self._inflight) > 2 * self._workers
            ):
                self._merge_one()

    def _submit(self) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self._workers, mp_context=multiprocessing.get_context("spawn")
            )
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        future = self._pool.submit(analyze_many, [doc.body for doc in batch])
        # The worker has the bodies now; keep what applying the result needs.
        self._inflight.append(([dataclasses.replace(doc, body=b"") for doc in batch], future))

    def _merge_one(self) -> None:
        batch, future = self._inflight.popleft()
        analyses, block = future.result()
        self._apply(list(zip(batch, analyses, strict=True)), block)

    def _drain(self) -> None:
        """Apply every pending put (the queued batch inline, unless a pool is running)."""
        if self._batch and self._pool is not None:
            self._submit()
        while self._inflight:
            self._merge_one()
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        for doc in batch:
            analysis = analyze(doc.body)
            self._apply([(doc, analysis)], analysis.postings)
        self._pending.clear()

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
        self._drain()
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
        rarity = self.bodies.rarity(terms)
        everything = scope == "/" and not clauses
        for hit in self.bodies.rank(terms, None if everything else accept):
            if len(rows) == limit:
                break
            if readable(hit.entry.path):
                rows.append(_body_row(hit, terms, rarity, load))
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
    title = entry.title + _HEADING_SEPARATOR + hit.heading if hit.heading else entry.title
    return LookupRow(entry.path, hit.anchor, entry.importance, title, entry.tags, text)
