"""markproto.durable: whole files or none, fsynced in the right order, with the right mode, even
when ``os.write`` writes less than asked or the disk fills up."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from markproto import durable

DATA = bytes(range(256)) * 1000


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def short_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``os.write`` that writes at most 1000 bytes a call, as a pipe, a signal or a nearly full
    disk may make it do; returns the sizes it was asked for."""
    real = os.write
    asked: list[int] = []

    def write(fd: int, data: bytes | memoryview) -> int:
        asked.append(len(data))
        return real(fd, bytes(data[:1000]))

    monkeypatch.setattr(os, "write", write)
    return asked


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What was fsynced, in order: ``file`` for a regular file, ``dir:<name>`` for a folder."""
    real = os.fsync
    seen: list[str] = []

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        seen.append(
            f"dir:{Path(os.readlink(f'/proc/self/fd/{fd}')).name}"
            if stat.S_ISDIR(st.st_mode)
            else "file"
        )
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_a_short_write_is_continued_until_the_file_is_whole(
    tmp_path: Path, short_writes: list[int]
) -> None:
    target = tmp_path / "f"
    durable.replace(str(target), DATA)
    assert target.read_bytes() == DATA
    assert len(short_writes) == len(DATA) // 1000
    durable.link_new(str(tmp_path / "g"), DATA)
    assert (tmp_path / "g").read_bytes() == DATA


def test_replace_fsyncs_the_file_before_the_rename_and_the_folder_after(
    tmp_path: Path, synced: list[str]
) -> None:
    durable.replace(str(tmp_path / "f"), b"one")
    assert synced == ["file", f"dir:{tmp_path.name}"]
    assert names(tmp_path) == ["f"]


def test_an_unsynced_replace_is_whole_and_atomic_without_fsyncs(
    tmp_path: Path, synced: list[str], short_writes: list[int]
) -> None:
    """``sync=False`` (a cache entry): no fsync at all, the bytes still whole under the name."""
    durable.replace(str(tmp_path / "f"), DATA, sync=False)
    assert synced == []
    assert (tmp_path / "f").read_bytes() == DATA
    assert names(tmp_path) == ["f"]


def test_replace_is_a_new_file_under_the_old_name(tmp_path: Path) -> None:
    target = tmp_path / "f"
    durable.replace(str(target), b"one")
    inode = target.stat().st_ino
    durable.replace(str(target), b"two")
    assert target.read_bytes() == b"two"
    assert target.stat().st_ino != inode  # renamed over, never rewritten in place
    assert names(tmp_path) == ["f"]


def test_mode_is_set_whatever_the_old_file_had(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_bytes(b"old")
    target.chmod(0o644)
    durable.replace(str(target), b"new", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    durable.replace(str(tmp_path / "public"), b"x")
    assert stat.S_IMODE((tmp_path / "public").stat().st_mode) == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_symlink_is_kept_and_its_target_replaced(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere" / "tokens.toml"
    real.parent.mkdir()
    real.write_bytes(b"old")
    link = tmp_path / "tokens.toml"
    link.symlink_to(real)
    durable.replace(str(link), b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert names(real.parent) == ["tokens.toml"]


@pytest.mark.skipif(os.geteuid() != 0, reason="taking over another owner needs root")
def test_replace_keeps_the_owner(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    os.chown(target, 12345, 23456)
    durable.replace(str(target), b"new", mode=0o600)
    st = target.stat()
    assert (st.st_uid, st.st_gid) == (12345, 23456)


@pytest.mark.parametrize(
    "step",
    [
        lambda folder: durable.replace(str(folder / "f"), DATA),
        lambda folder: durable.link_new(str(folder / "f"), DATA),
        lambda folder: durable.create(str(folder / "f"), DATA),
    ],
)
def test_a_full_disk_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: Callable[[Path], None]
) -> None:
    real = os.write
    written = 0

    def write(fd: int, data: bytes | memoryview) -> int:
        nonlocal written
        if written > 50_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written += real(fd, bytes(data[:10_000]))
        return min(len(data), 10_000)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError, match="No space left"):
        step(tmp_path)
    assert names(tmp_path) == []


def test_link_new_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "v1"
    durable.link_new(str(target), b"first")
    with pytest.raises(FileExistsError):
        durable.link_new(str(target), b"second")
    assert target.read_bytes() == b"first"
    assert names(tmp_path) == ["v1"]


def test_temporary_names_are_recognisable(tmp_path: Path) -> None:
    assert durable.TMP_NAME.match(durable.temp_name())
    assert durable.TMP_NAME.match(durable.temp_name("v3-"))
    assert not durable.TMP_NAME.match("a.md")


def test_swap_symlink_and_make_dirs(tmp_path: Path, synced: list[str]) -> None:
    durable.make_dirs(str(tmp_path), ["a", "b"])
    assert synced == [f"dir:{tmp_path.name}", "dir:a"]
    (tmp_path / "a" / "b" / "v1").write_bytes(b"1")
    link = tmp_path / "a" / "b" / "current"
    durable.swap_symlink(str(link), "v1")
    durable.swap_symlink(str(link), "v2")
    assert os.readlink(link) == "v2"
    assert names(tmp_path / "a" / "b") == ["current", "v1"]


def test_replace_from_a_writer_is_whole_fsynced_and_atomic(
    tmp_path: Path, synced: list[str]
) -> None:
    target = tmp_path / "index"
    target.write_bytes(b"old")

    def pieces(out: BinaryIO) -> None:
        for start in range(0, len(DATA), 4096):
            out.write(DATA[start : start + 4096])

    durable.replace(str(target), pieces)
    assert target.read_bytes() == DATA
    assert synced == ["file", f"dir:{tmp_path.name}"]

    def fails(out: BinaryIO) -> None:
        out.write(DATA)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match="No space left"):
        durable.replace(str(target), fails)
    assert target.read_bytes() == DATA
    assert names(tmp_path) == ["index"]
