"""Durable file operations: the steps that let a write survive a crash at any instant.

Each one either completes, fsynced, or leaves nothing but a temporary name that ``recovery``
removes at startup: a file is written under a temporary name and fsynced before it is linked or
renamed into place, and the folder is fsynced after every change of its entries.

With ``dir_fd`` (an open folder) every name is relative to that folder, as in ``os.open``: the
server's store opens its folders itself, one real folder at a time below the content root, and
writes through here without a path that could lead through a link.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets

TMP_NAME = re.compile(r"\.tmp-(?:v[0-9]+-)?[0-9a-f]{12}\Z")
"""Temporary names: a dot-name no document can take (the store refuses such paths)."""


def temp_name(tag: str = "") -> str:
    """A fresh temporary name matching ``TMP_NAME`` (``tag`` like ``v3-`` says what it will be)."""
    return f".tmp-{tag}{secrets.token_hex(6)}"


def create(file: str, data: bytes, *, dir_fd: int | None = None) -> None:
    """Create ``file`` (it must not exist) holding ``data``, fsynced. On any failure (a full disk)
    the file is removed again, so a refused write leaves nothing in the space that ran out."""
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(file, dir_fd=dir_fd)
        raise
    os.close(fd)


def link_new(file: str, data: bytes, *, dir_fd: int | None = None) -> None:
    """Create ``file`` complete or not at all: written under a temporary name, fsynced, then
    hard-linked into place. The link fails with FileExistsError if ``file`` exists, which makes
    this an exclusive create of a whole file (a reader never sees it half written)."""
    folder = os.path.dirname(file)
    tmp = os.path.join(folder, temp_name(os.path.basename(file) + "-"))
    create(tmp, data, dir_fd=dir_fd)
    try:
        os.link(tmp, file, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.unlink(tmp, dir_fd=dir_fd)
    fsync_dir(folder, dir_fd=dir_fd)


def replace(file: str, data: bytes, *, dir_fd: int | None = None) -> None:
    """Replace ``file`` atomically and durably (temporary file, fsync, rename, fsync folder). A
    link at ``file`` is replaced itself: what it pointed to is never written."""
    tmp = os.path.join(os.path.dirname(file), temp_name())
    create(tmp, data, dir_fd=dir_fd)
    _rename_into_place(tmp, file, dir_fd)


def swap_symlink(link: str, target: str, *, dir_fd: int | None = None) -> None:
    """Point ``link`` at ``target`` atomically (temporary symlink renamed over it), durably."""
    tmp = os.path.join(os.path.dirname(link), temp_name())
    os.symlink(target, tmp, dir_fd=dir_fd)
    _rename_into_place(tmp, link, dir_fd)


def _rename_into_place(tmp: str, dest: str, dir_fd: int | None) -> None:
    try:
        os.replace(tmp, dest, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    fsync_dir(os.path.dirname(dest), dir_fd=dir_fd)


def make_dirs(root: str, parts: list[str]) -> None:
    """Create ``root/parts[0]/parts[1]/...`` as needed, fsyncing each folder that gains one."""
    current = root
    for part in parts:
        parent, current = current, os.path.join(current, part)
        try:
            os.mkdir(current)
        except FileExistsError:
            continue
        fsync_dir(parent)


def fsync_dir(folder: str, *, dir_fd: int | None = None) -> None:
    fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
