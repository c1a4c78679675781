"""The served content: the store on disk, its in-memory snapshot and its indexes, kept in step.

This is the one door to stored state: handlers read and write through it and never around it
(the store and the snapshot are its own). Every write runs on the single writer thread, and its
result is applied to the snapshot and to every index on the event loop before the response goes
out, so the next request on any connection sees it. An index with work that needs no index (a
body's analysis: a ``Prepared`` index) does that half on the writer thread too, given the version
written and the one it replaces, so the event loop only settles the result. Reads answer on the
event loop from the snapshot and immutable version files, except verifying a hash chain, which
reads a whole history and so runs on a reader thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from markproto.protocol.watch import OP_APPEND, OP_ARCHIVE, OP_PUBLISH
from markproto.server.storage import recovery
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

    def put(self, doc: Version) -> None: ...

    def remove(self, path: str) -> None: ...


@runtime_checkable
class Prepared(Protocol):
    """An index whose change has a half that needs no index, done on the writer thread."""

    def prepare(self, path: str, doc: Version | None, old: Version | None) -> object:
        """Any thread: the change of ``path`` to ``doc`` (None: it leaves the live documents)
        from ``old`` (the version the index may hold, None when there is none or it is
        unknown)."""
        ...

    def settle(self, change: Any) -> None:
        """The event loop: apply what ``prepare`` returned."""
        ...


Indexes = Iterable[Index | Prepared]


@dataclass(frozen=True, slots=True)
class Changes:
    """What a change scan found on disk that the snapshot did not know."""

    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.updated or self.removed)


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
        indexes: Indexes = (),
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
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mark-reader")

    @classmethod
    def open(
        cls,
        root: Path,
        indexes: Indexes = (),
        cache_bytes: int = 32 << 20,
        verdicts: int = VERDICTS,
    ) -> Content:
        """Recover from interrupted writes, then build the snapshot and ``indexes`` in one walk
        (an index built in the background instead is ``attach``-ed later)."""
        content = cls(Store(root), indexes, cache_bytes, verdicts)
        recovery.recover(content._store.layout)
        for kind, path in content._store.layout.walk():
            if kind == "dir":
                content._snapshot.add_dir(path)
                continue
            version = content._load_logged(path)
            if version is not None:
                content._apply(version)
        return content

    @property
    def root(self) -> Path:
        return self._store.layout.root

    def attach(self, index: Index | Prepared) -> None:
        """Keep ``index`` current from now on; building it from the snapshot is its owner's
        business (``current_versions``, ``load``)."""
        self.indexes.append(index)

    def close(self) -> None:
        self._reader.shutdown(wait=True)
        self._writer.shutdown(wait=True)

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

    def read(self, current: CurrentVersion) -> Version | None:
        """The current version in full (cached)."""
        version = self._cache.get(current.file)
        if version is None:
            # The snapshot's file, not the pointer's: until a change scan, the snapshot is what
            # this server serves, consistently across verbs.
            version = self._store.load_file(current.path, current.file)
            if version is None:
                return None
            self._cache.put(version)
        if version.archived != current.archived:
            version = dataclasses.replace(version, archived=current.archived)
        return version

    def load(self, current: CurrentVersion) -> Version | None:
        """The current version in full, read from disk and not cached (any thread: a build
        reads every body once)."""
        try:
            return self._store.load_file(current.path, current.file)
        except Corrupt as exc:
            log.error("not indexing a corrupt version file: %s", exc)
            return None

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
        return await self._write(path, _published, self._store.publish, path, body, meta, expected)

    async def append(
        self, path: str, text: bytes, overlay: Mapping[str, str], expected: int
    ) -> Written | Refusal:
        return await self._write(path, _appended, self._store.append, path, text, overlay, expected)

    async def set_archived(self, path: str, archived: bool) -> Version | Missing | Collision:
        return await self._write(path, _archived, self._store.set_archived, path, archived)

    async def _write(
        self,
        path: str,
        told: Callable[[T, CurrentVersion | None], Change | None],
        op: Callable[..., T],
        *args: object,
    ) -> T:
        """``op`` on the writer thread, then its version applied here and the change it made
        told to the observers (``told``: which one, given the outcome and the version before)."""
        written: tuple[T, list[object]] = await self._run(self._writing, path, op, *args)
        outcome, prepared = written
        version = _written(outcome)
        if version is not None:
            before = self._snapshot.get(path)
            self._apply(version, prepared)
            change = told(outcome, before)
            if change is not None:
                self._tell(change)
        return outcome

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    def _writing(self, path: str, op: Callable[..., T], *args: object) -> tuple[T, list[object]]:
        """On the writer thread: the write, then each prepared index's half of the change."""
        prepared = self._prepared()
        old = self._load_logged(path) if prepared else None
        outcome = op(*args)
        version = _written(outcome)
        if version is None or not prepared:
            return outcome, []
        known = self._snapshot.get(path)  # a dict read: safe here, perhaps a write behind
        if known is not None and (known.file, known.archived) == (version.file, version.archived):
            return outcome, [None] * len(prepared)  # nothing changed (a no-op write)
        if isinstance(outcome, Written) and not outcome.created:
            old = None  # changed behind the server's back: what the index holds is unknown
        return outcome, self._prepare(path, version, old)

    def _prepared(self) -> list[Prepared]:
        return [index for index in self.indexes if isinstance(index, Prepared)]

    def _prepare(self, path: str, version: Version | None, old: Version | None) -> list[object]:
        """Each prepared index's half of ``path`` becoming ``version`` from ``old`` (archived
        versions are in no index)."""
        doc = version if version is not None and not version.archived else None
        was = old if old is not None and not old.archived else None
        return [index.prepare(path, doc, was) for index in self._prepared()]

    def _apply(self, version: Version, prepared: list[object] | None = None) -> None:
        """Make ``version`` current in the snapshot and every index (``prepared``: each
        prepared index's half, done elsewhere; None: do it here)."""
        self.changes += 1
        self._snapshot.put(CurrentVersion.of(version))
        if prepared is None:
            prepared = self._prepare(version.path, version, None)
        changes = iter(prepared)
        for index in self.indexes:
            if isinstance(index, Prepared):
                change = next(changes)
                if change is not None:
                    index.settle(change)
            elif version.archived:
                index.remove(version.path)
            else:
                index.put(version)

    def _tell(self, change: Change) -> None:
        for observer in self.observers:
            try:
                observer(change)
            except Exception:
                log.exception("a change observer failed")

    def _forget(self, path: str, prepared: list[object]) -> None:
        self.changes += 1
        self._snapshot.remove(path)
        changes = iter(prepared)
        for index in self.indexes:
            if isinstance(index, Prepared):
                index.settle(next(changes))
            else:
                index.remove(path)

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
    ) -> tuple[dict[str, tuple[Version | None, list[object]]], set[str]]:
        layout = self._store.layout
        seen: set[str] = set()
        dirs: set[str] = set()
        found: dict[str, Version | None] = {}
        for kind, path in layout.walk():
            if kind == "dir":
                dirs.add(path)
                continue
            seen.add(path)
            pointer = layout.pointer(path)
            if pointer is None:
                if path in known:
                    found[path] = None
                continue
            if path in known and known[path][0] == pointer.file:
                flag = layout.archive_flag(path)
                archived = known[path][1]
                if flag == archived or (flag is None and not archived):
                    continue
            found[path] = self._load_logged(path)
        for path in known.keys() - seen:
            found[path] = None
        changed = {}
        for path, version in found.items():
            old = None
            if path in known and self._prepared():
                old = self._load_file_logged(path, known[path][0])
                if old is not None and known[path][1]:
                    old = dataclasses.replace(old, archived=True)
            changed[path] = (version, self._prepare(path, version, old))
        return changed, dirs

    def _apply_scan(
        self, changed: Mapping[str, tuple[Version | None, list[object]]], dirs: set[str]
    ) -> Changes:
        for path in sorted(dirs):
            self._snapshot.add_dir(path)
        for path in self._snapshot.dirs():
            if path not in dirs:
                self._snapshot.remove_dir(path)
        updated, removed = [], []
        for path, (version, prepared) in changed.items():
            before = self._snapshot.get(path)
            if version is None:
                self._forget(path, prepared)
                removed.append(path)
                if before is not None and not before.archived:
                    self._tell(_change(before, OP_ARCHIVE))
            else:
                self._apply(version, prepared)
                updated.append(path)
                change = _scanned(before, version)
                if change is not None:
                    self._tell(change)
        return Changes(tuple(updated), tuple(removed))

    def _load_file_logged(self, path: str, file: str) -> Version | None:
        try:
            return self._store.load_file(path, file)
        except Corrupt:
            return None


def _written(outcome: object) -> Version | None:
    """The version a write made current, if it made one (a refusal makes none)."""
    if isinstance(outcome, Written):
        return outcome.version
    return outcome if isinstance(outcome, Version) else None


def _published(outcome: object, before: CurrentVersion | None) -> Change | None:
    """PUBLISH tells a watcher of a new version (not of a no-op)."""
    if isinstance(outcome, Written) and outcome.created:
        return _change(outcome.version, OP_PUBLISH)
    return None


def _appended(outcome: object, before: CurrentVersion | None) -> Change | None:
    return _change(outcome.version, OP_APPEND) if isinstance(outcome, Written) else None


def _archived(outcome: object, before: CurrentVersion | None) -> Change | None:
    """ARCHIVE tells of the document hidden, or shown again, when that changed."""
    if not isinstance(outcome, Version):
        return None
    if before is not None and before.archived == outcome.archived:
        return None
    return _change(outcome, OP_ARCHIVE if outcome.archived else OP_PUBLISH)


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
