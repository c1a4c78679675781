"""Which files of a folder become documents (``markproto.tree.source``): the walk's order, each
reason a file is left out, prefixes, and a content root walked as the store it is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from markproto.protocol import status
from markproto.tree.source import Skipped, Source, prefix_of, walk


def test_files_then_folders_in_byte_order_with_bodies_unchanged(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "B.md").write_bytes(b"---\r\ntitle: Upper\r\n---\r\nCRLF\r\n")
    (tmp_path / "a.md").write_text("# a\n")
    (tmp_path / "b/c.md").write_text("# c\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "a/z.md").write_text("# z\n")
    found = list(walk(tmp_path, "/docs"))
    assert [f.path for f in found if isinstance(f, Source)] == [
        "/docs/B.md",
        "/docs/a.md",
        "/docs/a/z.md",
        "/docs/b/c.md",
    ]
    upper = found[0]
    assert isinstance(upper, Source)
    assert upper.body == b"---\r\ntitle: Upper\r\n---\r\nCRLF\r\n"
    assert upper.meta == {"title": "Upper"}


def test_a_path_the_protocol_refuses_is_skipped_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "ctl\x01.md").write_text("x")
    assert list(walk(tmp_path)) == [
        Skipped(
            "ctl\x01.md", f"the protocol refuses the path /ctl\x01.md: {status.CONTROL_CHARACTER}"
        )
    ]


def test_a_store_walked_as_a_store_offers_only_its_plain_files(tmp_path: Path) -> None:
    (tmp_path / "versions/a.md").mkdir(parents=True)
    (tmp_path / "versions/a.md/v1").write_text("---\nversion: 1\narchived: false\n---\nA")
    os.symlink("versions/a.md/v1", tmp_path / "a.md")
    (tmp_path / "plain.md").write_text("# plain\n")
    as_store = list(walk(tmp_path, store=True))
    assert [f.rel for f in as_store] == ["plain.md"]
    as_folder = list(walk(tmp_path))
    assert Skipped("a.md", "a symlink into a versions folder (a store's document)") in as_folder
    assert Skipped("versions/", "the name 'versions' is reserved for version history") in as_folder


@pytest.mark.parametrize(
    ("text", "prefix"),
    [("/", ""), ("", ""), ("/docs/", "/docs"), ("docs//a/", "/docs/a"), ("/./x", "/x")],
)
def test_prefixes(text: str, prefix: str) -> None:
    assert prefix_of(text) == prefix


@pytest.mark.parametrize("text", ["/a/../b", "/versions/", "/sha256-" + "0" * 64])
def test_prefixes_no_document_can_be_under(text: str) -> None:
    with pytest.raises(ValueError, match=text.replace("+", r"\+")):
        prefix_of(text)


def test_a_folder_that_is_not_one(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        list(walk(tmp_path / "absent"))
