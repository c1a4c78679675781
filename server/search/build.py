"""The LOOKUP indexes' life across restarts: built at startup in the background, saved at stop.

The server answers FETCH, LIST and VERSIONS from its snapshot at once; the indexes are built
meanwhile on a thread (``build``), into indexes of their own that no request sees, then swapped
in whole (``Lookup.finish_build``), so a LOOKUP never answers from half an index. What was saved
when the server last stopped is restored first (the documents whose version is still current);
the rest is analysed, on the thread, or in worker processes when there is much of it (each
costs a Python process, tens of MiB, while it runs). Progress goes to the log.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from markproto.server import memory
from markproto.server.search import saved as saving
from markproto.server.search.bodyindex import BodyIndex, Weights
from markproto.server.search.catalog import Catalog, Entry
from markproto.server.search.links import LinkIndex
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content
from markproto.server.storage.snapshot import CurrentVersion
from markproto.server.storage.store import Version

if TYPE_CHECKING:
    from markproto.server.search.analysis import Analysis, Postings

    _Batch = tuple[list[Analysis], tuple[Postings, ...]]

__all__ = ["BATCH_BYTES", "WORKER_BYTES", "Build", "save", "saved_form", "write"]

log = logging.getLogger("markproto.server.search.build")


BATCH_BYTES = 512 << 10
"""Bodies analysed together (one worker task; one append per term). A batch's postings go
into the tail as an object a term, merged once the batch is in: at 1 MiB a FastAPI x5 build
peaked 0.7 MiB higher (tracemalloc, in process; 256 KiB gave what 512 KiB gives)."""
WORKER_BYTES = 64 << 20
"""Bodies analysed on the thread before worker processes start for the rest. A worker is an
interpreter with the parser imported, about 50 MiB while it runs, so two are worth their memory
only beside a root whose bodies (and index, about as large) are larger than they are: below
this a build stays in the server's own memory (tests/bench/run board, part 1's full build)."""
PROGRESS_SECONDS = 5.0
STALE_MAX = 64
"""Saved documents no longer current that are removed from a restored index one by one (each
searches every term); past this and a tenth of the documents, everything is analysed again."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Build:
    """One background build of a ``Lookup``'s indexes (``lookup.begin_build()`` was called
    before the server took writes); ``cancel`` stops it between batches (a server stopping)."""

    def __init__(
        self, lookup: Lookup, content: Content, *, saved: Path | None, workers: int
    ) -> None:
        self.lookup, self.content, self.saved, self.workers = lookup, content, saved, workers
        self._cancelled = threading.Event()

    async def run(self) -> None:
        """Build the indexes from the current documents and swap them in."""
        docs = [doc for doc in self.content.current_versions() if not doc.archived]
        builder = _Builder(docs, self.content, self.lookup.weights, self.workers, self._cancelled)
        built = await asyncio.to_thread(builder.run, self.saved)
        if built is not None:
            # no index change may run on the backlog's thread while the indexes are swapped
            await self.content.indexed()
            self.lookup.finish_build(*built, changed=builder.restored < len(docs))

    def cancel(self) -> None:
        self._cancelled.set()


def save(lookup: Lookup, content: Content, file: Path) -> bool:
    """Save ``lookup``'s indexes if they changed since they were built, restored or last saved;
    whether it wrote them (``saved_form`` and ``write`` in one)."""
    form = saved_form(lookup, content)
    if form is None:
        return False
    write(lookup, form, content.root, file)
    return True


def write(lookup: Lookup, form: saving.Saved, root: Path, file: Path) -> None:
    """Write a form ``saved_form`` made (any thread); if that fails, ``lookup`` is dirty again,
    so the next save tries once more."""
    try:
        saving.save(file, root, form)
    except BaseException:
        lookup.dirty = True
        raise


def saved_form(lookup: Lookup, content: Content) -> saving.Saved | None:
    """What saving ``lookup``'s indexes writes, or None when they have not changed since they
    were built, restored or last saved (on the event loop, with no index work running: what it
    returns no later change alters, so ``saving.save`` may write it from a thread)."""
    if not lookup.ready or not lookup.dirty:
        return None
    docs, terms, counts, entries, next_slot = lookup.bodies.dump()
    saved_docs = []
    for entry, content_hash, start, outline in docs:
        current = content.current(entry[0])
        links = lookup.links.saved(entry[0])
        fits = current is not None and current.content_hash == content_hash and links is not None
        file_name = current.file if current is not None and fits else ""  # "" is never current
        record = links if links is not None else (b"", 0, "")
        saved_docs.append(saving.SavedDoc(file_name, entry, content_hash, start, outline, record))
    lookup.dirty = False
    return saving.Saved(saved_docs, terms, counts, entries, next_slot)


class _Builder:
    """One build, on its own thread: indexes no request sees until they are swapped in."""

    def __init__(
        self,
        docs: Sequence[CurrentVersion],
        content: Content,
        weights: Weights | None,
        workers: int,
        cancelled: threading.Event,
    ) -> None:
        self.docs, self.content, self.workers = docs, content, workers
        self.cancelled = cancelled
        self.catalog, self.bodies, self.links = Catalog(), BodyIndex(weights), LinkIndex()
        self.restored = 0
        self._started = time.monotonic()
        self._reported = self._started
        self._done = self._bytes = 0

    def run(self, saved: Path | None) -> tuple[Catalog, BodyIndex, LinkIndex] | None:
        """The built indexes (None when cancelled)."""
        todo = self._restore(saved) if saved is not None else list(self.docs)
        self._analyse(todo)
        if self.cancelled.is_set():
            return None
        self.bodies.freeze()
        seconds = time.monotonic() - self._started
        log.info(
            "lookup index built",
            extra={
                "documents": len(self.docs),
                "restored": self.restored,
                "analysed": len(todo),
                "mb": round(self._bytes / 1e6, 1),
                "seconds": round(seconds, 3),
            },
        )
        return self.catalog, self.bodies, self.links

    # -- restoring --------------------------------------------------------------------------------

    def _restore(self, file: Path) -> list[CurrentVersion]:
        """Restore what was saved; the documents still to analyse."""
        saved = saving.load(file, self.content.root)
        if saved is None:
            return list(self.docs)
        from markproto.server.search.analysis import Outline  # only a saved index needs it

        current = {doc.path: doc for doc in self.docs}
        fresh: list[saving.SavedDoc] = []
        stale: list[saving.SavedDoc] = []
        for doc in saved.docs:
            now = current.get(doc.entry[0])
            (fresh if now is not None and now.file == doc.file else stale).append(doc)
        if len(stale) > max(STALE_MAX, len(saved.docs) // 10):
            log.info(
                "the saved index is out of date: indexing every document",
                extra={"changed": len(stale)},
            )
            return list(self.docs)
        restored = []
        outlines: dict[str, Outline] = {}
        for doc in saved.docs:
            now = current.get(doc.entry[0])
            own = doc.entry
            if now is not None:  # the snapshot's own path and metadata, where they are equal
                _, title, tags, importance, meta = own
                own = (now.path, title, tags, importance, now.meta if meta == now.meta else meta)
            entry = Entry.restored(own, now.modified if now is not None else _EPOCH)
            outline = outlines[entry.path] = Outline(*doc.outline)
            restored.append((entry, doc.content_hash, doc.start, outline))
        self.bodies.restore(restored, saved.terms, saved.counts, saved.entries, saved.next_slot)
        del saved, restored
        for doc in stale:
            self.bodies.remove(doc.entry[0])
        for doc in fresh:
            path = doc.entry[0]
            indexed = self.bodies.entry(path)
            assert indexed is not None
            self.catalog.put(indexed)
            self.links.put(path, doc.links, outlines[path], current[path].meta)
        self.restored = len(fresh)
        kept = {doc.entry[0] for doc in fresh}
        return [doc for doc in self.docs if doc.path not in kept]

    # -- analysing --------------------------------------------------------------------------------

    def _analyse(self, todo: Sequence[CurrentVersion]) -> None:
        if not todo:
            return  # an empty root, or all restored: the analysis is never imported
        from markproto.server.search.analysis import analyze_many

        batches = self._batches(self._largest_first(todo))
        total = 0
        for batch in batches:
            total += sum(len(doc.body) for doc in batch)
            if self.workers and total >= WORKER_BYTES:  # much left: worth the processes
                self._in_workers(batch, batches)
                return
            bodies = [doc.body for doc in batch]
            size = sum(map(len, bodies))
            result = analyze_many(bodies)
            # applying needs no body: none is held while the result is applied (a merge's
            # peak) or while the next batch is read (``_batches`` holds this list too)
            del bodies
            batch[:] = map(_bare, batch)
            self._apply(batch, result, size)
            del result  # the batch's runs of postings, copied into the tail: not in the merge
            self._merge_due()

    def _largest_first(self, todo: Sequence[CurrentVersion]) -> list[CurrentVersion]:
        """``todo`` with the bodies analysed alone (`_batches`) first, each part in its order:
        a large body's transient objects then come and go while the index is still small, and
        the index grows into what they leave free (docs/PERFORMANCE.md, "Start-up build")."""
        return sorted(todo, key=lambda doc: not _goes_alone(self.content.size(doc) or 0))

    def _merge_due(self) -> None:
        """A merge, if due, then the heap trimmed: a merge frees the tail's objects and the
        old segment at once, and untrimmed those pages stay resident through the next batches,
        up to the build's peak (FastAPI x5 in process, with the order above: 8.5 -> 7.7 MiB)."""
        if self.bodies.merge_due():
            memory.trim()

    def _in_workers(self, first: list[Version], rest: Iterator[list[Version]]) -> None:
        import multiprocessing

        from markproto.server.search.analysis import analyze_many

        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=context) as pool:
            flight: deque[tuple[list[Version], int, concurrent.futures.Future[_Batch]]]
            flight = deque()
            for batch in _chain(first, rest):
                bodies = [doc.body for doc in batch]
                future = pool.submit(analyze_many, bodies)
                # the worker has the bodies now: keep what applying the result needs
                flight.append(([_bare(doc) for doc in batch], sum(map(len, bodies)), future))
                del bodies, batch
                while flight and (flight[0][2].done() or len(flight) > 2 * self.workers):
                    self._apply_done(flight.popleft())
                    self._merge_due()
            while flight:
                self._apply_done(flight.popleft())
                self._merge_due()

    def _apply_done(
        self, item: tuple[list[Version], int, concurrent.futures.Future[_Batch]]
    ) -> None:
        batch, size, future = item
        self._apply(batch, future.result(), size)

    def _batches(self, todo: Sequence[CurrentVersion]) -> Iterator[list[Version]]:
        batch: list[Version] = []
        size = 0
        for current in todo:
            if self.cancelled.is_set():
                return
            version = self.content.load(current)
            if version is None:
                continue
            if batch and _goes_alone(len(version.body)):
                # a large body is analysed alone: its analysis is the build's peak, and the
                # batch's other bodies are not held beside it
                yield batch
                batch, size = [], 0
            batch.append(version)
            size += len(version.body)
            del version  # this frame is held while the batch is applied
            if size >= BATCH_BYTES:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def _apply(self, batch: list[Version], result: _Batch, size: int) -> None:
        """Index one batch's analyses. A body analysed alone goes in as a live write does,
        a due tail merged before each of its runs, then the heap trimmed: its runs then never
        pile up as one tail of objects a term (FastAPI x1 in process, five alternating fresh
        processes each: peak 3.86-4.40 -> 3.31-3.50 MiB, settled 2.78-3.35 -> 2.47-2.48; CPU
        and x5 alike within their spread). Other batches leave their merge to ``_merge_due``,
        once the runs are let go (merges between their runs cost x5 20-30 % more CPU)."""
        analyses, runs = result
        docs = []
        for doc, analysis in zip(batch, analyses, strict=True):
            entry = Entry.build(doc.path, doc.meta, doc.modified, analysis.facts)
            self.catalog.put(entry)
            self.links.apply(doc.path, analysis, doc.meta)
            docs.append((entry, doc.content_hash, analysis))
        alone = len(batch) == 1 and _goes_alone(size)
        self.bodies.apply_batch(docs, runs, merge=alone)
        if alone:
            memory.trim()
        self._done += len(batch)
        self._bytes += size
        self._report()

    def _report(self) -> None:
        now = time.monotonic()
        if now - self._reported < PROGRESS_SECONDS:
            return
        self._reported = now
        rate = self._bytes / max(now - self._started, 1e-9)
        left = len(self.docs) - self.restored - self._done
        mean = self._bytes / self._done if self._done else 0
        log.info(
            "indexing",
            extra={
                "documents": f"{self.restored + self._done}/{len(self.docs)}",
                "mb": round(self._bytes / 1e6, 1),
                "mb_per_s": round(rate / 1e6, 2),
                "eta_s": round(left * mean / rate) if rate else "-",
            },
        )


def _goes_alone(size: int) -> bool:
    """Whether a body of ``size`` bytes is analysed in a batch of its own (``BATCH_BYTES``
    read when asked: tests make batches small)."""
    return size >= BATCH_BYTES // 2


def _chain(first: list[Version], rest: Iterator[list[Version]]) -> Iterator[list[Version]]:
    yield first
    yield from rest


def _bare(doc: Version) -> Version:
    """What applying a worker's result needs of a version (the worker has the body)."""
    return Version(
        doc.path,
        doc.number,
        doc.file,
        doc.modified,
        doc.archived,
        doc.meta,
        b"",
        doc.etag,
        doc.content_hash,
    )
