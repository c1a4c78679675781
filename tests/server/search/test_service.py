"""The LOOKUP service: the golden tables from ``Lookup.put`` alone, query execution (rank, silent
read filter, then limit), frontmatter fallbacks reaching body mode, and changes prepared
elsewhere settling as inline puts do."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from markproto.protocol import storefmt, wire
from markproto.protocol.bodies import LookupRow, render_lookup
from markproto.server.search.service import BadQuery, Lookup, parse_query
from markproto.server.storage.store import Version

DAY = datetime(2026, 1, 1, tzinfo=UTC)


def loaded(path: str, body: str, meta: dict[str, str] | None = None) -> Version:
    data = body.encode()
    return Version(
        path, 1, f"{path}/v1", DAY, False, meta or {}, data, "", storefmt.content_hash(data)
    )


def golden_lookup() -> tuple[Lookup, dict[str, Version]]:
    """The three documents of the golden scenario, as the store holds them at LOOKUP time."""
    docs = [
        loaded(
            "/docs/a.md",
            "# Alpha\n\nSecond body.\n\n## Details\n\nSee [beta](b.md).\n\n## Appended\n\nMore.\n",
            {"importance": "0.7", "tags": "alpha,wire", "type": "Note"},
        ),
        loaded(
            "/docs/b.md",
            "# Beta | piped\n\nBody of beta.\n",
            {"importance": "0.4", "tags": "beta", "type": "Document"},
        ),
        loaded("/docs/sub/c d.md", "# Gamma\n", {"type": "Document"}),
    ]
    lookup = Lookup()
    for doc in docs:
        lookup.put(doc)
    return lookup, {doc.path: doc for doc in docs}


def rows(
    lookup: Lookup,
    by_path: dict[str, Version],
    query: str,
    *,
    body: bool,
    scope: str = "/",
    limit: int = 10,
    readable: frozenset[str] | None = None,
    clauses: str = "",
) -> list[LookupRow]:
    meta = {"query": query, "match": "body" if body else "catalog", "limit": str(limit)}
    return lookup.answer(
        parse_query({**meta, "filter": clauses}),
        scope,
        readable=lambda path: readable is None or path in readable,
        load=by_path.get,
    )


@pytest.mark.parametrize(
    ("name", "query", "body"),
    [
        ("lookup", "alpha beta", False),
        ("lookup-body", "appended", True),
        ("lookup-empty", "zzznothing", False),
    ],
)
def test_golden_tables(golden_dir: Path, name: str, query: str, body: bool) -> None:
    lookup, by_path = golden_lookup()
    want = wire.parse_response((golden_dir / f"{name}.golden").read_bytes())
    found = rows(lookup, by_path, query, body=body)
    assert render_lookup(query, "/", found, body_mode=body) == want.body
    assert str(len(found)) == want.meta["matches"]


def test_body_rows_carry_title_heading_and_snippet() -> None:
    lookup, by_path = golden_lookup()
    assert rows(lookup, by_path, "beta see", body=True) == [
        LookupRow("/docs/a.md", "details", 0.7, "Alpha › Details", ("alpha", "wire"), "See beta.")
    ]
    bare = rows(lookup, by_path, "piped beta", body=True)
    assert bare == [LookupRow("/docs/b.md", "", 0.4, "Beta | piped", ("beta",), "")]


def test_a_preamble_row_is_titled_by_its_document_alone() -> None:
    doc = loaded("/p.md", "Opening kiwi words.\n\n# Main\n\nmore kiwi\n", {"title": "Paper"})
    lookup = Lookup()
    lookup.put(doc)
    assert rows(lookup, {doc.path: doc}, "kiwi", body=True) == [
        LookupRow("/p.md", "main", 0.5, "Paper › Main", (), "more kiwi"),
        LookupRow("/p.md", "", 0.5, "Paper", (), "Opening kiwi words."),
    ]


def test_read_filter_before_limit_and_never_counted() -> None:
    lookup = Lookup()
    docs = {}
    for name, importance in (("a", "0.9"), ("b", "0.8"), ("c", "0.7"), ("d", "0.6")):
        doc = loaded(
            f"/{name}.md",
            f"# {name}\n\nshared word\n",
            {"tags": "shared", "importance": importance},
        )
        docs[doc.path] = doc
        lookup.put(doc)
    allowed = frozenset({"/b.md", "/c.md", "/d.md"})
    for body in (False, True):
        found = rows(lookup, docs, "shared", body=body, limit=2, readable=allowed)
        assert [row.path for row in found] == ["/b.md", "/c.md"]


def test_scope_and_filters_apply_in_both_modes() -> None:
    lookup, by_path = golden_lookup()
    assert [r.path for r in rows(lookup, by_path, "gamma", body=True, scope="/docs/sub")] == [
        "/docs/sub/c d.md"
    ]
    assert rows(lookup, by_path, "gamma", body=True, scope="/docs/su") == []
    assert rows(lookup, by_path, "body", body=True, clauses="tag=beta")[0].path == "/docs/b.md"
    assert [r.path for r in rows(lookup, by_path, "body", body=True, clauses="type=Note")] == [
        "/docs/a.md"
    ]
    assert rows(lookup, by_path, "body", body=True, clauses="type=Note,tag=beta") == []
    assert [r.path for r in rows(lookup, by_path, "*", body=False, clauses="type=Document")] == [
        "/docs/sub/c d.md",
        "/docs/b.md",
    ]


def test_frontmatter_reaches_both_modes() -> None:
    lookup = Lookup()
    note = loaded(
        "/vault/note.md",
        "---\ntitle: Zettel\ntags: [garden, idea]\nimportance: '0.95'\n---\nPlain text here.\n",
        {"type": "Document"},
    )
    lookup.put(note)
    by_path = {note.path: note}
    catalog = rows(lookup, by_path, "garden", body=False)
    assert catalog == [LookupRow("/vault/note.md", "", 0.95, "Zettel", ("garden", "idea"), None)]
    assert rows(lookup, by_path, "zettel idea", body=True)[0].anchor == ""  # a bare row
    assert rows(lookup, by_path, "plain garden", body=True)[0].snippet == "Plain text here."
    assert rows(lookup, by_path, "zettel", body=False, clauses="title=Zettel") == catalog


def test_remove_and_archive_forget_a_document() -> None:
    lookup, by_path = golden_lookup()
    lookup.remove("/docs/b.md")
    assert [r.path for r in rows(lookup, by_path, "alpha beta", body=False)] == ["/docs/a.md"]
    assert rows(lookup, by_path, "piped", body=True) == []
    lookup.remove("/nowhere.md")


def test_stale_body_gives_an_empty_snippet_not_a_wrong_one() -> None:
    lookup, by_path = golden_lookup()
    moved = dict(by_path)
    moved["/docs/a.md"] = loaded("/docs/a.md", "# Alpha\n\n## Appended\n\nDifferent.\n")
    assert rows(lookup, moved, "appended", body=True)[0].snippet == ""


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"query": "a", "limit": "0", "match": "x"}, "query must be at least 2 characters"),
        ({"query": " ".join(f"t{n}" for n in range(40))}, "query has too many terms: 33 > 32"),
        ({"query": "ab", "limit": "0", "filter": "x"}, "invalid limit"),
        ({"query": "ab", "filter": "x", "match": "x"}, 'malformed filter clause "x"'),
        ({"query": "ab", "match": "Body"}, 'match must be "catalog" or "body", got "Body"'),
    ],
)
def test_a_query_is_read_in_the_reference_order(meta: dict[str, str], message: str) -> None:
    with pytest.raises(BadQuery) as refused:
        parse_query(meta)
    assert str(refused.value) == message


def test_a_query_keeps_what_the_request_said() -> None:
    query = parse_query({"query": "  *  ", "limit": "5000", "match": ""})
    assert (query.text, query.mode, query.limit, query.clauses, query.body) == (
        "*",
        "catalog",
        1000,
        (),
        False,
    )
    assert parse_query({"query": "ab", "match": "body"}).body
