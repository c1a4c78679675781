"""The in-memory snapshot of the content root: what the read verbs answer from.

Built by the startup walk, updated after every write and by change scans, and only ever mutated on
the event-loop thread, so a read sees one consistent state without locks. Version files are
immutable, so the snapshot only needs to know which file is current and whether it is archived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from markproto.protocol import paths
from markproto.server.storage.layout import version_file
from markproto.server.storage.store import Version


@dataclass(frozen=True, slots=True)
class CurrentVersion:
    """What the snapshot keeps of a document's current version: a `Version` without its body,
    and without what its other fields give again (the snapshot is a few hundred bytes a
    document: a vault of short notes holds about as much of it as of their bodies)."""

    path: str
    number: int
    own_file: str | None
    """The version file where it is not the one ``version_file`` names from the path and number
    (a legacy one, or one whose file's version line says otherwise), else None."""
    modified: datetime
    archived: bool
    meta: dict[str, str]
    digest: bytes
    """The etag's 32 bytes (its hex, 113 bytes a document, is made for each response)."""
    content_hash: str

    @property
    def file(self) -> str:
        return self.own_file or version_file(self.path, self.number)

    @property
    def etag(self) -> str:
        return self.digest.hex()

    @classmethod
    def of(cls, version: Version) -> CurrentVersion:
        named = version_file(version.path, version.number)
        return cls(
            version.path,
            version.number,
            None if version.file == named else version.file,
            version.modified,
            version.archived,
            version.meta,
            bytes.fromhex(version.etag),
            version.content_hash,
        )


@dataclass(slots=True)
class _Dir:
    subdirs: set[str] = field(default_factory=set)
    docs: set[str] = field(default_factory=set)
    live: int = 0
    """Non-archived documents anywhere below: a folder holding only archived ones is hidden."""
    total: int = 0
    """All documents anywhere below."""


@dataclass(frozen=True, slots=True)
class Child:
    """One entry of a folder listing."""

    name: str
    is_dir: bool


class Snapshot:
    """Current documents, folders and the content-hash index of live documents."""

    def __init__(self) -> None:
        self.docs: dict[str, CurrentVersion] = {}
        self.by_hash: dict[str, str | set[str]] = {}
        """Content hash -> the path of the live document holding it, or the paths when several
        do (a set each would cost 216 bytes a document)."""
        self._dirs: dict[str, _Dir] = {"/": _Dir()}

    # -- queries ----------------------------------------------------------------------------------

    def get(self, path: str) -> CurrentVersion | None:
        return self.docs.get(path)

    def is_dir(self, path: str) -> bool:
        return path in self._dirs

    def resolve_hash(self, digest: str) -> list[str]:
        """The paths whose current, non-archived version has this content-hash, sorted."""
        held = self.by_hash.get(digest, ())
        return [held] if isinstance(held, str) else sorted(held)

    def children(self, path: str, include_archived: bool) -> list[Child]:
        """A folder's visible entries in byte order of name (LIST and directory FETCH)."""
        node = self._dirs[path]
        out = [
            Child(name, False)
            for name in node.docs
            if include_archived or not self.docs[paths.join(path, name)].archived
        ]
        for name in node.subdirs:
            sub = self._dirs[paths.join(path, name)]
            if sub.live or (include_archived and sub.total):
                out.append(Child(name, True))
        out.sort(key=lambda c: c.name.encode())
        return out

    # -- updates ----------------------------------------------------------------------------------

    def add_dir(self, path: str) -> None:
        """Record a folder (and its ancestors); empty folders exist too, they just list nothing."""
        missing = []
        while path not in self._dirs:
            missing.append(path)
            path = paths.parent(path)
        for folder in reversed(missing):
            self._dirs[folder] = _Dir()
            self._dirs[paths.parent(folder)].subdirs.add(paths.base(folder))

    def put(self, doc: CurrentVersion) -> CurrentVersion | None:
        """Insert or replace a document; return what it replaced."""
        old = self.docs.get(doc.path)
        if old is not None:
            self._count(old, -1)
            self._unhash(old)
        parent = paths.parent(doc.path)
        self.add_dir(parent)
        self._dirs[parent].docs.add(paths.base(doc.path))
        self.docs[doc.path] = doc
        self._count(doc, +1)
        if not doc.archived:
            held = self.by_hash.setdefault(doc.content_hash, doc.path)
            if isinstance(held, set):
                held.add(doc.path)
            elif held != doc.path:
                self.by_hash[doc.content_hash] = {held, doc.path}
        return old

    def remove(self, path: str) -> CurrentVersion | None:
        """Forget a document that vanished from disk."""
        old = self.docs.pop(path, None)
        if old is None:
            return None
        self._count(old, -1)
        self._dirs[paths.parent(path)].docs.discard(paths.base(path))
        self._unhash(old)
        return old

    def remove_dir(self, path: str) -> None:
        """Forget a folder that vanished from disk, with everything below it."""
        if path == "/" or path not in self._dirs:
            return
        for doc in [d for d in self.docs if paths.in_scope(d, path)]:
            self.remove(doc)
        for sub in [d for d in self._dirs if paths.in_scope(d, path)]:
            del self._dirs[sub]
        self._dirs[paths.parent(path)].subdirs.discard(paths.base(path))

    def dirs(self) -> list[str]:
        return list(self._dirs)

    def _unhash(self, doc: CurrentVersion) -> None:
        held = self.by_hash.get(doc.content_hash)
        if held == doc.path:
            del self.by_hash[doc.content_hash]
        elif isinstance(held, set):
            held.discard(doc.path)
            if len(held) == 1:
                self.by_hash[doc.content_hash] = held.pop()

    def _count(self, doc: CurrentVersion, sign: int) -> None:
        path = doc.path
        while path != "/":
            path = paths.parent(path)
            node = self._dirs[path]
            node.total += sign
            if not doc.archived:
                node.live += sign
