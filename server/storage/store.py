"""The on-disk versioned store (SPEC "Store format"): every byte on disk is the reference's.

Layout of a document ``/docs/a.md``::

    docs/a.md                  -> symlink "versions/a.md/v3"   (the current pointer)
    docs/versions/a.md/v1..v3  immutable version files
    docs/versions/a.md/archived   our archive state, kept apart so archiving never changes an etag
    docs/versions/a.md.v1..    the legacy flat layout: read, and migrated on the next write

Durability: a version file is written to a temporary name, fsynced, then hard-linked to ``vN``
(link fails if ``vN`` exists, which gives exclusive creation of a *complete* file), the directory
is fsynced, and only then is the pointer swapped (temporary symlink + rename + directory fsync). A
crash at any instant leaves the old pointer and a stray file, or the new pointer and a complete
version; ``recover`` removes the strays at startup. Reads are lock-free: version files never
change once linked.

This module is the only one that touches the content root. It is synchronous; the server runs writes
on one worker thread, so there is one writer.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from markproto import durable
from markproto.protocol import metadata, paths, storefmt
from markproto.protocol.errors import StoreFormatError
from markproto.protocol.limits import MAX_BODY

log = logging.getLogger("markproto.server.storage.store")

VERSIONS_DIR = paths.VERSIONS_DIR
ARCHIVE_FILE = "archived"
VERSION_NAME = re.compile(r"v([1-9][0-9]*)\Z")


class StoreError(Exception):
    """A write the store refuses; ``str()`` is the wire message where the status needs one."""


class NotFound(StoreError):
    """No document with history at that path."""


class Conflict(StoreError):
    """``expected-version`` does not name the current version (or a concurrent write won)."""

    def __init__(self, current: int) -> None:
        super().__init__(f"current version is {current}")
        self.current = current


ARCHIVED_MESSAGE = "document is archived; unarchive first"


class Archived(StoreError):
    """The document is archived; it must be unarchived before it takes a new version."""


class Collision(StoreError):
    """The path cannot be a document here: a directory, a document above it, or a reserved name."""


class TooLarge(StoreError):
    """The new content would exceed the 1 MiB document limit."""


class Corrupt(StoreError):
    """A version file on disk breaks the strict grammar; it is never served or built upon."""


@dataclass(frozen=True, slots=True)
class VersionFile:
    """One version of a document on disk."""

    number: int
    file: str
    modified: datetime


@dataclass(frozen=True, slots=True)
class Loaded:
    """A version read from disk, with everything the wire and the indexes need from it."""

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
class Pointer:
    """Where a document's current pointer leads."""

    number: int
    legacy: bool
    file: str


@dataclass(frozen=True, slots=True)
class Written:
    """The outcome of a write that succeeded (``created`` is False for an idempotent no-op)."""

    doc: Loaded
    created: bool
    pruned: tuple[int, ...] = ()


def modified_of(st: os.stat_result) -> datetime:
    """A version's ``modified``: its file's mtime in UTC, truncated to whole seconds."""
    return datetime.fromtimestamp(int(st.st_mtime), UTC)


def split_doc_path(path: str) -> tuple[list[str], str]:
    """``/docs/a.md`` -> (["docs"], "a.md")."""
    parts = path.strip("/").split("/")
    return parts[:-1], parts[-1]


class Store:
    """The versioned store over one content root."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"content root {root} is not a directory")
        self._write_lock = threading.Lock()

    # -- locating ---------------------------------------------------------------------------------

    def fs_path(self, path: str) -> str:
        """The filesystem path of a canonical protocol path (no ``..`` can reach here)."""
        return os.path.join(self.root, path.lstrip("/")) if path != "/" else str(self.root)

    def is_dir(self, path: str) -> bool:
        """True for a real directory (not a symlink, not a version store) at ``path``."""
        if path == "/":
            return True
        dirs, name = split_doc_path(path)
        if name == VERSIONS_DIR or VERSIONS_DIR in dirs:
            return False
        return self._real_dir(path)

    def _real_dir(self, path: str) -> bool:
        # Every component must be a real directory: a symlink may never lead out of the root.
        current = str(self.root)
        for part in path.strip("/").split("/"):
            current = os.path.join(current, part)
            try:
                st = os.lstat(current)
            except OSError:
                return False
            if not stat.S_ISDIR(st.st_mode):
                return False
        return True

    def pointer(self, path: str) -> Pointer | None:
        """Read a document's current pointer; None unless it is a well-formed pointer of ours."""
        dirs, name = split_doc_path(path)
        if VERSIONS_DIR in dirs or name == VERSIONS_DIR:
            return None
        parent = "/" + "/".join(dirs)
        if dirs and not self._real_dir(parent):
            return None
        link = self.fs_path(path)
        try:
            target = os.readlink(link)
        except OSError:
            return None
        return self._parse_target(os.path.dirname(link), name, target)

    @staticmethod
    def _parse_target(dir_fs: str, name: str, target: str) -> Pointer | None:
        prefix = f"{VERSIONS_DIR}/{name}"
        if target.startswith(prefix + "/"):
            legacy, rest = False, target[len(prefix) + 1 :]
        elif target.startswith(prefix + "."):
            legacy, rest = True, target[len(prefix) + 1 :]
        else:
            return None
        matched = VERSION_NAME.match(rest)
        if matched is None:
            return None
        return Pointer(int(matched.group(1)), legacy, os.path.join(dir_fs, target))

    def _version_dir(self, path: str) -> str:
        dirs, name = split_doc_path(path)
        return os.path.join(self.fs_path("/" + "/".join(dirs)), VERSIONS_DIR, name)

    def _legacy_prefix(self, path: str) -> str:
        return self._version_dir(path) + ".v"

    # -- reading ----------------------------------------------------------------------------------

    def read_file(self, file: str) -> tuple[bytes, os.stat_result]:
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

    def load(self, path: str, number: int | None = None) -> Loaded | None:
        """Load the current version (or version ``number``); None if there is no such version.

        Raises Corrupt when the file exists but breaks the version-file grammar.
        """
        pointer = self.pointer(path)
        if pointer is None:
            return None
        if number is None or number == pointer.number:
            file = pointer.file
        elif number > pointer.number:
            return None
        else:
            file = self._version_file(path, number, pointer.legacy)
        try:
            data, st = self.read_file(file)
        except OSError:
            return None
        return self._loaded(path, file, data, st, pointer if number is None else None)

    def load_file(self, path: str, file: str) -> Loaded | None:
        """Load one known version file of ``path`` (its in-file archived line, no flag lookup)."""
        try:
            data, st = self.read_file(file)
        except OSError:
            return None
        return self._loaded(path, file, data, st, None)

    def _loaded(
        self, path: str, file: str, data: bytes, st: os.stat_result, current: Pointer | None
    ) -> Loaded:
        try:
            parsed = storefmt.parse_version(data)
        except StoreFormatError as exc:
            raise Corrupt(f"{path}: {file}: {exc}") from exc
        archived = parsed.archived
        if current is not None:
            flag = self.archive_flag(path)
            archived = parsed.archived if flag is None else flag
        return Loaded(
            path=path,
            number=parsed.version,
            file=file,
            modified=modified_of(st),
            archived=archived,
            meta=parsed.meta,
            body=parsed.body,
            etag=storefmt.etag(data),
            content_hash=storefmt.content_hash(parsed.body),
        )

    def _version_file(self, path: str, number: int, legacy: bool) -> str:
        if legacy:
            return f"{self._legacy_prefix(path)}{number}"
        return os.path.join(self._version_dir(path), f"v{number}")

    def archive_flag(self, path: str) -> bool | None:
        """The archive flag file's verdict, or None without one (then the version file's
        ``archived:`` line decides, as the old reference store rewrote it in place)."""
        try:
            with open(os.path.join(self._version_dir(path), ARCHIVE_FILE), "rb") as f:
                return f.read().strip() != b"false"
        except (FileNotFoundError, NotADirectoryError):
            return None

    def history(self, path: str) -> list[VersionFile] | None:
        """Every stored version up to the current one, ascending; None without history."""
        pointer = self.pointer(path)
        if pointer is None:
            return None
        found: list[VersionFile] = []
        for number, file in self._version_files(path, pointer.legacy):
            if number > pointer.number:
                continue  # an unacknowledged leftover; recover() removes it
            try:
                st = os.lstat(file)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append(VersionFile(number, file, modified_of(st)))
        found.sort(key=lambda v: v.number)
        return found or None

    def _version_files(self, path: str, legacy: bool) -> Iterator[tuple[int, str]]:
        if legacy:
            prefix = self._legacy_prefix(path)
            folder, stem = os.path.split(prefix)
            with contextlib.suppress(OSError), os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.startswith(stem):
                        matched = VERSION_NAME.match("v" + entry.name[len(stem) :])
                        if matched:
                            yield int(matched.group(1)), entry.path
            return
        with contextlib.suppress(OSError), os.scandir(self._version_dir(path)) as entries:
            for entry in entries:
                matched = VERSION_NAME.match(entry.name)
                if matched:
                    yield int(matched.group(1)), entry.path

    def chain_valid(self, versions: list[VersionFile]) -> bool:
        """Verify the hash chain over the given (ascending, surviving) versions."""
        files = []
        for version in versions:
            data, _ = self.read_file(version.file)
            files.append(data)
        return storefmt.chain_valid(files)

    def walk(self) -> Iterator[tuple[str, str]]:
        """Yield ``("dir", path)`` for every directory and ``("doc", path)`` for every pointer.

        Names starting with ``.`` are walked (``/.well-known``) but temporary files are not; the
        ``versions`` directories are the store's own and never appear.
        """
        stack = ["/"]
        while stack:
            path = stack.pop()
            yield "dir", path
            try:
                entries = list(os.scandir(self.fs_path(path)))
            except OSError as exc:
                log.warning("cannot read directory %s: %s", path, exc)
                continue
            for entry in sorted(entries, key=lambda e: e.name, reverse=True):
                name = entry.name
                if name == VERSIONS_DIR or durable.TMP_NAME.match(name) or not _is_utf8(name):
                    continue
                child = ("" if path == "/" else path) + "/" + name
                if entry.is_symlink():
                    yield "doc", child
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(child)

    # -- writing ----------------------------------------------------------------------------------

    def check_writable(self, path: str) -> None:
        """Raise Collision unless ``path`` can hold a document (SPEC: path collisions)."""
        reason = paths.writable_reason(path)
        if reason is not None:
            raise Collision(reason)
        dirs, name = split_doc_path(path)
        if any(durable.TMP_NAME.match(part) for part in (*dirs, name)):
            raise Collision(f"{path}: names like .tmp-<hex> are reserved for the store")
        current = str(self.root)
        walked = ""
        for part in dirs:
            current = os.path.join(current, part)
            walked += "/" + part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                return
            if stat.S_ISLNK(st.st_mode):
                raise Collision(f"{walked} is a document, not a directory")
            if not stat.S_ISDIR(st.st_mode):
                raise Collision(f"{walked} is not a directory")
        try:
            st = os.lstat(self.fs_path(path))
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise Collision(f"{path} is a directory")
        if not stat.S_ISLNK(st.st_mode):
            raise Collision(f"{path} exists but is not a versioned document")

    def publish(
        self, path: str, body: bytes, meta: Mapping[str, str], expected: int | None
    ) -> Written:
        """Write a new version of ``path`` (SPEC PUBLISH, store checks in the reference's order:
        conflict, archived, no-op, write)."""
        if len(body) > MAX_BODY:
            raise TooLarge("content exceeds size limit")
        with self._write_lock:
            self.check_writable(path)
            current = self._current_for_write(path)
            number = current.number if current else 0
            if expected is not None and expected != number:
                raise Conflict(number)
            if current is not None:
                if current.archived:
                    raise Archived(ARCHIVED_MESSAGE)
                if current.body == body and current.meta == dict(meta):
                    return Written(current, created=False)
            return self._write(path, current, body, meta)

    def append(self, path: str, text: bytes, overlay: Mapping[str, str], expected: int) -> Written:
        """Append ``text`` to the current body (SPEC APPEND): a newline is added only when the
        current body lacks one; metadata is the base version's, overlaid, without retention."""
        with self._write_lock:
            self.check_writable(path)
            current = self._current_for_write(path)
            if current is None:
                raise NotFound(f"{path} not found")
            if expected != current.number:
                raise Conflict(current.number)
            if current.archived:
                raise Archived(ARCHIVED_MESSAGE)
            sep = b"" if not current.body or current.body.endswith(b"\n") else b"\n"
            body = current.body + sep + text
            if len(body) > MAX_BODY:
                raise TooLarge("content exceeds size limit")
            merged = {k: v for k, v in current.meta.items() if k != "retention"}
            merged.update(overlay)
            merged = metadata.normalize(metadata.with_type_default(path, merged))
            metadata.validate(merged)
            metadata.validate_store(merged)
            return self._write(path, current, body, merged)

    def set_archived(self, path: str, archived: bool) -> Loaded:
        """Archive or unarchive the current version without touching any version file."""
        with self._write_lock:
            current = self._current_for_write(path)
            if current is None:
                raise NotFound(f"{path} not found")
            if current.archived == archived:
                return current
            pointer = self.pointer(path)
            if pointer is not None and pointer.legacy:
                self._migrate(path, pointer)
            # Written both ways: "false" also overrides an old store's in-file "archived: true".
            flag = os.path.join(self._version_dir(path), ARCHIVE_FILE)
            durable.replace(flag, b"true\n" if archived else b"false\n")
            loaded = self.load(path)
            assert loaded is not None
            return loaded

    def _current_for_write(self, path: str) -> Loaded | None:
        """The current version from disk (the truth under the write lock)."""
        if os.path.lexists(self.fs_path(path)) and self.pointer(path) is None:
            raise Collision(f"{path} exists but is not a versioned document")
        return self.load(path)

    def _write(
        self, path: str, current: Loaded | None, body: bytes, meta: Mapping[str, str]
    ) -> Written:
        previous = None
        if current is not None:
            pointer = self.pointer(path)
            if pointer is not None and pointer.legacy:
                self._migrate(path, pointer)
            previous = "sha256-" + current.etag
        number = current.number + 1 if current else 1
        data = storefmt.emit_version(number, previous, meta, body)
        self._make_dirs(path)
        final = os.path.join(self._version_dir(path), f"v{number}")
        try:
            durable.link_new(final, data)
        except FileExistsError:
            raise Conflict(current.number if current else 0) from None
        self._swap_pointer(path, number)
        pruned = self._prune(path, number, metadata.retention(meta))
        st = os.stat(final)
        doc = Loaded(
            path=path,
            number=number,
            file=final,
            modified=modified_of(st),
            archived=False,
            meta=dict(meta),
            body=body,
            etag=storefmt.etag(data),
            content_hash=storefmt.content_hash(body),
        )
        return Written(doc, created=True, pruned=pruned)

    def _make_dirs(self, path: str) -> None:
        """Create the document's folder chain and version folder."""
        dirs, name = split_doc_path(path)
        durable.make_dirs(str(self.root), [*dirs, VERSIONS_DIR, name])

    def _swap_pointer(self, path: str, number: int) -> None:
        """Make version ``number`` current: the moment a write is acknowledged."""
        target = f"{VERSIONS_DIR}/{split_doc_path(path)[1]}/v{number}"
        durable.swap_symlink(self.fs_path(path), target)

    def _migrate(self, path: str, pointer: Pointer) -> None:
        """Move a legacy flat history into the per-document layout, crash-safely: link every file
        into the new folder, fsync, swap the pointer, then remove the old names."""
        self._make_dirs(path)
        vdir = self._version_dir(path)
        legacy = list(self._version_files(path, legacy=True))
        for number, file in legacy:
            if number > pointer.number:
                continue
            twin = os.path.join(vdir, f"v{number}")
            if os.path.lexists(twin) and not os.path.samefile(twin, file):
                os.unlink(twin)  # a stray of an interrupted migration, never acknowledged
            with contextlib.suppress(FileExistsError):
                os.link(file, twin)
        durable.fsync_dir(vdir)
        self._swap_pointer(path, pointer.number)
        for _, file in legacy:
            os.unlink(file)
        durable.fsync_dir(os.path.dirname(vdir))

    def _prune(self, path: str, newest: int, keep: int | None) -> tuple[int, ...]:
        if keep is None:
            return ()
        numbers = sorted(n for n, _ in self._version_files(path, legacy=False) if n <= newest)
        doomed = numbers[: max(0, len(numbers) - keep)]
        vdir = self._version_dir(path)
        for number in doomed:
            os.unlink(os.path.join(vdir, f"v{number}"))
        if doomed:
            durable.fsync_dir(vdir)
        return tuple(doomed)


def _is_utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True
