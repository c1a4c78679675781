"""Folders for the import tests: one with a file of every kind an import takes or leaves out,
and a folder read back as ``{relative path: bytes}``."""

from __future__ import annotations

import os
from pathlib import Path

SKIPPED = {
    ".git/": "a hidden name (the server never lists it)",
    ".hidden.md": "a hidden name (the server never lists it)",
    "bad-\\xff.md": "the name is not UTF-8",
    "big.md": "over 1 MiB (1048577 bytes)",
    "broken.md": "a broken symlink",
    "latin1.md": "not UTF-8 text",
    "linked-folder": "a symlink to a folder (not followed)",
    "notes.txt": "not a .md file",
    "outside.md": "a symlink leading outside the folder",
    "versions/": "the name 'versions' is reserved for version history",
}
"""What `messy_folder` holds that an import leaves out, each with the reason it reports."""

TAKEN = ("a.md", "inside.md", "sub/b.md")
"""What `messy_folder` holds that an import takes (``inside.md`` links to ``a.md``)."""


def messy_folder(folder: Path) -> None:
    """One file of every kind an import takes or leaves out."""
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("---\ntitle: A\n---\n# A\n")
    (folder / "sub/b.md").write_text("# B\n")
    (folder / "notes.txt").write_text("not markdown")
    (folder / "big.md").write_bytes(b"x" * ((1 << 20) + 1))
    (folder / "latin1.md").write_bytes("caf\xe9\n".encode("latin-1"))
    (folder / ".hidden.md").write_text("# hidden\n")
    (folder / ".git").mkdir()
    (folder / ".git/HEAD").write_text("ref")
    (folder / "versions").mkdir()
    (folder / "versions/v.md").write_text("# v\n")
    os.symlink("/etc/hostname", folder / "outside.md")
    os.symlink("a.md", folder / "inside.md")
    os.symlink("nowhere.md", folder / "broken.md")
    os.symlink("sub", folder / "linked-folder")
    (folder / os.fsdecode(b"bad-\xff.md")).write_text("# bad name\n")


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (symlinks to files followed), by path relative to it."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }
