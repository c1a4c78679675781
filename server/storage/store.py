"""Versioned reads and writes over one content root (SPEC "Store format"), in `layout`'s names.

The vocabulary, in the protocol's words: a *document* is a path with a history; a *version* is
one numbered, immutable version file of it (`Version`, read in full); the *current version* is
the one its pointer names; its *history* is every version still stored (`History`). A write ends
`Written` or refused, and a refusal is a value (`Refusal`) the handler answers, never an
exception: exceptions here are faults (a corrupt file, a disk error).

Durability: a version file is written to a temporary name, fsynced, then hard-linked to ``vN``
(link fails if ``vN`` exists, which gives exclusive creation of a *complete* file), the directory
is fsynced, and only then is the pointer swapped (temporary symlink + rename + directory fsync). A
crash at any instant leaves the old pointer and a stray file, or the new pointer and a complete
version; ``recovery`` removes the strays at startup. Reads are lock-free: version files never
change once linked.

Reading is liberal (`storefmt.read_version`): every shape an earlier reference release wrote is
served, and what a file says that is not understood is logged once per file. Writing is strict
and byte-exact to the newest format.

This module and `layout` are the only ones that touch the content root. It is synchronous. Every
write holds `exclusive`, the root's write lock (a thread lock plus ``flock`` on the root folder),
so writers in one process and in others (`mark-server import` beside a server) take turns;
`batch` group-commits the writes made inside it with one filesystem sync.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from markproto import durable
from markproto.protocol import bodies, digests, metadata, paths, status, storefmt
from markproto.protocol.errors import InvalidMetadata, StoreFormatError
from markproto.protocol.limits import MAX_BODY
from markproto.server.storage.layout import (
    VERSIONS_DIR,
    Layout,
    Pointer,
    modified_of,
    split_doc_path,
)

log = logging.getLogger("markproto.server.storage.store")


class Corrupt(Exception):
    """A version file on disk cannot be served (it is over the size limit); never built upon."""


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a document, read from its file: everything the wire and the indexes need."""

    path: str
    number: int
    file: str
    modified: datetime
    archived: bool
    meta: dict[str, str]
    body: bytes
    etag: str
    content_hash: str


@dataclass(frozen=True, slots=True)
class History:
    """A document's stored versions up to the current one, ascending (what VERSIONS lists)."""

    path: str
    entries: tuple[bodies.HistoryEntry, ...]
    files: tuple[str, ...]
    """The version file of each entry: what verifying the chain reads."""


@dataclass(frozen=True, slots=True)
class Written:
    """A write that succeeded (``created`` is False for an idempotent no-op)."""

    version: Version
    created: bool
    pruned: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Conflict:
    """``expected-version`` does not name the current version (or a concurrent write won)."""

    current: int


@dataclass(frozen=True, slots=True)
class Missing:
    """No document with history at that path."""


@dataclass(frozen=True, slots=True)
class Archived:
    """The document is archived; it must be unarchived before it takes a new version."""


@dataclass(frozen=True, slots=True)
class Collision:
    """The path cannot be a document here: a folder, a document above it, a reserved name."""

    reason: str


@dataclass(frozen=True, slots=True)
class TooLarge:
    """The new content would pass the 1 MiB document limit."""


@dataclass(frozen=True, slots=True)
class Invalid:
    """The metadata an APPEND merges with the current version's breaks a rule."""

    message: str


Refusal = Conflict | Missing | Archived | Collision | TooLarge | Invalid


class Store:
    """The versioned store over one content root."""

    def __init__(self, root: Path) -> None:
        self.layout = Layout(root)
        self._write_lock = threading.RLock()
        self._root_fd = os.open(self.layout.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._locked = 0
        self._pending: dict[str, _Pending] | None = None
        """Pointer swaps a batch holds back until its commit (None outside a batch)."""
        self._noted: set[str] = set()
        """Version files whose unread lines were logged: each is reported once."""

    def close(self) -> None:
        """Release the root's descriptor (a second close does nothing)."""
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the content root's write lock: this thread's lock and, for other processes on
        the same root (``mark-server import`` beside a running server), ``flock`` on the root
        folder. Every write takes it; so does startup recovery, which must not take another
        process's half-finished write for debris."""
        with self._write_lock:
            if not self._locked:
                fcntl.flock(self._root_fd, fcntl.LOCK_EX)
            self._locked += 1
            try:
                yield
            finally:
                self._locked -= 1
                if not self._locked:
                    fcntl.flock(self._root_fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group commit: the writes inside create their version files without fsync and hold
        back their pointer swaps; the exit makes all of them durable with one filesystem sync,
        then swaps the pointers, then syncs again. A crash before the swaps leaves files no
        pointer names (recovery removes them), so a write is still current only once durable.
        A second write to a path the batch holds commits what came before it first."""
        with self.exclusive():
            if self._pending is not None:
                yield
                return
            self._pending = {}
            try:
                yield
            finally:
                try:
                    self._commit()
                finally:
                    self._pending = None

    # -- reading ----------------------------------------------------------------------------------

    def load(self, path: str, number: int | None = None) -> Version | None:
        """The current version (or version ``number``); None if there is no such version.

        Raises Corrupt when the file exists but cannot be served (it is over the size limit).
        """
        pointer = self.layout.pointer(path)
        if pointer is None:
            return None
        if number is None or number == pointer.number:
            file = pointer.file
        elif number > pointer.number:
            return None
        else:
            file = self.layout.version_file(path, number, pointer.legacy)
        try:
            data, st = read_file(file)
        except OSError:
            return None
        return self._version(path, number or pointer.number, file, data, st, current=number is None)

    def load_file(self, path: str, number: int, file: str) -> Version | None:
        """One known version file of ``path`` (its in-file archived line, no flag lookup)."""
        try:
            data, st = read_file(file)
        except OSError:
            return None
        return self._version(path, number, file, data, st, current=False)

    def _version(
        self, path: str, number: int, file: str, data: bytes, st: os.stat_result, *, current: bool
    ) -> Version:
        try:
            parsed, notes = storefmt.read_version(data, number)
        except StoreFormatError as exc:
            raise Corrupt(f"{path}: {file}: {exc}") from exc
        if notes and file not in self._noted:
            self._noted.add(file)
            log.warning("%s v%d (%s): %s", path, number, file, "; ".join(notes))
        archived = parsed.archived
        if current:
            flag = self.layout.archive_flag(path)
            archived = parsed.archived if flag is None else flag
        return Version(
            path=path,
            number=number,
            file=file,
            modified=modified_of(st),
            archived=archived,
            meta=parsed.meta,
            body=parsed.body,
            etag=storefmt.etag(data),
            content_hash=storefmt.content_hash(parsed.body),
        )

    def history(self, path: str) -> History | None:
        """Every stored version up to the current one; None without history."""
        pointer = self.layout.pointer(path)
        if pointer is None:
            return None
        found: list[tuple[int, str, datetime]] = []
        for number, file in self.layout.version_files(path, pointer.legacy):
            if number > pointer.number:
                continue  # an unacknowledged leftover; recovery removes it
            try:
                st = os.lstat(file)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((number, file, modified_of(st)))
        if not found:
            return None
        found.sort()
        entries = tuple(bodies.HistoryEntry(number, modified) for number, _, modified in found)
        return History(path, entries, tuple(file for _, file, _ in found))

    def chain_valid(self, history: History) -> bool:
        """Verify the hash chain over a history's (ascending, surviving) version files."""
        numbers = [entry.version for entry in history.entries]
        return storefmt.chain_valid([read_file(file)[0] for file in history.files], numbers)

    # -- writing ----------------------------------------------------------------------------------

    def collision(self, path: str) -> Collision | None:
        """Why ``path`` cannot hold a document (SPEC: path collisions), or None when it can."""
        reason = paths.writable_reason(path)
        if reason is not None:
            return Collision(reason)
        dirs, name = split_doc_path(path)
        if any(durable.TMP_NAME.match(part) for part in (*dirs, name)):
            return Collision(status.temporary_name(path))
        current = str(self.layout.root)
        walked = ""
        for part in dirs:
            current = os.path.join(current, part)
            walked += "/" + part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                return None
            if stat.S_ISLNK(st.st_mode):
                return Collision(status.document_above(walked))
            if not stat.S_ISDIR(st.st_mode):
                return Collision(status.not_a_directory(walked))
        return self._foreign(path)

    def _foreign(self, path: str) -> Collision | None:
        """Something at ``path`` that is not a document of ours (a folder, a file, a link)."""
        try:
            st = os.lstat(self.layout.fs_path(path))
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return Collision(status.is_a_directory(path))
        if not stat.S_ISLNK(st.st_mode) or self.layout.pointer(path) is None:
            return Collision(status.not_versioned(path))
        return None

    def publish(
        self,
        path: str,
        body: bytes,
        meta: Mapping[str, str],
        expected: int | None,
        *,
        adopt: bool = False,
    ) -> Written | Refusal:
        """Write a new version of ``path`` (SPEC PUBLISH, store checks in the reference's order:
        conflict, archived, no-op, write). With ``adopt``, a plain file at ``path`` holding
        exactly ``body`` becomes version 1 of a document in place (an import of a root into
        itself) instead of being refused."""
        if len(body) > MAX_BODY:
            return TooLarge()
        with self.exclusive():
            self._settle(path)
            refused = self.collision(path)
            if refused is not None and not (adopt and self._adoptable(path, body, refused)):
                return refused
            current = self.load(path)
            number = current.number if current else 0
            if expected is not None and expected != number:
                return Conflict(number)
            if current is not None:
                if current.archived:
                    return Archived()
                if current.body == body and current.meta == dict(meta):
                    return Written(current, created=False)
            return self._write(path, current, body, meta)

    def append(
        self, path: str, text: bytes, overlay: Mapping[str, str], expected: int
    ) -> Written | Refusal:
        """Append ``text`` to the current body (SPEC APPEND): a newline is added only when the
        current body lacks one; metadata is the base version's, overlaid, without retention."""
        with self.exclusive():
            self._settle(path)
            refused = self.collision(path)
            if refused is not None:
                return refused
            current = self.load(path)
            if current is None:
                return Missing()
            if expected != current.number:
                return Conflict(current.number)
            if current.archived:
                return Archived()
            sep = b"" if not current.body or current.body.endswith(b"\n") else b"\n"
            body = current.body + sep + text
            if len(body) > MAX_BODY:
                return TooLarge()
            merged = {k: v for k, v in current.meta.items() if k != "retention"}
            merged.update(overlay)
            merged = metadata.normalize(metadata.with_type_default(path, merged))
            try:
                metadata.validate(merged)
                metadata.validate_store(merged)
            except InvalidMetadata as exc:
                return Invalid(str(exc))
            return self._write(path, current, body, merged)

    def set_archived(self, path: str, archived: bool) -> Version | Missing | Collision:
        """Archive or unarchive the current version without touching any version file."""
        with self.exclusive():
            self._settle(path)
            refused = self._foreign(path)
            if refused is not None:
                return refused
            current = self.load(path)
            if current is None:
                return Missing()
            if current.archived == archived:
                return current
            pointer = self.layout.pointer(path)
            if pointer is not None and pointer.legacy:
                self._migrate(path, pointer)
            # Written both ways: "false" also overrides an old store's in-file "archived: true".
            durable.replace(self.layout.archive_file(path), b"true\n" if archived else b"false\n")
            version = self.load(path)
            assert version is not None
            return version

    def _write(
        self, path: str, current: Version | None, body: bytes, meta: Mapping[str, str]
    ) -> Written | Conflict:
        previous = None
        if current is not None:
            pointer = self.layout.pointer(path)
            if pointer is not None and pointer.legacy:
                self._migrate(path, pointer)
            previous = digests.hash_ref_of_hex(current.etag)
        number = current.number + 1 if current else 1
        data = storefmt.emit_version(number, previous, meta, body)
        sync = self._pending is None
        self._make_dirs(path, sync=sync)
        final = self.layout.version_file(path, number)
        try:
            durable.link_new(final, data, sync=sync)
        except FileExistsError:
            return Conflict(current.number if current else 0)
        doomed = self._doomed(path, number, metadata.retention(meta))
        if self._pending is None:
            self._swap_pointer(path, number)
            self._prune(path, doomed)
        else:
            self._pending[path] = _Pending(number, doomed)
        version = Version(
            path=path,
            number=number,
            file=final,
            modified=modified_of(os.stat(final)),
            archived=False,
            meta=dict(meta),
            body=body,
            etag=storefmt.etag(data),
            content_hash=storefmt.content_hash(body),
        )
        return Written(version, created=True, pruned=doomed)

    def _settle(self, path: str) -> None:
        """Commit the batch first if it holds a write of ``path``: what follows reads it."""
        if self._pending and path in self._pending:
            self._commit()

    def _commit(self) -> None:
        """Make the batch's writes durable, then current (see `batch`)."""
        if not self._pending:
            return
        root = str(self.layout.root)
        durable.sync_filesystem(root)
        for path, pending in self._pending.items():
            self._swap_pointer(path, pending.number, sync=False)
            self._prune(path, pending.doomed, sync=False)
        self._pending.clear()
        durable.sync_filesystem(root)

    def _adoptable(self, path: str, body: bytes, refused: Collision) -> bool:
        """Whether the refusal is only a plain regular file at ``path`` that holds ``body``."""
        if refused.reason != status.not_versioned(path):
            return False
        try:
            data, _ = read_file(self.layout.fs_path(path))
        except OSError:
            return False
        return data == body

    def _make_dirs(self, path: str, *, sync: bool = True) -> None:
        """Create the document's folder chain and version folder."""
        dirs, name = split_doc_path(path)
        durable.make_dirs(str(self.layout.root), [*dirs, VERSIONS_DIR, name], sync=sync)

    def _swap_pointer(self, path: str, number: int, *, sync: bool = True) -> None:
        """Make version ``number`` current: the moment a write is acknowledged."""
        target = self.layout.pointer_target(path, number)
        durable.swap_symlink(self.layout.fs_path(path), target, sync=sync)

    def _migrate(self, path: str, pointer: Pointer) -> None:
        """Move a legacy flat history into the per-document layout, crash-safely: link every file
        into the new folder, fsync, swap the pointer, then remove the old names."""
        self._make_dirs(path)
        legacy = list(self.layout.version_files(path, legacy=True))
        for number, file in legacy:
            if number > pointer.number:
                continue
            twin = self.layout.version_file(path, number)
            if os.path.lexists(twin) and not os.path.samefile(twin, file):
                os.unlink(twin)  # a stray of an interrupted migration, never acknowledged
            with contextlib.suppress(FileExistsError):
                os.link(file, twin)
        vdir = self.layout.version_dir(path)
        durable.fsync_dir(vdir)
        self._swap_pointer(path, pointer.number)
        for _, file in legacy:
            os.unlink(file)
        durable.fsync_dir(os.path.dirname(vdir))

    def _doomed(self, path: str, newest: int, keep: int | None) -> tuple[int, ...]:
        """The versions ``retention: keep`` removes once ``newest`` is current."""
        if keep is None:
            return ()
        stored = self.layout.version_files(path, legacy=False)
        numbers = sorted(n for n, _ in stored if n <= newest)
        return tuple(numbers[: max(0, len(numbers) - keep)])

    def _prune(self, path: str, doomed: tuple[int, ...], *, sync: bool = True) -> None:
        for number in doomed:
            os.unlink(self.layout.version_file(path, number))
        if doomed and sync:
            durable.fsync_dir(self.layout.version_dir(path))


@dataclass(frozen=True, slots=True)
class _Pending:
    """A batched write waiting for its commit: the version to make current, what to prune."""

    number: int
    doomed: tuple[int, ...]


def read_file(file: str) -> tuple[bytes, os.stat_result]:
    """Read one version file, refusing anything that is not a regular file."""
    fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", file)
        chunks = []
        while chunk := os.read(fd, max(st.st_size, 65536)):
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)
