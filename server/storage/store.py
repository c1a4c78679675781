"""Versioned reads and writes over one content root (SPEC "Store format"), in `layout`'s names.

The vocabulary, in the protocol's words: a *document* is a path with a history; a *version* is
one numbered, immutable version file of it (`Version`, read in full); the *current version* is
the one its pointer names; its *history* is every version still stored (`History`). A write ends
`Written` or refused, and a refusal is a value (`Refusal`) the handler answers, never an
exception: exceptions here are faults (a corrupt file, a disk error).

Durability: a version file is written to a temporary name, fsynced, then hard-linked to ``vN``
(link fails if ``vN`` exists, which gives exclusive creation of a *complete* file; a new
document's ``v1``, which nothing leads to yet, is created in place), the directory is fsynced,
and only then is the pointer swapped (temporary symlink + rename + directory fsync;
a first version's pointer, which replaces nothing, is made in place). A crash at any instant
leaves the old pointer (or none) and a stray file, or the new pointer and a complete version;
``recovery`` removes the strays at startup (and a new document's first write clears a torn
``v1`` it finds, `_create_first`). Reads are lock-free: version files never change once
linked.

Reading is liberal (`storefmt.read_version`): every shape an earlier reference release wrote is
served, and what a file says that is not understood is logged once per file. Writing is strict
and byte-exact to the newest format.

This module and `layout` are the only ones that touch the content root, and both do it through
`rooted`: every folder is opened one real folder at a time below the root and every name relative
to an open folder, so no write lands and no read comes from outside the root, whatever links the
tree holds. It is synchronous. Every write holds `exclusive`, the root's write lock (a thread
lock plus ``flock`` on the root's descriptor), so writers in one process and in others
(`mark-server import` beside a server) take turns; `batch` group-commits the writes made inside
it with one filesystem sync.
"""

from __future__ import annotations

import contextlib
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
from markproto.protocol.limits import MAX_BODY, STORED_FILE_MAX
from markproto.server.storage import recovery
from markproto.server.storage.layout import (
    ARCHIVE_FILE,
    VERSION_NAME,
    VERSIONS_DIR,
    Layout,
    Pointer,
    modified_of,
    split_doc_path,
    version_file,
    version_parts,
)
from markproto.server.storage.rooted import Folder, same_file

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
        self.root = self.layout.root
        self._write_lock = threading.RLock()
        self._locked = 0
        self._pending: dict[str, _Pending] | None = None
        """Pointer swaps a batch holds back until its commit (None outside a batch)."""
        self._noted: set[str] = set()
        """Version files whose unread lines were logged: each is reported once."""

    def close(self) -> None:
        """Release the root's descriptor (a second close does nothing)."""
        self.root.close()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the content root's write lock: this thread's lock and, for other processes on
        the same root (``mark-server import`` beside a running server), ``flock`` on the root's
        descriptor. Every write takes it; so does startup recovery, which must not take another
        process's half-finished write for debris."""
        with self._write_lock:
            if not self._locked:
                fcntl.flock(self.root.fd, fcntl.LOCK_EX)
            self._locked += 1
            try:
                yield
            finally:
                self._locked -= 1
                if not self._locked:
                    fcntl.flock(self.root.fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group commit: the writes inside create their version files without fsync and hold
        back their pointer swaps; the exit makes all of them durable with one filesystem sync,
        then swaps the pointers, then syncs again. A crash before the swaps leaves files no
        pointer names (recovery removes them), so a write is still current only once durable.
        A second write to a path the batch holds commits what came before it first. The
        folders the batch walks are held open until its end (`Root.holding`)."""
        with self.exclusive(), self.root.holding():
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

        Raises Corrupt when the file exists but breaks the version-file grammar.
        """
        return self._load_at(path, self.layout.pointer(path), number)

    def _load_at(
        self, path: str, pointer: Pointer | None, number: int | None = None
    ) -> Version | None:
        """`load` by a pointer already read."""
        if pointer is None:
            return None
        if number is None or number == pointer.number:
            file = pointer.file
        elif number > pointer.number:
            return None
        else:
            file = version_file(path, number, pointer.legacy)
        try:
            head, rest, st = self._read(file)
        except OSError:
            return None
        return self._version(
            path, number or pointer.number, file, head, rest, st, current=number is None
        )

    def file_size(self, file: str) -> int | None:
        """A version file's size in bytes, unread (None if it is gone)."""
        return self.root.size(file)

    def load_file(self, path: str, number: int, file: str) -> Version | None:
        """One known version file of ``path`` (its in-file archived line, no flag lookup)."""
        try:
            head, rest, st = self._read(file)
        except OSError:
            return None
        return self._version(path, number, file, head, rest, st, current=False)

    def _version(
        self,
        path: str,
        number: int,
        file: str,
        head: bytes,
        rest: bytes,
        st: os.stat_result,
        *,
        current: bool,
    ) -> Version:
        """The version a file read as ``head`` and ``rest`` (`_read`) holds."""
        try:
            if len(head) + len(rest) > STORED_FILE_MAX:
                raise StoreFormatError("version file exceeds size limit")
            parsed, notes = storefmt.read_version(head, number)
        except StoreFormatError as exc:
            raise Corrupt(f"{path}: {file}: {exc}") from exc
        body = rest or parsed.body  # ``head`` ends with the frontmatter when there is a rest
        if notes and file not in self._noted:
            self._noted.add(file)
            log.warning("%s v%d (%s): %s", path, number, file, "; ".join(notes))
        archived = parsed.archived
        if current:
            flag = self.layout.archive_flag(path)
            archived = parsed.archived if flag is None else flag
        return Version(
            path=path,
            number=parsed.version,
            file=file,
            modified=modified_of(st),
            archived=archived,
            meta=metadata.shared(parsed.meta),
            body=body,
            etag=storefmt.etag(head, rest),
            content_hash=storefmt.content_hash(body),
        )

    def history(self, path: str) -> History | None:
        """Every stored version up to the current one; None without history."""
        pointer = self.layout.pointer(path)
        if pointer is None:
            return None
        found: list[tuple[int, str, datetime]] = []
        for number, file, st in self.layout.versions(path, pointer.legacy):
            if number <= pointer.number:  # above it: an unacknowledged leftover, for recovery
                found.append((number, file, modified_of(st)))
        if not found:
            return None
        found.sort()
        entries = tuple(bodies.HistoryEntry(number, modified) for number, _, modified in found)
        return History(path, entries, tuple(file for _, file, _ in found))

    def chain_valid(self, history: History) -> bool:
        """Verify the hash chain over a history's (ascending, surviving) version files."""
        numbers = [entry.version for entry in history.entries]
        files = [self.root.read(file, STORED_FILE_MAX)[0] for file in history.files]
        return storefmt.chain_valid(files, numbers)

    def _read(self, file: str) -> tuple[bytes, bytes, os.stat_result]:
        """A version file as its frontmatter and its body, a large body read into its own
        bytes object (sliced from the file's, it was held twice: the release notes' 703 KB
        beside a startup build's batch were its peak)."""
        return self.root.read(file, STORED_FILE_MAX, storefmt.body_start)

    # -- writing ----------------------------------------------------------------------------------

    def collision(self, path: str) -> Collision | None:
        """Why ``path`` cannot hold a document (SPEC: path collisions), or None when it can."""
        reason = paths.writable_reason(path)
        if reason is not None:
            return Collision(reason)
        dirs, name = split_doc_path(path)
        if any(durable.TMP_NAME.match(part) for part in (*dirs, name)):
            return Collision(status.temporary_name(path))
        folder = self.root.folder(dirs)  # every one a real folder: nothing in the way above
        if folder is not None:
            with folder:
                return self._foreign(folder, path, name)
        folder = self.root.folder(())  # which step is in the way, and how
        assert folder is not None
        walked = ""
        for part in dirs:
            walked += "/" + part
            with folder:
                st = folder.lstat(part)
                if st is None:
                    return None
                if stat.S_ISLNK(st.st_mode):
                    if self.layout.read_pointer(folder, part) is not None:
                        return Collision(status.document_above(walked))
                    return Collision(status.not_a_directory(walked))
                child = folder.child(part) if stat.S_ISDIR(st.st_mode) else None
                if child is None:
                    return Collision(status.not_a_directory(walked))
            folder = child
        with folder:
            return self._foreign(folder, path, name)

    def _foreign(self, folder: Folder, path: str, name: str) -> Collision | None:
        """Something at ``path`` (``name`` in its open parent ``folder``) that is not a document
        of ours: a folder, a file, a link that is not a pointer, or a history folder that is not a
        real folder (a link there could lead the write out of the root)."""
        st = folder.lstat(name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            return Collision(status.is_a_directory(path))
        if st is not None and (
            not stat.S_ISLNK(st.st_mode) or self.layout.read_pointer(folder, name) is None
        ):
            return Collision(status.not_versioned(path))
        if folder.blocked([VERSIONS_DIR, name]):
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
            pointer = self.layout.pointer(path)
            current = self._load_at(path, pointer)
            number = current.number if current else 0
            if expected is not None and expected != number:
                return Conflict(number)
            if current is not None:
                if current.archived:
                    return Archived()
                if current.body == body and current.meta == dict(meta):
                    return Written(current, created=False)
            return self._write(path, pointer, current, body, meta)

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
            pointer = self.layout.pointer(path)
            current = self._load_at(path, pointer)
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
            return self._write(path, pointer, current, body, merged)

    def set_archived(self, path: str, archived: bool) -> Version | Missing | Collision:
        """Archive or unarchive the current version without touching any version file."""
        with self.exclusive():
            self._settle(path)
            dirs, name = split_doc_path(path)
            parent = self.root.folder(dirs)
            if parent is None:
                return Missing()
            with parent:
                refused = self._foreign(parent, path, name)
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
            # A link planted at the flag's name is replaced, never written through.
            with self.root.make(version_parts(path)) as vdir:
                flag = b"true\n" if archived else b"false\n"
                durable.replace(ARCHIVE_FILE, flag, dir_fd=vdir.fd)
            version = self.load(path)
            assert version is not None
            return version

    def _write(
        self,
        path: str,
        pointer: Pointer | None,
        current: Version | None,
        body: bytes,
        meta: Mapping[str, str],
    ) -> Written | Conflict:
        """Write the next version after ``current``, which ``pointer`` (as the caller read it,
        under the write lock) leads to. A new document's (no pointer at all) is written in
        place as ``v1`` (`_create_first`), not under a temporary name linked to it."""
        previous = None
        if current is not None:
            if pointer is not None and pointer.legacy:
                self._migrate(path, pointer)
            previous = digests.hash_ref_of_hex(current.etag)
        number = current.number + 1 if current else 1
        data = storefmt.emit_version(number, previous, meta, body)
        final = f"v{number}"
        sync = self._pending is None
        new = pointer is None
        with self.root.make(version_parts(path), sync=sync, fresh=new) as vdir:
            try:
                if new:
                    self._create_first(vdir, final, data, sync=sync)
                else:
                    durable.link_new(final, data, sync=sync, dir_fd=vdir.fd)
            except FileExistsError:
                return Conflict(current.number if current else 0)
            st = os.stat(final, dir_fd=vdir.fd, follow_symlinks=False)
            pruned = self._doomed(vdir, number, metadata.retention(meta))
            if self._pending is None:
                self._swap_pointer(path, number)
                self._prune(vdir, pruned)
            else:
                self._pending[path] = _Pending(number, pruned)
        version = Version(
            path=path,
            number=number,
            file=version_file(path, number),
            modified=modified_of(st),
            archived=False,
            meta=metadata.shared(meta),
            body=body,
            etag=storefmt.etag(data),
            content_hash=storefmt.content_hash(body),
        )
        return Written(version, created=True, pruned=pruned)

    @staticmethod
    def _create_first(vdir: Folder, final: str, data: bytes, *, sync: bool) -> None:
        """Create a new document's first version file in place. Nothing leads to its folder
        before its pointer is made, which comes after the file is durable, so a torn file is
        never served. One found there already was left by a writer that died mid-write (an
        import killed beside a server): the caller holds the root's write lock and no pointer
        leads here, so it is recovery's debris (`recovery.orphaned`), cleared now rather than
        answering ``conflict`` until the next start."""
        try:
            durable.create(final, data, sync=sync, dir_fd=vdir.fd)
        except FileExistsError:
            recovery.orphaned(vdir)
            durable.create(final, data, sync=sync, dir_fd=vdir.fd)
        if sync:
            vdir.fsync()

    def _settle(self, path: str) -> None:
        """Commit the batch first if it holds a write of ``path``: what follows reads it."""
        if self._pending and path in self._pending:
            self._commit()

    def _commit(self) -> None:
        """Make the batch's writes durable, then current (see `batch`)."""
        if not self._pending:
            return
        durable.sync_filesystem("", dir_fd=self.root.fd)
        for path, pending in self._pending.items():
            self._swap_pointer(path, pending.number, sync=False)
            if pending.doomed:
                with self.root.make(version_parts(path), sync=False) as vdir:
                    self._prune(vdir, pending.doomed, sync=False)
        self._pending.clear()
        durable.sync_filesystem("", dir_fd=self.root.fd)

    def _adoptable(self, path: str, body: bytes, refused: Collision) -> bool:
        """Whether the refusal is only a plain regular file at ``path`` that holds ``body``."""
        if refused.reason != status.not_versioned(path):
            return False
        try:
            data, _, _ = self.root.read(path.lstrip("/"), MAX_BODY)
        except OSError:
            return False
        return data == body

    def _swap_pointer(self, path: str, number: int, *, sync: bool = True) -> None:
        """Make version ``number`` current: the moment a write is acknowledged. Version 1 of a
        document most likely has no pointer to replace yet, so its pointer is made in place
        (a symlink appears whole): no temporary name, no rename. Something there after all
        (a plain file being adopted, a legacy pointer migrating) is replaced as any pointer
        is."""
        dirs, name = split_doc_path(path)
        target = self.layout.pointer_target(path, number)
        with self.root.make(dirs, sync=sync) as parent:
            if number == 1:
                try:
                    os.symlink(target, name, dir_fd=parent.fd)
                except FileExistsError:
                    pass
                else:
                    if sync:
                        parent.fsync()
                    return
            durable.swap_symlink(name, target, sync=sync, dir_fd=parent.fd)

    def _migrate(self, path: str, pointer: Pointer) -> None:
        """Move a legacy flat history into the per-document layout, crash-safely: link every file
        into the new folder, fsync, swap the pointer, then remove the old names. Only regular
        files move (a link among them is left behind, refused)."""
        *parts, name = version_parts(path)
        legacy = [
            (number, file.rsplit("/", 1)[1])
            for number, file, _ in self.layout.versions(path, legacy=True)
        ]
        with self.root.make(parts) as versions, versions.make(name) as vdir:
            for number, old in legacy:
                if number > pointer.number:
                    continue
                twin = f"v{number}"
                if not same_file(vdir.lstat(twin), versions.lstat(old)):
                    with contextlib.suppress(FileNotFoundError):
                        vdir.unlink(twin)  # a stray of an interrupted migration, unacknowledged
                with contextlib.suppress(FileExistsError):
                    os.link(
                        old, twin, src_dir_fd=versions.fd, dst_dir_fd=vdir.fd, follow_symlinks=False
                    )
            vdir.fsync()
            self._swap_pointer(path, pointer.number)
            for _, old in legacy:
                versions.unlink(old)
            versions.fsync()

    def _doomed(self, vdir: Folder, newest: int, keep: int | None) -> tuple[int, ...]:
        """The versions ``retention: keep`` removes once ``newest`` is current."""
        if keep is None:
            return ()
        numbers = []
        for entry in vdir.entries():
            matched = VERSION_NAME.match(entry.name)
            if matched and int(matched.group(1)) <= newest:
                numbers.append(int(matched.group(1)))
        numbers.sort()
        return tuple(numbers[: max(0, len(numbers) - keep)])

    def _prune(self, vdir: Folder, doomed: tuple[int, ...], *, sync: bool = True) -> None:
        for number in doomed:
            vdir.unlink(f"v{number}")
        if doomed and sync:
            vdir.fsync()


@dataclass(frozen=True, slots=True)
class _Pending:
    """A batched write waiting for its commit: the version to make current, what to prune."""

    number: int
    doomed: tuple[int, ...]
