"""Startup recovery: remove what interrupted writes left behind, never an acknowledged version.

A version is acknowledged only once the document's pointer names it, so everything the pointer
does not reach may go: temporary files, version files numbered above the pointer, legacy twins of
files a finished migration already moved, and version folders that no pointer leads to (an
interrupted first write). Runs before the server serves anything; change scans never delete.
"""

from __future__ import annotations

import contextlib
import logging
import os

from markproto import durable
from markproto.server.storage.layout import ARCHIVE_FILE, VERSION_NAME, VERSIONS_DIR, Layout

log = logging.getLogger("markproto.server.storage.recovery")


def recover(layout: Layout) -> list[str]:
    """Clean every folder of a content root; return the files removed."""
    removed: list[str] = []
    for kind, path in list(layout.walk()):
        if kind == "dir":
            removed += _folder(layout, path)
    return removed


def _child(folder: str, name: str) -> str:
    return ("" if folder == "/" else folder) + "/" + name


def _folder(layout: Layout, path: str) -> list[str]:
    removed: list[str] = []
    folder = layout.fs_path(path)
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    removed += [f for name in names if durable.TMP_NAME.match(name) for f in _remove(folder, name)]
    vroot = os.path.join(folder, VERSIONS_DIR)
    if not os.path.isdir(vroot) or os.path.islink(vroot):
        return removed
    for name in os.listdir(vroot):
        full = os.path.join(vroot, name)
        if durable.TMP_NAME.match(name):
            removed += _remove(vroot, name)
        elif os.path.isdir(full) and not os.path.islink(full):
            removed += _history(layout, _child(path, name), full)
    for name in os.listdir(vroot):
        stem, dot, rest = name.rpartition(".v")
        if not dot or not VERSION_NAME.match("v" + rest):
            continue
        pointer = layout.pointer(_child(path, stem))
        twin = os.path.join(vroot, stem, "v" + rest)
        migrated = pointer is not None and not pointer.legacy and os.path.exists(twin)
        if migrated and os.path.samefile(twin, os.path.join(vroot, name)):
            removed += _remove(vroot, name)
    return removed


def _history(layout: Layout, doc: str, vdir: str) -> list[str]:
    """One document's version folder: strays above its pointer, or all of it without one."""
    removed: list[str] = []
    pointer = layout.pointer(doc)
    for entry in os.listdir(vdir):
        if durable.TMP_NAME.match(entry):
            removed += _remove(vdir, entry)
            continue
        matched = VERSION_NAME.match(entry)
        if matched is None:
            continue
        if pointer is None or (not pointer.legacy and int(matched.group(1)) > pointer.number):
            removed += _remove(vdir, entry)
    if pointer is None:
        if os.path.exists(os.path.join(vdir, ARCHIVE_FILE)):
            removed += _remove(vdir, ARCHIVE_FILE)
        with contextlib.suppress(OSError):
            os.rmdir(vdir)
    if removed:
        durable.fsync_dir(vdir if os.path.isdir(vdir) else os.path.dirname(vdir))
    return removed


def _remove(folder: str, name: str) -> list[str]:
    file = os.path.join(folder, name)
    try:
        os.unlink(file)
    except OSError as exc:
        log.warning("recovery could not remove %s: %s", file, exc)
        return []
    log.warning("recovery removed %s (left by an interrupted write)", file)
    return [file]
