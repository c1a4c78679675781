"""Where a content root keeps things (SPEC "Store format"): every name on disk is the reference's.

Layout of a document ``/docs/a.md``::

    docs/a.md                  -> symlink "versions/a.md/v3"   (the current pointer)
    docs/versions/a.md/v1..v3  immutable version files
    docs/versions/a.md/archived   our archive flag, kept apart so archiving never changes an etag
    docs/versions/a.md.v1..    the legacy flat layout: read, and migrated on the next write

This module names and finds; it reads pointers, flags and folder listings but never a version
file's contents and never writes (that is `store`). Every folder on a document's path must be a
real folder, not a link.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from markproto import durable
from markproto.protocol import paths

log = logging.getLogger("markproto.server.storage.layout")

VERSIONS_DIR = paths.VERSIONS_DIR
ARCHIVE_FILE = "archived"
VERSION_NAME = re.compile(r"v([1-9][0-9]*)\Z")


@dataclass(frozen=True, slots=True)
class Pointer:
    """Where a document's current pointer leads."""

    number: int
    legacy: bool
    file: str


def modified_of(st: os.stat_result) -> datetime:
    """A version's ``modified``: its file's mtime in UTC, truncated to whole seconds."""
    return datetime.fromtimestamp(int(st.st_mtime), UTC)


def split_doc_path(path: str) -> tuple[list[str], str]:
    """``/docs/a.md`` -> (["docs"], "a.md")."""
    parts = path.strip("/").split("/")
    return parts[:-1], parts[-1]


class Layout:
    """The names of one content root."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"content root {root} is not a directory")

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
        return Pointer(int(matched.group(1)), legacy, os.path.join(os.path.dirname(link), target))

    def pointer_target(self, path: str, number: int) -> str:
        """What the pointer of ``path`` holds when version ``number`` is current."""
        return f"{VERSIONS_DIR}/{split_doc_path(path)[1]}/v{number}"

    def version_dir(self, path: str) -> str:
        """The folder of a document's versions (and of its archive flag)."""
        dirs, name = split_doc_path(path)
        return os.path.join(self.fs_path("/" + "/".join(dirs)), VERSIONS_DIR, name)

    def version_file(self, path: str, number: int, legacy: bool = False) -> str:
        if legacy:
            return f"{self.version_dir(path)}.v{number}"
        return os.path.join(self.version_dir(path), f"v{number}")

    def archive_file(self, path: str) -> str:
        return os.path.join(self.version_dir(path), ARCHIVE_FILE)

    def version_files(self, path: str, legacy: bool) -> Iterator[tuple[int, str]]:
        """Every version file of ``path`` in one layout, as (number, file), in no order."""
        if legacy:
            folder, stem = os.path.split(self.version_dir(path) + ".v")
            with contextlib.suppress(OSError), os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.startswith(stem):
                        matched = VERSION_NAME.match("v" + entry.name[len(stem) :])
                        if matched:
                            yield int(matched.group(1)), entry.path
            return
        with contextlib.suppress(OSError), os.scandir(self.version_dir(path)) as entries:
            for entry in entries:
                matched = VERSION_NAME.match(entry.name)
                if matched:
                    yield int(matched.group(1)), entry.path

    def archive_flag(self, path: str) -> bool | None:
        """The archive flag's verdict, or None without one (then the version file's
        ``archived:`` line decides, as the old reference store rewrote it in place)."""
        try:
            with open(self.archive_file(path), "rb") as f:
                return f.read().strip() != b"false"
        except (FileNotFoundError, NotADirectoryError):
            return None

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


def _is_utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True
