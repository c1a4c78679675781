"""The served content: the store on disk, its in-memory snapshot and its indexes, kept in step.

Handlers read through this and write through this, never around it: every write runs on the single
writer thread, and its result is applied to the snapshot and to every index on the event loop
before the response goes out, so the next request on any connection sees it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from markproto.server.storage import recovery
from markproto.server.storage.snapshot import Current, Snapshot
from markproto.server.storage.store import Corrupt, Loaded, Store, VersionFile, Written

log = logging.getLogger("markproto.server.storage.content")

T = TypeVar("T")


class Index(Protocol):
    """Anything kept current with the live documents (the catalog, the body index)."""

    def put(self, doc: Loaded) -> None: ...

    def remove(self, path: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Changes:
    """What a change scan found on disk that the snapshot did not know."""

    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.updated or self.removed)


class _LoadedCache:
    """A byte-bounded LRU of parsed version files; they never change, so entries never go stale."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._size = 0
        self._items: OrderedDict[str, Loaded] = OrderedDict()

    def get(self, file: str) -> Loaded | None:
        doc = self._items.get(file)
        if doc is not None:
            self._items.move_to_end(file)
        return doc

    def put(self, doc: Loaded) -> None:
        if len(doc.body) > self._max // 4 or doc.file in self._items:
            return
        self._items[doc.file] = doc
        self._size += len(doc.body)
        while self._size > self._max:
            _, old = self._items.popitem(last=False)
            self._size -= len(old.body)


class Content:
    """One content root, served."""

    def __init__(self, store: Store, indexes: Iterable[Index] = (), cache_bytes: int = 32 << 20):
        self.store = store
        self.snapshot = Snapshot()
        self.indexes = list(indexes)
        self._cache = _LoadedCache(cache_bytes)
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mark-writer")

    @classmethod
    def open(
        cls, root: Path, indexes: Iterable[Index] = (), cache_bytes: int = 32 << 20
    ) -> Content:
        """Recover from interrupted writes, then build the snapshot and indexes in one walk."""
        content = cls(Store(root), indexes, cache_bytes)
        recovery.recover(content.store)
        for kind, path in content.store.walk():
            if kind == "dir":
                content.snapshot.add_dir(path)
                continue
            doc = content._load_logged(path)
            if doc is not None:
                content._apply(doc)
        return content

    def close(self) -> None:
        self._writer.shutdown(wait=True)

    # -- reads (event loop) -----------------------------------------------------------------------

    def current(self, path: str) -> Current | None:
        return self.snapshot.get(path)

    def read(self, current: Current) -> Loaded | None:
        """The current version's full content (cached)."""
        doc = self._cache.get(current.file)
        if doc is None:
            # The snapshot's file, not the pointer's: until a change scan, the snapshot is what
            # this server serves, consistently across verbs.
            doc = self.store.load_file(current.path, current.file)
            if doc is None:
                return None
            self._cache.put(doc)
        if doc.archived != current.archived:
            doc = dataclasses.replace(doc, archived=current.archived)
        return doc

    def read_version(self, path: str, number: int) -> Loaded | None:
        """An older (or the current) version; archived state does not matter here."""
        return self.store.load(path, number)

    def history(self, path: str) -> list[VersionFile] | None:
        return self.store.history(path)

    def chain_valid(self, versions: list[VersionFile]) -> bool:
        return self.store.chain_valid(versions)

    # -- writes (writer thread, then applied on the event loop) ----------------------------------

    async def publish(
        self, path: str, body: bytes, meta: Mapping[str, str], expected: int | None
    ) -> Written:
        written = await self._run(self.store.publish, path, body, meta, expected)
        self._apply(written.doc)
        return written

    async def append(
        self, path: str, text: bytes, overlay: Mapping[str, str], expected: int
    ) -> Written:
        written = await self._run(self.store.append, path, text, overlay, expected)
        self._apply(written.doc)
        return written

    async def set_archived(self, path: str, archived: bool) -> Loaded:
        doc = await self._run(self.store.set_archived, path, archived)
        self._apply(doc)
        return doc

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    def _apply(self, doc: Loaded) -> None:
        self.snapshot.put(Current.of(doc))
        for index in self.indexes:
            if doc.archived:
                index.remove(doc.path)
            else:
                index.put(doc)

    def _forget(self, path: str) -> None:
        self.snapshot.remove(path)
        for index in self.indexes:
            index.remove(path)

    def _load_logged(self, path: str) -> Loaded | None:
        try:
            return self.store.load(path)
        except Corrupt as exc:
            log.error("not serving a corrupt version file: %s", exc)
            return None

    # -- change scans -----------------------------------------------------------------------------

    async def rescan(self) -> Changes:
        """Pick up what changed on disk behind the server's back.

        The scan runs on the writer thread, so it is ordered with writes: its result is applied
        before any later write's, and it can never re-apply an older version over a newer one.
        """
        known = {path: (doc.file, doc.archived) for path, doc in self.snapshot.docs.items()}
        changed, dirs = await self._run(self._scan, known)
        return self._apply_scan(changed, dirs)

    def _scan(
        self, known: Mapping[str, tuple[str, bool]]
    ) -> tuple[dict[str, Loaded | None], set[str]]:
        seen: set[str] = set()
        dirs: set[str] = set()
        changed: dict[str, Loaded | None] = {}
        for kind, path in self.store.walk():
            if kind == "dir":
                dirs.add(path)
                continue
            seen.add(path)
            pointer = self.store.pointer(path)
            if pointer is None:
                if path in known:
                    changed[path] = None
                continue
            if path in known and known[path][0] == pointer.file:
                flag = self.store.archive_flag(path)
                archived = known[path][1]
                if flag == archived or (flag is None and not archived):
                    continue
            changed[path] = self._load_logged(path)
        for path in known.keys() - seen:
            changed[path] = None
        return changed, dirs

    def _apply_scan(self, changed: Mapping[str, Loaded | None], dirs: set[str]) -> Changes:
        for path in sorted(dirs):
            self.snapshot.add_dir(path)
        for path in self.snapshot.dirs():
            if path not in dirs:
                self.snapshot.remove_dir(path)
        updated, removed = [], []
        for path, doc in changed.items():
            if doc is None:
                self._forget(path)
                removed.append(path)
            else:
                self._apply(doc)
                updated.append(path)
        return Changes(tuple(updated), tuple(removed))
