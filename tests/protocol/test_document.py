"""A document's own facts and its title: the one rule the catalog and the client both name a
document by (SPEC §5.7, the catalog entry)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from markproto.protocol.document import OwnFacts, own_facts, title


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
