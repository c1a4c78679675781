"""The LOOKUP indexes saved when the server stops and restored when it starts, so a restart does
not analyse again the bodies it analysed before (analysis is the slow part of indexing: about
1.5 MB/s a core, where reading a saved index back is tens of MB/s).

A saved index is plain data (strings, numbers, arrays; read back by an unpickler that makes
nothing else) in the state directory, one file per content root, then the postings' entries as
raw machine words: read straight into their array, where unpickling one would hold its bytes
twice (2 MiB more at the restart of a 7.4 MB root). It names the version file of
every document it holds, and the code it was made by (the sources of every rule that cut and
split a body, and the markdown parser's version): documents whose current version is another
file are analysed again, and a saved index of other code is ignored.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import pickle
import sys
import time
from array import array
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from markproto import durable

if TYPE_CHECKING:
    from markproto.server.search.links import SavedLinks

__all__ = ["FORMAT", "Saved", "SavedDoc", "file_for", "fingerprint", "load", "save"]

log = logging.getLogger("markproto.server.search.saved")

FORMAT = 3
STALE_TEMP = 3600.0
"""Seconds after which a temporary file in the index folder is a save a crash cut short (a save
takes seconds; servers of other roots may share the folder, so a younger one may be theirs)."""
_RULES = (
    "markproto.protocol.gotext",
    "markproto.protocol.mdparse",
    "markproto.protocol.mdtokens",
    "markproto.protocol.mdoutline",
    "markproto.protocol.document",
    "markproto.server.search.text",
    "markproto.server.search.analysis",
    "markproto.server.search.bodyindex",
    "markproto.server.search.catalog",
    "markproto.server.search.links",
    "markproto.protocol.links",
    "mistletoe",  # its ``__init__``, which holds its version: found, not imported
)
"""The modules whose rules a saved index was made by."""


@dataclass(frozen=True, slots=True)
class SavedDoc:
    """One document of a saved index: its version file, its catalog entry's saved form, its
    content hash, first slot and outline fields (``BodyIndex.dump``), and its links
    (``LinkIndex.saved``)."""

    file: str
    entry: tuple[Any, ...]
    content_hash: str
    start: int
    outline: tuple[Any, ...]
    links: SavedLinks


@dataclass(frozen=True, slots=True)
class Saved:
    """A saved index, read back."""

    docs: list[SavedDoc]
    terms: str
    counts: array[int]
    entries: array[int]
    next_slot: int


def file_for(state_dir: Path, root: Path) -> Path:
    """Where the index of ``root`` is saved."""
    key = hashlib.sha256(os.fsencode(root.resolve())).hexdigest()[:16]
    return state_dir / "index" / f"{key}.pickle"


@cache
def fingerprint() -> str:
    """The code a saved index depends on: the rules' sources and mistletoe's version (in its
    ``__init__``'s source, read without importing mistletoe: a slow import). Once per
    process: the code that runs is the code read first (an upgrade in place takes a restart),
    and a save while serving then reads no source and imports nothing."""
    digest = hashlib.sha256(f"{FORMAT}\n".encode())
    for name in _RULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        digest.update(Path(spec.origin).read_bytes())
    return digest.hexdigest()


def save(file: Path, root: Path, saved: Saved) -> None:
    """Write ``saved`` for ``root`` (atomically: a crash leaves the old file or the new). Any
    thread: nothing in ``saved`` changes after ``build.saved_form`` made it."""
    data = {
        "format": FORMAT,
        "fingerprint": fingerprint(),
        "root": str(root.resolve()),
        "docs": [
            (doc.file, doc.entry, doc.content_hash, doc.start, doc.outline, doc.links)
            for doc in saved.docs
        ],
        "terms": saved.terms,
        "counts": saved.counts,
        "entries": (len(saved.entries), saved.entries.itemsize, sys.byteorder),
        "next_slot": saved.next_slot,
    }
    file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _sweep(file.parent)

    def write(out: BinaryIO) -> None:
        # Streamed: the pickler hands the file one frame at a time (letting other threads run
        # between them), then the entries go from their own array; made whole in memory first,
        # a save's transient was twice the file.
        pickler = pickle.Pickler(out, protocol=5)
        pickler.fast = True  # no memo of every object written (plain data, no cycles)
        pickler.dump(data)
        saved.entries.tofile(out)

    durable.replace(str(file), write, mode=0o600)


def _sweep(folder: Path) -> None:
    """Remove what saves cut short by a crash left (``STALE_TEMP`` old): each is a whole index."""
    cutoff = time.time() - STALE_TEMP
    with os.scandir(folder) as entries:
        for entry in entries:
            if durable.TMP_NAME.match(entry.name):
                try:
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)
                        log.info("removed a saved index cut short: %s", entry.path)
                except FileNotFoundError:
                    pass  # another server's save finished meanwhile


def load(file: Path, root: Path) -> Saved | None:
    """The index saved for ``root``, or None (absent, unreadable, or made by other code)."""
    try:
        with file.open("rb") as handle:
            data = _Reader(handle).load()
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                log.info("the saved index has another format: indexing every document")
                return None
            if data["root"] != str(root.resolve()) or data["fingerprint"] != fingerprint():
                log.info(
                    "the saved index is of other code or another root: indexing every document"
                )
                return None
            entries = array("I")
            count, size, order = data["entries"]
            if (size, order) != (entries.itemsize, sys.byteorder):
                log.info("the saved index is of another machine: indexing every document")
                return None
            entries.fromfile(handle, count)
            if handle.read(1):
                raise ValueError("bytes after the postings")
        docs = [SavedDoc(*doc) for doc in data["docs"]]
        return Saved(docs, data["terms"], data["counts"], entries, data["next_slot"])
    except FileNotFoundError:
        return None
    except Exception as exc:  # a torn or foreign file is a reason to index again, never a fault
        log.warning("the saved index is unreadable (%s): indexing every document", exc)
        return None


class _Reader(pickle.Unpickler):
    """An unpickler that makes plain data and arrays, and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "array" and name in ("array", "_array_reconstructor"):
            return getattr(__import__("array"), name)
        raise pickle.UnpicklingError(f"{module}.{name} is not index data")
