"""A document's own facts and its title: the one rule the catalog and the client both name a
document by (SPEC §5.7, the catalog entry)."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from markproto.protocol import metadata
from markproto.protocol.document import OwnFacts, frontmatter, own_facts, publisher_meta, title


@pytest.mark.parametrize(
    ("body", "meta", "expected"),
    [
        ("# Heading\n", {"title": "  Declared  "}, "Declared"),
        ("# Heading\n", {"title": " \t"}, "Heading"),  # blank counts as unset
        ("---\ntitle: Own\n---\n# Heading\n", {}, "Own"),
        ("---\ntitle: Own\n---\n# Heading\n", {"title": "Declared"}, "Declared"),
        ("---\ntitle: '  '\n---\n# Heading\n", {}, "Heading"),
        ("---\ntitle: [a, b]\n---\n# Heading\n", {}, "Heading"),  # not a string
        ("---\ntitle: [unclosed\n---\n# Heading\n", {}, "Heading"),  # malformed YAML
        ("---\ntitle: 2026-01-01\n---\n", {}, "2026-01-01"),  # never coerced
        ("intro\n  # First h1  \n# Second\n", {}, "First h1"),
        ("#\n# \t\n#  \n# Real\n", {}, "Real"),  # a bare '#' line is not a title
        ("#x\n#\theading\n# Real\n", {}, "Real"),  # '# ' means a space
        ("```\n# in a fence\n```\n# After\n", {}, "in a fence"),  # a plain line scan
        ("# Trailing ##\n", {}, "Trailing ##"),
        ("\ufeff# After a BOM\n", {}, "After a BOM"),
        ("\ufeff---\ntitle: Own\n---\n", {}, "Own"),
        ("---\nx: 1\n---\n# Content\n", {}, "Content"),
        ("---\n# not content\n---\nbody\n", {}, "a.md"),  # the frontmatter is not scanned
        ("\r\n# CRLF \r\n", {}, "CRLF"),
        ("\v\f# Go spaces\u00a0\n", {}, "Go spaces"),
        ("# \x1cSeparated\x1f\n", {}, "\x1cSeparated\x1f"),  # U+001C-U+001F are not Go spaces
        ("no heading at all\n", {}, "a.md"),
        ("", {}, "a.md"),
    ],
)
def test_title(body: str, meta: dict[str, str], expected: str) -> None:
    assert title("/docs/a.md", meta, own_facts(body)) == expected


def test_the_fallback_keys_read_as_strings() -> None:
    facts = own_facts(
        "---\ntags: [b, ' a ', 3]\nimportance: 0.7\ntype: Note\nother: x\nnested: {a: 1}\n---\n"
    )
    assert facts == OwnFacts({"tags": "b,a,3", "importance": "0.7", "type": "Note"}, "")
    assert own_facts("---\ntags: 'x , y'\n---\n").frontmatter == {"tags": "x,y"}
    assert own_facts("---\n- a list\n---\n").frontmatter == {}


@given(st.text(max_size=200), st.dictionaries(st.sampled_from(["title", "x"]), st.text()))
def test_a_title_always_exists_and_is_trimmed(body: str, meta: dict[str, str]) -> None:
    name = title("/docs/a.md", meta, own_facts(body))
    assert name
    assert name == name.strip("\t\n\v\f\r \x85\xa0\u2028\u2029\u3000")


# -- a document's frontmatter as publisher metadata (what an import stores) ---------------------


def test_publisher_meta_reads_every_key_as_text() -> None:
    body = (
        "---\ntitle: Remote Write\nsort_rank: 3\nnav-Title: '2.0'\ndraft: true\n"
        "tags:\n  - a\n  - ' b '\nhide: [navigation]\ninclude_yaml:\n  x: y\n"
        "Status: draft\nversion: 2\nretention: 1\ndesc: |\n  two\n  lines\n---\n# Body\n"
    )
    meta, notes = publisher_meta(body)
    assert meta == {
        "desc": "two lines",
        "draft": "true",
        "hide": "navigation",
        "nav-title": "2.0",
        "sort-rank": "3",
        "tags": "a,b",
        "title": "Remote Write",
    }
    assert notes == [
        "frontmatter key 'Status' left out: metadata key \"status\" is reserved",
        "frontmatter key 'include_yaml' left out: not text",
        "frontmatter key 'retention' left out: 'retention' is the store's to set",
        "frontmatter key 'version' left out: 'version' is the store's to set",
    ]


def test_publisher_meta_keeps_what_lookup_reads_when_over_the_limits() -> None:
    many = "".join(f"k{n:02}: {'v' * 30}\n" for n in range(60))
    meta, notes = publisher_meta(f"---\ntitle: T\ntags: [x]\n{many}---\n")
    metadata.validate(meta)
    assert {"title", "tags"} <= set(meta)
    assert all(note.endswith("over the metadata limits") for note in notes)
    assert len(meta) + len(notes) == 62


def test_no_frontmatter_no_metadata() -> None:
    assert publisher_meta("# Just a heading\n") == ({}, [])
    assert publisher_meta("---\n[not, a, mapping]\n---\n") == ({}, [])
    assert frontmatter("---\nx: [1, {a: b}, c]\n---\n") == {"x": "1,c"}


yaml_keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
yaml_values = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
    st.lists(st.text(max_size=10), max_size=4),
    st.integers(),
    st.booleans(),
    st.none(),
)


@given(st.dictionaries(yaml_keys, yaml_values, max_size=70))
def test_whatever_the_frontmatter_the_metadata_passes_a_publish(data: dict[str, object]) -> None:
    block = yaml.safe_dump(data, allow_unicode=True)
    meta, _ = publisher_meta(f"---\n{block}---\n")
    persisted = metadata.for_publish("/a.md", meta)
    assert "retention" not in persisted
