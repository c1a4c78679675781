"""Startup recovery: remove what interrupted writes left behind, never an acknowledged version.

A version is acknowledged only once the document's pointer names it, so everything the pointer
does not reach may go: temporary files, version files numbered above the pointer, legacy twins of
files a finished migration already moved, and version folders that no pointer leads to (an
interrupted first write). Runs before the server serves anything; change scans never delete.
Every folder is opened through `rooted`, so a link never leads recovery out of the root: a link
with a temporary's name is removed itself, and a linked folder is never entered.
"""

from __future__ import annotations

import logging
import stat
import sys

from markproto import durable
from markproto.server.storage.layout import ARCHIVE_FILE, VERSION_NAME, VERSIONS_DIR, Layout
from markproto.server.storage.rooted import Folder, same_file

log = logging.getLogger("markproto.server.storage.recovery")


def recover(layout: Layout) -> list[str]:
    """Clean every folder of a content root; return the files removed (relative to the root)."""
    removed: list[str] = []
    for kind, path in list(layout.walk()):
        if kind == "dir":
            folder = layout.root.folder([part for part in path.split("/") if part])
            if folder is not None:
                with folder:
                    removed += _folder(layout, path, folder)
    return removed


def _child(folder: str, name: str) -> str:
    return ("" if folder == "/" else folder) + "/" + name


def _folder(layout: Layout, path: str, folder: Folder) -> list[str]:
    names = _names(folder)
    removed = [f for name in names if durable.TMP_NAME.match(name) for f in _remove(folder, name)]
    vroot = folder.child(VERSIONS_DIR)
    if vroot is None:
        return removed
    with vroot:
        for entry in vroot.entries():
            name = entry.name
            if durable.TMP_NAME.match(name):
                removed += _remove(vroot, name)
            elif entry.is_dir(follow_symlinks=False):
                vdir = vroot.child(name)
                if vdir is not None:
                    with vdir:
                        removed += _history(layout, _child(path, name), vroot, vdir)
        for name in _names(vroot):
            stem, dot, rest = name.rpartition(".v")
            if not dot or not VERSION_NAME.match("v" + rest):
                continue
            pointer = layout.pointer(_child(path, stem))
            if pointer is None or pointer.legacy:
                continue
            twins = vroot.child(stem)
            if twins is not None:
                with twins:
                    migrated = same_file(twins.lstat("v" + rest), vroot.lstat(name))
                if migrated:
                    removed += _remove(vroot, name)
    return removed


def orphaned(vdir: Folder) -> list[str]:
    """Empty a version folder no pointer leads to of its files (its versions, temporaries and
    archive flag), fsynced; return them. The caller holds the root's write lock, so no write
    in progress is among them: a document's first write (`Store`) calls it on a torn ``v1``."""
    removed = _strays(vdir, None)
    if vdir.lstat(ARCHIVE_FILE) is not None:
        removed += _remove(vdir, ARCHIVE_FILE)
    if removed:
        vdir.fsync()
    return removed


def _history(layout: Layout, doc: str, vroot: Folder, vdir: Folder) -> list[str]:
    """One document's version folder: strays above its pointer, or all of it without one."""
    pointer = layout.pointer(doc)
    if pointer is None:
        removed = orphaned(vdir)
        try:
            vroot.rmdir(vdir.path.rsplit("/", 1)[-1])
        except OSError:
            pass
        else:
            vroot.fsync()
        return removed
    # A legacy pointer's folder holds the twins of an interrupted migration: all kept.
    removed = _strays(vdir, sys.maxsize if pointer.legacy else pointer.number)
    if removed:
        vdir.fsync()
    return removed


def _strays(vdir: Folder, newest: int | None) -> list[str]:
    """Remove a version folder's temporaries and its version files above ``newest`` (every
    one when None)."""
    removed: list[str] = []
    for entry in _names(vdir):
        if durable.TMP_NAME.match(entry):
            removed += _remove(vdir, entry)
            continue
        matched = VERSION_NAME.match(entry)
        if matched is not None and (newest is None or int(matched.group(1)) > newest):
            removed += _remove(vdir, entry)
    return removed


def _names(folder: Folder) -> list[str]:
    try:
        return [entry.name for entry in folder.entries()]
    except OSError:
        return []


def _remove(folder: Folder, name: str) -> list[str]:
    file = folder.name(name)
    st = folder.lstat(name)
    if st is not None and stat.S_ISDIR(st.st_mode):
        return []  # a folder with a temporary's name is nobody's write: left alone
    try:
        folder.unlink(name)
    except OSError as exc:
        log.warning("recovery could not remove %s: %s", file, exc)
        return []
    log.warning("recovery removed %s (left by an interrupted write)", file)
    return [file]
