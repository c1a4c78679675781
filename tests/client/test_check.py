"""``mark check`` on a local folder (``client.check``): every kind of finding, with its line, on a
vault made to hold each one; the folder rules (hidden files and ``versions`` folders left out, a
folder's ``index.md`` never an orphan); and the real broken links of the FastAPI docs. The same
checks against a server are in tests/e2e/test_links_e2e.py."""

from __future__ import annotations

from pathlib import Path

from support import shared_path

from markproto.client.check import ERROR, WARNING, check_folder
from markproto.protocol.limits import MAX_BODY, MAX_FRONTMATTER

VAULT: dict[str, bytes] = {
    "a.md": b"# A\n\n[b](b.md) [[Note]] [c](c)\n[gone](nope.md)\n[bad](b.md#nowhere)\n",
    "b.md": b"---\ntitle: B\n---\n## Part\n\n## Part\n\n[a](a.md#a) [two](#part-1)\n",
    "c.md": b"---\nrel-next: /missing.md, /a.md\n---\n# C\n\n[[b#Part]]\n",
    "sub/Note.md": b"no heading, linked by a wikilink\n\n[a](/a)\n",
    "sub/index.md": b"# Sub\n\nnobody links here, and a folder index is no orphan\n",
    "orphan.md": b"# Orphan\n\n[a](a.md)\n",
    "yaml.md": b"---\ntitle: ok\nkey: : :\nmore: x\n---\n# Y\n",
    "list.md": b"---\n- a\n- b\n---\n# L\n",
    "open.md": b"---\ntitle: never closed\n\n# O\n",
    "keys.md": b"---\n" + b"".join(b"k%d: v\n" % i for i in range(60)) + b"---\n# K\n",
    "huge.md": b"---\nk: " + b"x" * MAX_FRONTMATTER + b"\n---\n# H\n",
    "binary.md": b"# T\n\nfine\n\xff here\n",
    "large.md": b"# L\n\n" + b"x" * MAX_BODY,
    ".hidden.md": b"[gone](nowhere.md)\n",
    "versions/v1.md": b"[gone](nowhere.md)\n",
    "notes.txt": b"[gone](nowhere.md)\n",
}


def findings(folder: Path) -> list[tuple[str, int, str, str]]:
    report = check_folder(folder)
    return sorted((f.path, f.line, f.severity, f.kind) for f in report.findings)


def make(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        file = folder / name
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(data)
    return folder


def test_every_kind_of_finding_with_its_line(tmp_path: Path) -> None:
    folder = make(tmp_path, VAULT)
    found = [f for f in findings(folder) if f[3] != "orphan"]
    assert found == [
        ("/a.md", 4, ERROR, "broken-link"),
        ("/a.md", 5, ERROR, "broken-link"),
        ("/b.md", 6, WARNING, "duplicate-heading"),
        ("/binary.md", 4, ERROR, "not-utf8"),
        ("/c.md", 0, ERROR, "broken-link"),
        ("/huge.md", 1, ERROR, "frontmatter"),
        ("/keys.md", 1, WARNING, "frontmatter"),
        ("/large.md", 0, ERROR, "too-large"),
        ("/list.md", 1, ERROR, "frontmatter"),
        ("/open.md", 1, WARNING, "frontmatter"),
        ("/sub/Note.md", 0, WARNING, "no-title"),
        ("/yaml.md", 3, ERROR, "frontmatter"),
    ]
    report = check_folder(folder)
    messages = {(f.path, f.line): f.message for f in report.findings}
    assert messages["/a.md", 4] == "broken link nope.md: no document /nope.md"
    assert messages["/a.md", 5] == "broken link b.md#nowhere: /b.md has no section #nowhere"
    assert messages["/c.md", 0] == "broken link rel-next: /missing.md: no document"
    assert messages["/b.md", 6].startswith("2 headings 'Part' (lines 4, 6): #part names")
    assert messages["/binary.md", 4] == "not UTF-8 text: byte 0xff at offset 10"
    assert messages["/yaml.md", 3] == (
        "frontmatter is not YAML: mapping values are not allowed in this context"
    )
    assert messages["/list.md", 1] == "frontmatter on lines 1-4 is not a YAML mapping"
    assert report.documents == 13  # hidden files, versions folders and other files left out
    assert report.exit_code(strict=False) == 1


def test_orphans_are_documents_nothing_else_links_to(tmp_path: Path) -> None:
    folder = make(tmp_path, VAULT)
    orphans = {path for path, _, _, kind in findings(folder) if kind == "orphan"}
    assert "/orphan.md" in orphans  # its own link out does not count
    assert not orphans & {"/a.md", "/b.md", "/c.md", "/sub/Note.md", "/sub/index.md"}
    (folder / "b.md").write_bytes(b"# B\n\n[o](orphan.md)\n")
    orphans = {path for path, _, _, kind in findings(folder) if kind == "orphan"}
    assert "/orphan.md" not in orphans
    alone = make(tmp_path / "alone", {"a.md": b"# A\n\n[me](a.md) [[a]] [top](#a)\n"})
    assert findings(alone) == [("/a.md", 0, WARNING, "orphan")]  # links to itself are none


def test_warnings_fail_only_when_strict(tmp_path: Path) -> None:
    folder = make(tmp_path, {"a.md": b"# A\n\n[b](b.md)\n", "b.md": b"no title [a](a.md)\n"})
    report = check_folder(folder)
    assert (report.errors, report.warnings) == (0, 1)
    assert (report.exit_code(strict=False), report.exit_code(strict=True)) == (0, 1)
    assert report.table() == (
        "/b.md\n"
        "      -  warning  no-title           no title and no '# ' heading: shown as b.md\n"
        "\n"
        "2 documents checked, 1 with findings: 0 errors, 1 warnings\n"
    )


def test_the_fastapi_docs_have_one_broken_link() -> None:
    """Published as they are, the FastAPI docs' only broken link is the translation banner's
    placeholder (the site's build fills it in); every other relative link resolves."""
    report = check_folder(shared_path("corpus", "fastapi-docs"))
    errors = [(f.path, f.line, f.message) for f in report.findings if f.severity == ERROR]
    assert errors == [
        (
            "/translation-banner.md",
            9,
            "broken link ENGLISH_VERSION_URL: no document /ENGLISH_VERSION_URL",
        )
    ]
    assert report.documents == 155
