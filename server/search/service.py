"""The LOOKUP service: the catalog and the body index kept current as one ``Index``, and the
query execution of docs/SPEC.md §5.7 (rank up to 1000 rows, drop what the reader may not read,
then cut to ``limit``).

``put`` does all of a document's work inline (a 10 KB body re-indexes in a few milliseconds).
The startup walk puts every document; inside ``bulk()`` that work runs in worker processes, the
bodies parsed and tokenized there into compact records that are merged here in put order.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from markproto.protocol.bodies import LookupRow
from markproto.protocol.paths import in_scope
from markproto.server.search.analysis import Analysis, Postings, analyze, analyze_many
from markproto.server.search.bodyindex import BodyIndex, Hit, Weights
from markproto.server.search.catalog import Catalog, Clause, Entry
from markproto.server.search.text import query_terms
from markproto.server.storage.store import Version

__all__ = ["Lookup"]

_Batch = tuple[list[Analysis], Postings]

_HEADING_SEPARATOR = " \u203a "


class Lookup:
    """The catalog and the body index behind LOOKUP, as one ``content.Index``."""

    def __init__(self, weights: Weights | None = None) -> None:
        self.catalog = Catalog()
        self.bodies = BodyIndex(weights)
        self._pool: concurrent.futures.Executor | None = None
        self._batch: list[tuple[Version, int]] = []
        self._batch_bytes = 0
        self._inflight: deque[tuple[list[Version], concurrent.futures.Future[_Batch]]]
        self._inflight = deque()
        self._workers = 0
        self._batch_limit = 0
        self._pending: set[str] = set()
        """Paths in the queued batch or in flight."""

    # -- keeping current -------------------------------------------------------------------------

    def put(self, doc: Version) -> None:
        if self._workers > 1:
            self._enqueue(doc)
        else:
            self._apply(doc, analyze(doc.body, self.bodies.reserve()))

    def remove(self, path: str) -> None:
        self._drain()
        self.catalog.remove(path)
        self.bodies.remove(path)

    def _apply(self, doc: Version, analysis: Analysis) -> None:
        entry = Entry.build(doc.path, doc.meta, doc.modified, analysis.facts)
        self.catalog.put(entry)
        self.bodies.put(entry, doc.content_hash, analysis)

    @contextmanager
    def bulk(self, workers: int | None = None, batch_bytes: int = 1 << 20) -> Iterator[None]:
        """Analyze the bodies of the puts made inside in ``workers`` processes (default: one
        per CPU), applying the results in put order; everything is applied on exit.

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
        self._batch.append((doc, self.bodies.reserve()))
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
        future = self._pool.submit(analyze_many, [(doc.body, doc_id) for doc, doc_id in batch])
        # The worker has the bodies now; keep what applying the result needs.
        self._inflight.append(([dataclasses.replace(doc, body=b"") for doc, _ in batch], future))

    def _merge_one(self) -> None:
        batch, future = self._inflight.popleft()
        analyses, postings = future.result()
        for doc, analysis in zip(batch, analyses, strict=True):
            self._apply(doc, analysis)
        self.bodies.extend(postings)

    def _drain(self) -> None:
        """Apply every pending put (the queued batch inline, unless a pool is running)."""
        if self._batch and self._pool is not None:
            self._submit()
        while self._inflight:
            self._merge_one()
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        for doc, doc_id in batch:
            self._apply(doc, analyze(doc.body, doc_id))
        self._pending.clear()

    # -- queries ---------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        scope: str,
        clauses: Sequence[Clause],
        *,
        body: bool,
        readable: Callable[[str], bool],
        limit: int,
        load: Callable[[str], Version | None],
    ) -> list[LookupRow]:
        """The rows a LOOKUP shows: ranked (at most 1000), unreadable ones dropped silently,
        cut to ``limit``. ``load`` gives a document's current version, for body-mode snippets
        of the rows shown."""
        self._drain()
        rows: list[LookupRow] = []
        if not body:
            for entry in self.catalog.search(query, scope, clauses):
                if len(rows) == limit:
                    break
                if readable(entry.path):
                    rows.append(_catalog_row(entry))
            return rows

        def accept(entry: Entry) -> bool:
            return in_scope(entry.path, scope) and all(c.holds(entry) for c in clauses)

        terms = query_terms(query)
        everything = scope == "/" and not clauses
        for hit in self.bodies.search(terms, None if everything else accept):
            if len(rows) == limit:
                break
            if readable(hit.entry.path):
                rows.append(_body_row(hit, terms, load))
        return rows


def _catalog_row(entry: Entry) -> LookupRow:
    return LookupRow(entry.path, "", entry.importance, entry.title, entry.tags, None)


def _body_row(hit: Hit, terms: Sequence[str], load: Callable[[str], Version | None]) -> LookupRow:
    entry = hit.entry
    if hit.section < 0:
        return LookupRow(entry.path, "", entry.importance, entry.title, entry.tags, "")
    doc = load(entry.path)
    text = ""
    if doc is not None and doc.content_hash == hit.doc.content_hash:  # the spans fit this body
        text = hit.snippet(doc.body, terms)
    # a section without heading text (the preamble) is titled by its document alone
    title = entry.title + _HEADING_SEPARATOR + hit.heading if hit.heading else entry.title
    return LookupRow(entry.path, hit.anchor, entry.importance, title, entry.tags, text)
