"""The content root as a directory descriptor: every file step below it goes one real folder at a
time, so no link, wherever it points, is ever followed (SPEC §7.1).

Opening ``docs/versions/a.md/v3`` opens ``docs``, ``versions`` and ``a.md`` in turn, each relative
to the one before with ``O_DIRECTORY | O_NOFOLLOW``, then the file relative to the last with
``O_NOFOLLOW``: a component that is a link fails to open instead of being followed, and an open
folder's descriptor keeps naming that folder whatever is renamed or linked meanwhile, so the check
cannot race. The one kind of link the store reads is a document's pointer, and it is read
(``readlink``), never followed. Writes create, link, rename and remove names relative to an open
folder's descriptor, through `markproto.durable`.

A link met where a folder or a file should be is refused and logged once per name: a restored or
synced tree may hold many, and a request that meets one again is not worth another line.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

from markproto.protocol.paths import VERSIONS_DIR

log = logging.getLogger("markproto.server.storage")

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""``O_NONBLOCK``: a FIFO planted as a version file must not hang the opener."""
_LINKED = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})
"""What opening through ``O_NOFOLLOW`` answers for a link (ENOTDIR: not a folder at all)."""
REFUSALS_LOGGED = 1000
CUT_HEAD = 64 << 10
"""A file read in two parts (`Root.read` with ``cut``) is first read this far to find the cut:
a smaller one is read whole (its slice is a small copy)."""
"""Distinct refused names logged; past this the rest are refused silently (one line says so)."""


class Root:
    """The content root, held open. Closed by `close` or when collected."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise NotADirectoryError(f"content root {path} is not a directory") from exc
        self._close = weakref.finalize(self, os.close, self.fd)
        self._refused: set[str] = set()
        self._holder: int | None = None
        """The thread holding its folders open (`holding`), and them, by path."""
        self._held: dict[str, int] = {}

    def close(self) -> None:
        self._close()

    def folder(self, parts: Sequence[str]) -> Folder | None:
        """The real folder ``root/parts[0]/...``; None when one is missing or not a real folder."""
        return self._walk(parts, Folder.child)

    def make(self, parts: Sequence[str], *, sync: bool = True, fresh: bool = False) -> Folder:
        """`folder`, making the missing folders on the way (fsyncing each parent unless
        ``sync`` is false: a group commit syncs them all at once); a link or a file in the way
        raises. ``fresh``: the last folder is most likely missing (a new document's own), so it
        is made before it is opened, not after an open that fails."""
        if fresh and parts:
            with self.make(parts[:-1], sync=sync) as parent:
                return parent.make(parts[-1], sync=sync, fresh=True)
        folder = self._walk(parts, lambda parent, part: parent.make(part, sync=sync))
        assert folder is not None
        return folder

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Keep the folders this thread opens open until the end: a batch of writes walks the
        same few folders from the root again and again (about 30 opens and closes a write,
        each of which hands the interpreter's lock to the event loop for up to a switch
        interval). A held folder's descriptor names the folder it was opened as, whatever is
        renamed or linked meanwhile, as any open folder's does; other threads open their own."""
        if self._holder is not None:
            yield
            return
        self._holder, self._held = threading.get_ident(), {}
        try:
            yield
        finally:
            held, self._held, self._holder = self._held, {}, None
            for fd in held.values():
                os.close(fd)

    def _walk(
        self, parts: Sequence[str], step: Callable[[Folder, str], Folder | None]
    ) -> Folder | None:
        """``parts`` opened one at a time by ``step``, from the deepest folder held (`holding`)
        on the way, else from the root."""
        held = self.held()
        start, fd = 0, None
        if held:
            for start in range(len(parts), 0, -1):
                fd = held.get("/".join(parts[:start]))
                if fd is not None:
                    break
            else:
                start = 0
        if fd is None:
            folder = Folder(self, "", self.fd if held is not None else os.dup(self.fd))
            folder.owned = held is None
        else:
            folder = Folder(self, "/".join(parts[:start]), fd)
            folder.owned = False
        for part in parts[start:]:
            with folder:
                child = step(folder, part)
            if child is None:
                return None
            folder = child
        return folder

    def held(self) -> dict[str, int] | None:
        """The folders this thread holds open by path (`holding`), or None when it holds none."""
        return self._held if self._holder == threading.get_ident() else None

    def read(
        self, file: str, limit: int, cut: Callable[[bytes], int] | None = None
    ) -> tuple[bytes, bytes, os.stat_result]:
        """The bytes of the regular file ``file`` (relative to the root), at most ``limit`` + 1
        of them so an oversized one is known as such, in two parts: all of them and ``b""``, or,
        for a file longer than ``CUT_HEAD`` where ``cut`` of its first ``CUT_HEAD`` bytes says
        where its rest starts (not -1), those up to there and the rest, read into a bytes object
        of its own (a version's body is then held once, not as the file and its slice). OSError
        if it is missing, a link or not a regular file."""
        *parts, name = file.split("/")
        folder = self.folder(parts)
        if folder is None:
            raise FileNotFoundError(errno.ENOENT, "no such folder", file)
        with folder:
            return folder.read(name, limit, cut)

    def size(self, file: str) -> int | None:
        """The size of the regular file ``file`` (relative to the root); None if it is missing,
        a link or not a regular file."""
        *parts, name = file.split("/")
        folder = self.folder(parts)
        if folder is None:
            return None
        with folder:
            st = folder.regular(name)
        return None if st is None else st.st_size

    def refuse(self, name: str, why: str) -> None:
        """Log, once per ``name`` (relative to the root), why it is not used."""
        if name in self._refused or len(self._refused) > REFUSALS_LOGGED:
            return
        self._refused.add(name)
        if len(self._refused) > REFUSALS_LOGGED:
            log.warning("more links refused in %s: no longer logged one by one", self.path)
            return
        log.warning("not served or written, %s in %s: %s", name, self.path, why)


class Folder:
    """One open real folder below the root; a context manager that closes it."""

    __slots__ = ("fd", "owned", "path", "root")

    def __init__(self, root: Root, path: str, fd: int) -> None:
        self.root = root
        self.path = path
        """Relative to the root ("" for the root itself)."""
        self.fd = fd
        self.owned = True
        """Closed on exit; a folder the root holds (`Root.holding`) is not."""

    def __enter__(self) -> Folder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.owned:
            os.close(self.fd)

    def name(self, entry: str) -> str:
        """An entry's name relative to the root."""
        return f"{self.path}/{entry}" if self.path else entry

    def child(self, name: str) -> Folder | None:
        """The real folder ``name`` in this one; None if it is missing or not a real folder."""
        try:
            return self._open(name)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno not in _LINKED:
                raise
            self._refused(name, "a folder")
            return None

    def make(self, name: str, *, sync: bool = True, fresh: bool = False) -> Folder:
        """The real folder ``name`` in this one, made (and this one fsynced, unless ``sync`` is
        false) if missing; ``fresh`` tries making it first (see `Root.make`)."""
        if not fresh:
            try:
                return self._open(name)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno in _LINKED:
                    self._refused(name, "a folder")
                raise
        with contextlib.suppress(FileExistsError):  # there already: opened below all the same
            os.mkdir(name, 0o755, dir_fd=self.fd)
            if sync:
                os.fsync(self.fd)
        try:
            return self._open(name)
        except OSError as exc:
            if exc.errno in _LINKED:
                self._refused(name, "a folder")
            raise

    def _open(self, name: str) -> Folder:
        """The folder ``name`` opened, or, while the root holds this thread's folders
        (`Root.holding`), the one held (opened and held the first time)."""
        path = self.name(name)
        held = self.root.held()
        if held is None:
            return Folder(self.root, path, os.open(name, _DIR, dir_fd=self.fd))
        fd = held.get(path)
        if fd is None:
            fd = held[path] = os.open(name, _DIR, dir_fd=self.fd)
        folder = Folder(self.root, path, fd)
        folder.owned = False
        return folder

    def read(
        self, name: str, limit: int, cut: Callable[[bytes], int] | None = None
    ) -> tuple[bytes, bytes, os.stat_result]:
        """The regular file ``name`` (see `Root.read`)."""
        try:
            fd = os.open(name, _FILE, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in _LINKED:
                self._refused(name, "a file")
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", self.name(name))
            if cut is None or st.st_size <= CUT_HEAD:
                return _read_all(fd, limit + 1, st.st_size), b"", st
            head = _read_all(fd, min(limit + 1, CUT_HEAD), CUT_HEAD)
            at = cut(head) if len(head) == CUT_HEAD else -1
            if not 0 <= at <= len(head):
                rest = _read_all(fd, limit + 1 - len(head), st.st_size - len(head))
                return (head + rest if rest else head), b"", st
            os.lseek(fd, at, os.SEEK_SET)
            return head[:at], _read_all(fd, limit + 1 - at, st.st_size - at), st
        finally:
            os.close(fd)

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def readlink(self, name: str) -> str | None:
        """What the link ``name`` holds; None if it is missing or not a link."""
        try:
            return os.readlink(name, dir_fd=self.fd)
        except OSError:
            return None

    def entries(self) -> list[os.DirEntry[str]]:
        """The entries, in no order (``is_dir`` and ``is_symlink`` never follow a link)."""
        with os.scandir(self.fd) as entries:
            return list(entries)

    def regular(self, name: str) -> os.stat_result | None:
        """``name``'s status if it is a regular file; a link is refused (logged once)."""
        st = self.lstat(name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            self._refused(name, "a file")
        return st if st is not None and stat.S_ISREG(st.st_mode) else None

    def blocked(self, parts: Sequence[str]) -> bool:
        """A folder of ``parts`` (a path below this one) is there but is not a real folder."""
        st = self.lstat(parts[0])
        if st is None:
            return False
        if not stat.S_ISDIR(st.st_mode):
            self._refused(parts[0], "a folder")
            return True
        if len(parts) == 1:
            return False
        child = self.child(parts[0])
        if child is None:
            return True
        with child:
            return child.blocked(parts[1:])

    def unlink(self, name: str) -> None:
        os.unlink(name, dir_fd=self.fd)

    def rmdir(self, name: str) -> None:
        os.rmdir(name, dir_fd=self.fd)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def _refused(self, name: str, where: str) -> None:
        target = self.readlink(name)
        if target is not None and not target.startswith(f"{VERSIONS_DIR}/{name}"):
            # A document's pointer met on the way to a folder is a document, not a refusal.
            self.root.refuse(self.name(name), f"a link where {where} must be (it could lead out)")


def same_file(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    """Both exist and are one file (hard links of each other)."""
    return a is not None and b is not None and (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev)


def _read_all(fd: int, limit: int, size: int) -> bytes:
    """Up to ``limit`` bytes from ``fd``'s offset to its end (``size`` of them expected: one
    read of them and one that finds the end, sized so it allocates nothing large)."""
    chunks = []
    want = max(size, 0)
    while limit > 0 and (chunk := os.read(fd, min(limit, max(want, 65536)))):
        chunks.append(chunk)
        limit -= len(chunk)
        want = 0
    return b"".join(chunks)
