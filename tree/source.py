"""Which files of a folder become documents, and why the others do not.

A ``.md`` file becomes the document at ``prefix`` + its path in the folder, its bytes the body
unchanged and its own frontmatter the metadata (``document.publisher_meta``). Everything else is
reported with its reason, never dropped silently: other files, hidden names (the server never
lists them, so an export could not give them back), files over 1 MiB or not UTF-8 text, names
that are not UTF-8, paths the protocol refuses, and symlinks that lead outside the folder, into
a folder, or nowhere. A symlink to a file inside the folder is read through.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from markproto.protocol import document, paths
from markproto.protocol.limits import MAX_BODY, MAX_PATH

VERSIONS = paths.VERSIONS_DIR


@dataclass(frozen=True, slots=True)
class Source:
    """A file that becomes a document."""

    path: str
    """The document's path: the prefix, then the file's path in the folder."""
    rel: str
    body: bytes
    meta: dict[str, str]
    """Publisher metadata from the file's own frontmatter."""
    notes: tuple[str, ...] = ()
    """Frontmatter keys left out, one note each."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file or folder (``rel`` ends in ``/``) that does not become a document, and why."""

    rel: str
    reason: str


def prefix_of(text: str) -> str:
    """A ``--prefix`` (or a URL path) as the folder documents go under: ``""`` for the root,
    else ``/a/b``. ValueError with the protocol's reason for one no document can be under."""
    cleaned = paths.clean(text)
    if paths.has_dotdot(text):
        raise ValueError(f"{text!r}: a prefix may not contain '..'")
    if cleaned == "/":
        return ""
    reason = paths.writable_reason(cleaned)
    if reason is not None:
        raise ValueError(f"{text!r}: {reason}")
    return cleaned


def walk(
    folder: Path, prefix: str = "", *, store: bool = False, exclude: Path | None = None
) -> Iterator[Source | Skipped]:
    """Every file under ``folder`` as a `Source` or a `Skipped`: each folder's files, then its
    folders, in byte order of name.

    ``prefix`` comes from `prefix_of`. ``store`` says the folder is (part of) a content root,
    whose ``versions`` folders and document pointers are its documents already: they are passed
    over without a word. ``exclude`` is a folder inside ``folder`` to leave out (a content root
    kept in the folder being imported into it)."""
    top = os.path.realpath(folder)
    if not os.path.isdir(top):
        raise NotADirectoryError(f"{folder} is not a folder")
    excluded = os.path.realpath(exclude) if exclude is not None else None
    stack: list[tuple[str, str]] = [(top, "")]
    while stack:
        here, rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda e: os.fsencode(e.name), reverse=True)
        except OSError as exc:
            yield Skipped(rel_dir or "./", f"cannot read the folder: {exc.strerror or exc}")
            continue
        later: list[tuple[str, str]] = []
        for entry in reversed(entries):
            rel = rel_dir + entry.name
            found = _entry(entry, rel, top, prefix, store=store, excluded=excluded)
            if isinstance(found, str):
                later.append((entry.path, rel + "/"))
            elif found is not None:
                yield found
        stack.extend(reversed(later))


def _entry(
    entry: os.DirEntry[str],
    rel: str,
    top: str,
    prefix: str,
    *,
    store: bool,
    excluded: str | None,
) -> Source | Skipped | str | None:
    """One folder entry: a result, a folder to walk (its path), or None (the store's own)."""
    name = entry.name
    if not _utf8(name):
        return Skipped(_shown(rel), "the name is not UTF-8")
    is_dir = entry.is_dir(follow_symlinks=False)
    if store and name == VERSIONS and is_dir:
        return None
    if name.startswith("."):
        return Skipped(rel + "/" * is_dir, "a hidden name (the server never lists it)")
    if is_dir:
        if excluded is not None and os.path.realpath(entry.path) == excluded:
            return Skipped(rel + "/", "the content root itself")
        if name == VERSIONS:
            return Skipped(rel + "/", f"the name {VERSIONS!r} is reserved for version history")
        return entry.path
    file = entry.path
    if entry.is_symlink():
        target = os.readlink(file)
        if store and target.startswith(VERSIONS + "/"):
            return None
        real = os.path.realpath(file)
        if os.path.commonpath([real, top]) != top:
            return Skipped(rel, "a symlink leading outside the folder")
        if os.path.isdir(real):
            return Skipped(rel, "a symlink to a folder (not followed)")
        if VERSIONS in os.path.relpath(real, top).split(os.sep):
            return Skipped(rel, "a symlink into a versions folder (a store's document)")
        file = real
    try:
        st = os.stat(file)
    except OSError:
        return Skipped(rel, "a broken symlink")
    if not stat.S_ISREG(st.st_mode):
        return Skipped(rel, "not a regular file")
    if not name.endswith(".md"):
        return Skipped(rel, "not a .md file")
    if st.st_size > MAX_BODY:
        return Skipped(rel, f"over 1 MiB ({st.st_size} bytes)")
    path = prefix + "/" + rel
    reason = paths.writable_reason(path)
    if reason is None and len(path.encode()) > MAX_PATH:
        reason = f"longer than {MAX_PATH} bytes"
    if reason is not None:
        return Skipped(rel, f"the protocol refuses the path {path}: {reason}")
    try:
        with open(file, "rb") as f:
            body = f.read(MAX_BODY + 1)
    except OSError as exc:
        return Skipped(rel, f"cannot read it: {exc.strerror or exc}")
    if len(body) > MAX_BODY:
        return Skipped(rel, f"over 1 MiB ({len(body)}+ bytes)")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return Skipped(rel, "not UTF-8 text")
    meta, notes = document.publisher_meta(text)
    return Source(path, rel, body, meta, tuple(notes))


def _utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def _shown(rel: str) -> str:
    """A name as it can be printed: undecodable bytes escaped."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")
