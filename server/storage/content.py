"""The served content: the store on disk, its in-memory snapshot and its indexes, kept in step.

This is the one door to stored state: handlers read and write through it and never around it
(the store and the snapshot are its own). Every write runs on the single writer thread, and its
result is applied to the snapshot and to every index on the event loop before the response goes
out, so the next request on any connection sees it. Reads answer on the event loop from the
snapshot and immutable version files, except verifying a hash chain, which reads a whole history
and so runs on a reader thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from markproto.protocol.watch import OP_APPEND, OP_ARCHIVE, OP_PUBLISH
from markproto.server.storage import recovery
from markproto.server.storage.backlog import Backlog
from markproto.server.storage.snapshot import Child, CurrentVersion, Snapshot
from markproto.server.storage.store import (
    Collision,
    Corrupt,
    History,
    Missing,
    Refusal,
    Store,
    Version,
    Written,
)

log = logging.getLogger("markproto.server.storage.content")

T = TypeVar("T")

VERDICTS = 4096
"""Chain verdicts kept by default (about 150 bytes each; the server's is ``memory.Shares``)."""


class Index(Protocol):
    """Anything kept current with the live documents (the catalog, the body index)."""

    def stage(self, doc: Version) -> Callable[[], None]:
        """Do what putting ``doc`` needs its body for, and return the rest, which needs none:
        the caller drops the body before calling it (a large one is read for this alone)."""
        ...

    def remove(self, path: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Changes:
    """What a change scan found on disk that the snapshot did not know."""

    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.updated or self.removed)


INLINE_INDEX_MAX = 16 << 10
"""A lone write's body up to this size is indexed on the event loop before its answer (about
10 ms at the analysis's 1.5-2 MB per CPU second); a larger one goes to the backlog's thread, which
a LOOKUP waits for, so a 1 MB publish does not stall every other client for a second."""


class WriteTimedOut(Exception):
    """A write given up on (its request timed out): ``started`` says whether it may have been
    applied (it was running) or certainly was not (it was still waiting for the writer)."""

    def __init__(self, *, started: bool) -> None:
        super().__init__("write in progress" if started else "write still waiting")
        self.started = started


@dataclass(frozen=True, slots=True)
class Change:
    """One change to a served document, as WATCH tells it (SPEC §5.8): a new version
    (``publish``, ``append``), or the document hidden (``archive``) or shown again (``publish``
    of the same version)."""

    path: str
    version: int
    op: str
    content_hash: str
    agent: str


def _change(doc: Version | CurrentVersion, op: str) -> Change:
    return Change(doc.path, doc.number, op, doc.content_hash, doc.meta.get("agent", ""))


class _VersionCache:
    """A byte-bounded LRU of versions read in full; they never change, so entries never go stale."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._size = 0
        self._items: OrderedDict[str, Version] = OrderedDict()

    def get(self, file: str) -> Version | None:
        version = self._items.get(file)
        if version is not None:
            self._items.move_to_end(file)
        return version

    def put(self, version: Version) -> None:
        if len(version.body) > self._max // 4 or version.file in self._items:
            return
        self._items[version.file] = version
        self._size += len(version.body)
        while self._size > self._max:
            _, old = self._items.popitem(last=False)
            self._size -= len(old.body)


class Content:
    """One content root, served."""

    def __init__(
        self,
        store: Store,
        indexes: Iterable[Index] = (),
        cache_bytes: int = 32 << 20,
        verdicts: int = VERDICTS,
    ):
        self._store = store
        self._snapshot = Snapshot()
        self.indexes = list(indexes)
        self.observers: list[Callable[[Change], None]] = []
        """Told of every change once it is applied (the WATCH change log)."""
        self._cache = _VersionCache(cache_bytes)
        self._verdicts: OrderedDict[bytes, bool] = OrderedDict()
        self._max_verdicts = verdicts
        self.changes = 0
        """Documents changed since the content was opened (writes and scans)."""
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mark-writer")
        self._queue: list[_Job[Any]] | None = None
        """The writes the next drain on the writer thread takes (None: no drain is pending)."""
        self._in_flight = 0
        """Writes submitted and not yet answered (event loop only)."""
        self._backlog = Backlog(self._change_indexes, lambda: self._in_flight > 0)
        self.plain_files = 0
        """Plain ``.md`` files the startup walk found: files without history, not served."""
        self._queue_lock = threading.Lock()
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mark-reader")

    @classmethod
    def open(
        cls,
        root: Path,
        indexes: Iterable[Index] = (),
        cache_bytes: int = 32 << 20,
        verdicts: int = VERDICTS,
    ) -> Content:
        """Recover from interrupted writes, then build the snapshot and ``indexes`` in one walk
        (an index built in the background instead is ``attach``-ed later)."""
        content = cls(Store(root), indexes, cache_bytes, verdicts)
        with content._store.exclusive():
            recovery.recover(content._store.layout)
        for kind, path in content._store.layout.walk():
            if kind == "dir":
                content._snapshot.add_dir(path)
            elif kind == "plain":
                content.plain_files += 1
            elif (version := content._load_logged(path)) is not None:
                content._apply(version)
        return content

    @property
    def root(self) -> Path:
        return self._store.layout.root.path

    def attach(self, index: Index) -> None:
        """Keep ``index`` current from now on; building it from the snapshot is its owner's
        business (``current_versions``, ``load``)."""
        self.indexes.append(index)

    def close(self) -> None:
        self._backlog.close()
        self._reader.shutdown(wait=True)
        self._writer.shutdown(wait=True)
        self._store.close()

    # -- reads (event loop) -----------------------------------------------------------------------

    def current(self, path: str) -> CurrentVersion | None:
        return self._snapshot.get(path)

    def current_versions(self) -> Iterator[CurrentVersion]:
        """Every document's current version, archived ones too."""
        return iter(self._snapshot.docs.values())

    def is_dir(self, path: str) -> bool:
        return self._snapshot.is_dir(path)

    def children(self, path: str, include_archived: bool) -> list[Child]:
        """A folder's visible entries in byte order of name (LIST and directory FETCH)."""
        return self._snapshot.children(path, include_archived)

    def resolve_hash(self, digest: str) -> list[str]:
        """The paths whose current, non-archived version has this content-hash, sorted."""
        return self._snapshot.resolve_hash(digest)

    def read(self, current: CurrentVersion, *, keep: bool = True) -> Version | None:
        """The current version in full, from the cache; read, it is kept there unless ``keep``
        is false (a LOOKUP reads a body for one snippet: that does not make it worth memory)."""
        version = self._cache.get(current.file)
        if version is None:
            # The snapshot's file, not the pointer's: until a change scan, the snapshot is what
            # this server serves, consistently across verbs.
            version = self._store.load_file(current.path, current.number, current.file)
            if version is None:
                return None
            if keep:
                self._cache.put(version)
        if version.archived != current.archived:
            version = dataclasses.replace(version, archived=current.archived)
        return version

    def load(self, current: CurrentVersion) -> Version | None:
        """The current version in full, read from disk and not cached (any thread: a build
        reads every body once, the backlog every body it held), with the snapshot's own
        objects where they are equal: the catalog, the body index and the link index keep its
        metadata, times and content hash, one copy a document where a read from disk made two
        (about 400 bytes a document)."""
        try:
            doc = self._store.load_file(current.path, current.number, current.file)
        except Corrupt as exc:
            log.error("not indexing a corrupt version file: %s", exc)
            return None
        if doc is None:  # the file is gone
            return None
        return Version(
            current.path,
            doc.number,
            doc.file,
            _same(doc.modified, current.modified),
            doc.archived,
            _same(doc.meta, current.meta),
            doc.body,
            doc.etag,  # the snapshot keeps the file name and etag as it can make them again
            _same(doc.content_hash, current.content_hash),
        )

    def size(self, current: CurrentVersion) -> int | None:
        """The current version's file size (its body and a little frontmatter), unread: a
        build orders its work by it."""
        return self._store.file_size(current.file)

    def read_version(self, path: str, number: int) -> Version | None:
        """An older (or the current) version; archived state does not matter here."""
        return self._store.load(path, number)

    def history(self, path: str) -> History | None:
        return self._store.history(path)

    def chain_verdict(self, history: History) -> bool | None:
        """Whether this exact history's chain holds, if it was verified before.

        Version files never change once written, so a verdict is kept per history: a digest of
        each version's number, file and mtime (small however long the history), so any new,
        pruned or replaced version makes a new key.
        """
        key = _history_key(history)
        verdict = self._verdicts.get(key)
        if verdict is not None:
            self._verdicts.move_to_end(key)
        return verdict

    async def verify_chain(self, history: History) -> bool:
        """Read every version file of ``history`` on the reader thread and keep the verdict."""
        loop = asyncio.get_running_loop()
        verdict = await loop.run_in_executor(self._reader, self._store.chain_valid, history)
        self._verdicts[_history_key(history)] = verdict
        if len(self._verdicts) > self._max_verdicts:
            self._verdicts.popitem(last=False)
        return verdict

    # -- writes (writer thread, then applied on the event loop) ----------------------------------

    async def publish(
        self, path: str, body: bytes, meta: Mapping[str, str], expected: int | None
    ) -> Written | Refusal:
        return await self._write(OP_PUBLISH, self._store.publish, path, body, meta, expected)

    async def append(
        self, path: str, text: bytes, overlay: Mapping[str, str], expected: int
    ) -> Written | Refusal:
        return await self._write(OP_APPEND, self._store.append, path, text, overlay, expected)

    async def set_archived(self, path: str, archived: bool) -> Version | Missing | Collision:
        return await self._write(OP_ARCHIVE, self._store.set_archived, path, archived)

    async def _write(self, op: str, fn: Callable[..., T], *args: object) -> T:
        """Queue one write for the writer thread, which commits all writes queued meanwhile as
        one group (`Store.batch`: many clients' writes share one filesystem sync), and apply
        its result.

        ``op`` is what WATCH is told it was (an archive flag set to false is told as a publish).
        Cancelled while it waits (the request timed out, or its peer left), it is taken out of
        the queue and raises `WriteTimedOut` (not applied). Cancelled once the writer took it, it
        cannot be stopped: it raises `WriteTimedOut` (outcome unknown) and its result is applied
        whenever it lands, so the snapshot never misses a write the disk has. Cancelled just as
        it finished, its result counts as if it had not been cancelled at all.

        One drain is submitted to the writer per group, not per write, and a group's results
        come back to the loop in one callback (`_land`): a thread hand-off per write cost the
        event loop about 25 us and a wake-up of each thread.
        """
        job: _Job[T] = _Job(fn, args, asyncio.get_running_loop().create_future(), op)
        with self._queue_lock:
            queue = self._queue
            if queue is None:
                queue = self._queue = []
                self._writer.submit(self._drain, queue)
            queue.append(job)
            job.queue = queue
        self._in_flight += 1
        try:
            outcome = await job.done
        except asyncio.CancelledError:
            if job.done.done() and not job.done.cancelled():
                outcome = job.done.result()  # it landed as the wait was cancelled: it counts
            else:
                job.done.cancel()  # (the task's cancel did already): `_land` knows nobody waits
                with self._queue_lock:
                    waiting = not job.taken
                    if waiting:
                        job.queue.remove(job)
                if waiting:
                    raise WriteTimedOut(started=False) from None
                raise WriteTimedOut(started=True) from None  # `_land` applies it when it lands
        finally:
            self._in_flight -= 1
        self._settle(outcome, op)
        return outcome

    def _land(self, jobs: list[_Job[Any]]) -> None:
        """A group's results, on the event loop: each to its waiter, or applied here when the
        waiter gave up while the writer ran it."""
        for job in jobs:
            if not job.done.cancelled():
                job.finish()
            elif job.outcome is not None:
                self._settle(job.outcome[0], job.op)

    def _settle(self, outcome: object, op: str) -> None:
        """Apply a write's outcome to the snapshot and the indexes, and tell WATCH of a change."""
        if isinstance(outcome, Written):
            self._applied(outcome.version)
            if outcome.created or op == OP_APPEND:
                self._tell(_change(outcome.version, op))
        elif isinstance(outcome, Version):
            before = self._snapshot.get(outcome.path)
            self._applied(outcome)
            if before is None or before.archived != outcome.archived:
                self._tell(_change(outcome, OP_ARCHIVE if outcome.archived else OP_PUBLISH))

    @property
    def indexing(self) -> bool:
        """Whether index work of a burst of writes is still waiting (then await `indexed`)."""
        return bool(self._backlog)

    async def indexed(self) -> None:
        """Return once every index is as current as the snapshot: what a reader of an index
        awaits first (a burst of writes may have held its index work back, see `backlog`)."""
        await self._backlog.caught_up()

    def _applied(self, version: Version) -> None:
        """One of this server's writes is done: into the snapshot now, into the indexes now
        or, during a burst or for a large body, after it on the backlog's thread (analysing a
        megabyte takes about a second, which the event loop must not spend)."""
        self._take(version, later=self._in_flight > 0 or _large(version))

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn`` on the writer thread after every write queued so far (and before any
        queued later)."""
        with self._queue_lock:
            self._queue = None  # the pending drain keeps what it has; later writes get another
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    def _drain(self, queue: list[_Job[Any]]) -> None:
        """Run the writes queued in ``queue`` (writer thread): one alone as it is, several in
        one batch. The results go back to the loop only after the commit that makes them
        durable."""
        with self._queue_lock:
            if self._queue is queue:
                self._queue = None  # a write queued from now on submits the next drain
            jobs = queue[:]
            for job in jobs:
                job.taken = True
        if not jobs:
            return
        try:
            if len(jobs) == 1:
                jobs[0].run()
            else:
                with self._store.batch():
                    for job in jobs:
                        job.run()
        except BaseException as exc:
            for job in jobs:
                job.fail(exc)
            raise
        finally:
            loop = jobs[0].done.get_loop()
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(self._land, jobs)

    def _apply(self, version: Version) -> None:
        """A version found on disk (startup, change scans): into the snapshot and the indexes,
        behind held index work if there is any, so changes reach the indexes in order."""
        self._take(version, later=False)

    def _take(self, version: Version, *, later: bool) -> None:
        """Into the snapshot now; into the indexes now, or held by the backlog when ``later``
        or when work is held already (changes reach the indexes in order)."""
        self.changes += 1
        current = CurrentVersion.of(version)
        self._snapshot.put(current)
        if later or self._backlog:
            self._backlog.hold(current, len(version.body))  # the body is read again then
        else:
            self._change_indexes(version)

    def _change_indexes(self, change: Version | CurrentVersion | str) -> None:
        """Put a version into every index (remove it, when archived), or remove a path gone. A
        held version (no body) is read again from its file first (on the backlog's thread)."""
        if isinstance(change, CurrentVersion):
            version = None if change.archived else self.load(change)
            # archived, or unreadable now (logged): out of the indexes
            change = (
                change.path if version is None else dataclasses.replace(version, archived=False)
            )
            del version
        if isinstance(change, str) or change.archived:
            path = change if isinstance(change, str) else change.path
            for index in self.indexes:
                index.remove(path)
            return
        staged = [index.stage(change) for index in self.indexes]
        # a held change's body is this frame's alone: gone before the indexes take the result
        # (the release notes' 703 KB stayed beside their link and postings work, the x5
        # publish's peak)
        del change
        for settle in staged:
            settle()

    def _tell(self, change: Change) -> None:
        for observer in self.observers:
            try:
                observer(change)
            except Exception:
                log.exception("a change observer failed")

    def _forget(self, path: str) -> None:
        self.changes += 1
        self._snapshot.remove(path)
        if self._backlog:
            self._backlog.hold(path)
        else:
            self._change_indexes(path)

    def _load_logged(self, path: str) -> Version | None:
        try:
            return self._store.load(path)
        except Corrupt as exc:
            log.error("not serving a corrupt version file: %s", exc)
            return None

    # -- change scans -----------------------------------------------------------------------------

    async def rescan(self) -> Changes:
        """Pick up what changed on disk behind the server's back.

        The scan runs on the writer thread, so it is ordered with writes: its result is applied
        before any later write's, and it can never re-apply an older version over a newer one.
        """
        known = {path: (doc.file, doc.archived) for path, doc in self._snapshot.docs.items()}
        changed, dirs = await self._run(self._scan, known)
        return self._apply_scan(changed, dirs)

    def _scan(
        self, known: Mapping[str, tuple[str, bool]]
    ) -> tuple[dict[str, Version | None], set[str]]:
        layout = self._store.layout
        seen: set[str] = set()
        dirs: set[str] = set()
        changed: dict[str, Version | None] = {}
        for kind, path in layout.walk():
            if kind == "dir":
                dirs.add(path)
                continue
            if kind == "plain":
                continue
            seen.add(path)
            pointer = layout.pointer(path)
            if pointer is None:
                if path in known:
                    changed[path] = None
                continue
            if path in known and known[path][0] == pointer.file:
                flag = layout.archive_flag(path)
                archived = known[path][1]
                if flag == archived or (flag is None and not archived):
                    continue
            changed[path] = self._load_logged(path)
        for path in known.keys() - seen:
            changed[path] = None
        return changed, dirs

    def _apply_scan(self, changed: Mapping[str, Version | None], dirs: set[str]) -> Changes:
        for path in sorted(dirs):
            self._snapshot.add_dir(path)
        for path in self._snapshot.dirs():
            if path not in dirs:
                self._snapshot.remove_dir(path)
        updated, removed = [], []
        for path, version in changed.items():
            before = self._snapshot.get(path)
            if version is None:
                self._forget(path)
                removed.append(path)
                if before is not None and not before.archived:
                    self._tell(_change(before, OP_ARCHIVE))
            else:  # a large body found on disk is analysed off the loop, as a written one is
                self._take(version, later=_large(version))
                updated.append(path)
                change = _scanned(before, version)
                if change is not None:
                    self._tell(change)
        return Changes(tuple(updated), tuple(removed))


@dataclass(slots=True)
class _Job(Generic[T]):
    """One queued write: run on the writer thread, its future settled on the loop after the
    commit."""

    fn: Callable[..., T]
    args: tuple[Any, ...]
    done: asyncio.Future[T]
    op: str
    queue: list[_Job[Any]] = field(default_factory=list)
    """The queue it waits in (until the writer takes it)."""
    taken: bool = False
    """The writer took it from the queue (under the queue lock): it can no longer be withdrawn."""
    outcome: tuple[T] | None = None
    error: BaseException | None = field(default=None)

    def run(self) -> None:
        try:
            self.outcome = (self.fn(*self.args),)
        except Exception as exc:  # a fault of this write only; the others still commit
            self.error = exc

    def fail(self, exc: BaseException) -> None:
        self.outcome, self.error = None, self.error or exc

    def finish(self) -> None:
        """Hand the result to the waiter (event loop)."""
        if self.done.done():
            return
        if self.outcome is not None:
            self.done.set_result(self.outcome[0])
        else:
            self.done.set_exception(self.error or RuntimeError("write not run"))


def _large(version: Version) -> bool:
    """A body whose analysis goes to the backlog's thread, never the event loop."""
    return len(version.body) >= INLINE_INDEX_MAX


def _scanned(before: CurrentVersion | None, after: Version) -> Change | None:
    """What a change scan's new view of a document tells a watcher, if anything visible changed:
    hidden now (``archive``), or shown with new content or again (``publish``)."""
    shown_before = before is not None and not before.archived
    if after.archived:
        return _change(after, OP_ARCHIVE) if shown_before else None
    if shown_before and before is not None and before.file == after.file:
        return None
    return _change(after, OP_PUBLISH)


def _history_key(history: History) -> bytes:
    lines = (
        f"{entry.version}\t{file}\t{entry.modified.isoformat()}"
        for entry, file in zip(history.entries, history.files, strict=True)
    )
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).digest()


def _same(mine: T, theirs: T) -> T:
    """``theirs`` where it equals ``mine`` (the object kept already), else ``mine``."""
    return theirs if mine == theirs else mine
