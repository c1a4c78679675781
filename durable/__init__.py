"""Durable file operations: the steps that let a write survive a crash at any instant.

Each one either completes, fsynced, or leaves nothing but a temporary name (which the store's
``recovery`` removes at startup): a file is written whole under a temporary name (``os.write``
looped, as it may write less than asked) and fsynced before it is linked or renamed into place,
and the folder is fsynced after every change of its entries. Client and server write every file
they keep through here: versions and archive flags, ``tokens.toml``, the development
certificate and key, ``known_hosts``, the client's token store and cache.

With ``dir_fd`` (an open folder) every name is relative to that folder, as in ``os.open``: the
server's store opens its folders itself, one real folder at a time below the content root, and
writes through here without a path that could lead through a link.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

TMP_NAME = re.compile(r"\.tmp-(?:v[0-9]+-)?[0-9a-f]{12}\Z")
"""Temporary names: a dot-name no document can take (the store refuses such paths)."""


def temp_name(tag: str = "") -> str:
    """A fresh temporary name matching ``TMP_NAME`` (``tag`` like ``v3-`` says what it will be)."""
    return f".tmp-{tag}{secrets.token_hex(6)}"


def create(
    file: str,
    data: bytes | Callable[[BinaryIO], object],
    mode: int = 0o644,
    owner: tuple[int, int] | None = None,
    *,
    sync: bool = True,
    dir_fd: int | None = None,
) -> None:
    """Create ``file`` (it must not exist) holding ``data``, fsynced unless ``sync`` is false,
    with ``mode`` (less the umask) and, where the process may set it, ``owner`` (uid, gid).
    ``data`` may be a function that writes the bytes to the file it is given (a large file
    made piece by piece, never whole in memory). On any failure (a full disk) the file is
    removed again, so a refused write leaves nothing in the space that ran out."""
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        if owner is not None:
            with contextlib.suppress(OSError):
                os.fchown(fd, *owner)
        if callable(data):
            with open(fd, "wb", closefd=False) as out:
                data(out)
        else:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(file, dir_fd=dir_fd)
        raise
    os.close(fd)


def link_new(file: str, data: bytes, *, sync: bool = True, dir_fd: int | None = None) -> None:
    """Create ``file`` complete or not at all: written under a temporary name, fsynced, then
    hard-linked into place. The link fails with FileExistsError if ``file`` exists, which makes
    this an exclusive create of a whole file (a reader never sees it half written). With
    ``sync=False`` nothing is fsynced: the caller makes it durable later (`sync_filesystem`)."""
    folder = os.path.dirname(file)
    tmp = os.path.join(folder, temp_name(os.path.basename(file) + "-"))
    create(tmp, data, sync=sync, dir_fd=dir_fd)
    try:
        os.link(tmp, file, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.unlink(tmp, dir_fd=dir_fd)
    if sync:
        fsync_dir(folder, dir_fd=dir_fd)


def replace(
    file: str,
    data: bytes | Callable[[BinaryIO], object],
    *,
    mode: int = 0o644,
    sync: bool = True,
    dir_fd: int | None = None,
) -> None:
    """Replace (or create) ``file`` atomically and durably: temporary file, fsync, rename,
    fsync folder. Readers see the old bytes or the new, whole. Give ``mode=0o600`` for secrets.
    ``sync=False`` skips both fsyncs (about 10 ms on a disk) for a file a crash may lose but
    that is never read torn, like a cache entry that verifies itself.

    A symlink at ``file`` stays: the file it points to is replaced, so a config file linked
    from elsewhere keeps its link. The new file keeps the old one's owner and group where the
    process may set them, so an edit made as root leaves a file its owner can still read.
    With ``dir_fd`` (the store's confined writes) no link is followed: a link at ``file`` is
    replaced itself, and what it pointed to is never written.
    """
    owner: tuple[int, int] | None = None
    if dir_fd is None:
        file = os.path.realpath(file)
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(file)
            owner = (st.st_uid, st.st_gid)
    tmp = os.path.join(os.path.dirname(file), temp_name())
    create(tmp, data, mode, owner, sync=sync, dir_fd=dir_fd)
    _rename_into_place(tmp, file, dir_fd, sync=sync)


def swap_symlink(link: str, target: str, *, sync: bool = True, dir_fd: int | None = None) -> None:
    """Point ``link`` at ``target`` atomically (temporary symlink renamed over it), durably
    unless ``sync`` is false."""
    tmp = os.path.join(os.path.dirname(link), temp_name())
    os.symlink(target, tmp, dir_fd=dir_fd)
    _rename_into_place(tmp, link, dir_fd, sync=sync)


def _rename_into_place(tmp: str, dest: str, dir_fd: int | None, *, sync: bool = True) -> None:
    try:
        os.replace(tmp, dest, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    if sync:
        fsync_dir(os.path.dirname(dest), dir_fd=dir_fd)


def make_dirs(root: str, parts: list[str], *, sync: bool = True) -> None:
    """Create ``root/parts[0]/parts[1]/...`` as needed, fsyncing each folder that gains one
    (unless ``sync`` is false)."""
    current = root
    for part in parts:
        parent, current = current, os.path.join(current, part)
        try:
            os.mkdir(current)
        except FileExistsError:
            continue
        if sync:
            fsync_dir(parent)


def fsync_dir(folder: str, *, dir_fd: int | None = None) -> None:
    fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(folder: str, *, dir_fd: int | None = None) -> None:
    """Make every write so far to the filesystem holding ``folder`` durable, in one call: a
    group commit of many unsynced writes costs one flush instead of several fsyncs each.
    With ``dir_fd``, ``folder`` is relative to it ("" for that folder itself).

    Linux ``syncfs(2)``, which waits for the flush; elsewhere ``sync(2)``."""
    fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        syncfs = _syncfs()
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            import ctypes

            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), folder)
    finally:
        os.close(fd)


_SYNCFS: list[Any] = []


def _syncfs() -> Any:
    """libc's ``syncfs`` where there is one (looked up once; ctypes only loads then)."""
    if not _SYNCFS:
        function = None
        if sys.platform.startswith("linux"):
            import ctypes

            with contextlib.suppress(OSError, AttributeError):
                function = ctypes.CDLL(None, use_errno=True).syncfs
        _SYNCFS.append(function)
    return _SYNCFS[0]
