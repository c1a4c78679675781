"""Where a content root keeps things (SPEC "Store format"): every name on disk is the reference's.

Layout of a document ``/docs/a.md``::

    docs/a.md                  -> symlink "versions/a.md/v3"   (the current pointer)
    docs/versions/a.md/v1..v3  immutable version files
    docs/versions/a.md/archived   our archive flag, kept apart so archiving never changes an etag
    docs/versions/a.md.v1..    the legacy flat layout: read, and migrated on the next write

This module names and finds; it reads pointers, flags and folder listings but never a version
file's contents and never writes (that is `store`). Everything goes through `rooted`, so every
folder on the way is a real folder and no link but a pointer is read, and a pointer is read, not
followed. A version file is named relative to the root (``docs/versions/a.md/v3``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from markproto import durable
from markproto.protocol import paths
from markproto.protocol.limits import MAX_SEGMENTS
from markproto.server.storage.rooted import Folder, Root

log = logging.getLogger("markproto.server.storage.layout")

VERSIONS_DIR = paths.VERSIONS_DIR
ARCHIVE_FILE = "archived"
VERSION_NAME = re.compile(r"v([1-9][0-9]*)\Z")
_FLAG_BYTES = 64
"""An archive flag is ``true`` or ``false``; past this many bytes it is neither (so archived)."""


@dataclass(frozen=True, slots=True)
class Pointer:
    """Where a document's current pointer leads."""

    number: int
    legacy: bool
    file: str
    """The current version file, relative to the root."""


def modified_of(st: os.stat_result) -> datetime:
    """A version's ``modified``: its file's mtime in UTC, truncated to whole seconds."""
    return datetime.fromtimestamp(int(st.st_mtime), UTC)


def split_doc_path(path: str) -> tuple[list[str], str]:
    """``/docs/a.md`` -> (["docs"], "a.md")."""
    parts = path.strip("/").split("/")
    return parts[:-1], parts[-1]


def version_parts(path: str) -> list[str]:
    """The folder of a document's versions (and of its archive flag), as parts below the root."""
    dirs, name = split_doc_path(path)
    return [*dirs, VERSIONS_DIR, name]


def version_file(path: str, number: int, legacy: bool = False) -> str:
    """Version ``number`` of ``path``, relative to the root."""
    parts = version_parts(path)
    if legacy:
        parts[-1] += f".v{number}"
    else:
        parts.append(f"v{number}")
    return "/".join(parts)


class Layout:
    """The names of one content root."""

    def __init__(self, root: Path) -> None:
        self.root = Root(root)

    def pointer(self, path: str) -> Pointer | None:
        """Read a document's current pointer; None unless it is a well-formed pointer of ours."""
        dirs, name = split_doc_path(path)
        if VERSIONS_DIR in dirs or name == VERSIONS_DIR:
            return None
        folder = self.root.folder(dirs)
        if folder is None:
            return None
        with folder:
            return self.read_pointer(folder, name)

    def read_pointer(self, folder: Folder, name: str) -> Pointer | None:
        """The pointer ``name`` in an open folder (see `pointer`)."""
        target = folder.readlink(name)
        if target is None:
            return None
        prefix = f"{VERSIONS_DIR}/{name}"
        if target.startswith(prefix + "/"):
            legacy, rest = False, target[len(prefix) + 1 :]
        elif target.startswith(prefix + "."):
            legacy, rest = True, target[len(prefix) + 1 :]
        else:
            legacy, rest = False, ""
        matched = VERSION_NAME.match(rest)
        if matched is None:
            self.root.refuse(folder.name(name), f"a link to {target!r}, not to a version of it")
            return None
        return Pointer(int(matched.group(1)), legacy, folder.name(target))

    def pointer_target(self, path: str, number: int) -> str:
        """What the pointer of ``path`` holds when version ``number`` is current."""
        return f"{VERSIONS_DIR}/{split_doc_path(path)[1]}/v{number}"

    def versions(self, path: str, legacy: bool) -> list[tuple[int, str, os.stat_result]]:
        """Every version file of ``path`` in one layout that is a regular file, as (number, file,
        status), in no order."""
        parts = version_parts(path)
        stem = ""
        if legacy:
            stem = parts.pop() + "."
        folder = self.root.folder(parts)
        if folder is None:
            return []
        found = []
        with folder:
            for entry in folder.entries():
                if not entry.name.startswith(stem):
                    continue
                matched = VERSION_NAME.match(entry.name[len(stem) :])
                st = folder.regular(entry.name) if matched else None
                if matched and st is not None:
                    found.append((int(matched.group(1)), folder.name(entry.name), st))
        return found

    def archive_flag(self, path: str) -> bool | None:
        """The archive flag's verdict, or None without one (then the version file's
        ``archived:`` line decides, as the old reference store rewrote it in place)."""
        folder = self.root.folder(version_parts(path))
        if folder is None:
            return None
        with folder:
            try:
                data, _, _ = folder.read(ARCHIVE_FILE, _FLAG_BYTES)
            except OSError:
                return None
        return data.strip() != b"false"

    def walk(self) -> Iterator[tuple[str, str]]:
        """Yield ``("dir", path)`` for every directory, ``("doc", path)`` for every pointer and
        ``("plain", path)`` for every plain ``.md`` file outside hidden folders (not a document:
        it has no history).

        Names starting with ``.`` are walked (``/.well-known``) but temporary files are not; the
        ``versions`` directories are the store's own and never appear, nor do folders too deep
        to hold a document (`MAX_SEGMENTS`) or links where a folder could be.
        """
        top = self.root.folder(())
        assert top is not None
        with top:
            yield from self._walk(top, "/", 0)

    def _walk(self, folder: Folder, path: str, depth: int) -> Iterator[tuple[str, str]]:
        yield "dir", path
        try:
            entries = sorted(folder.entries(), key=lambda e: e.name)
        except OSError as exc:
            log.warning("cannot read directory %s: %s", path, exc)
            return
        subfolders = []
        for entry in entries:
            name = entry.name
            if name == VERSIONS_DIR or durable.TMP_NAME.match(name) or not _is_utf8(name):
                continue
            child = ("" if path == "/" else path) + "/" + name
            if entry.is_symlink():
                yield "doc", child
            elif entry.is_dir(follow_symlinks=False):
                subfolders.append((name, child))
            elif _plain_markdown(entry, child):
                yield "plain", child
        for name, child in subfolders:
            if depth + 1 >= MAX_SEGMENTS:
                self.root.refuse(folder.name(name), f"deeper than {MAX_SEGMENTS} segments")
                continue
            sub = folder.child(name)
            if sub is not None:
                with sub:
                    yield from self._walk(sub, child, depth + 1)


def _plain_markdown(entry: os.DirEntry[str], path: str) -> bool:
    """A regular ``.md`` file outside hidden folders: what `mark-server import` makes a document."""
    if not entry.name.endswith(".md") or not entry.is_file(follow_symlinks=False):
        return False
    return not any(part.startswith(".") for part in path.split("/"))


def _is_utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True
