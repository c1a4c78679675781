"""Catalog entries, catalog-mode matching and order, filters with the reference's exact messages
(SPEC §5.7)."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol.document import own_facts
from markproto.protocol.gotext import trim_space
from markproto.server.search.catalog import (
    Catalog,
    Clause,
    Entry,
    FilterError,
    parse_filter,
)

DAY = datetime(2026, 1, 2, tzinfo=UTC)


def entry(
    path: str, meta: dict[str, str] | None = None, body: str = "", modified: datetime = DAY
) -> Entry:
    return Entry.build(path, meta or {}, modified, own_facts(body))


def entries_traced(metas: list[dict[str, str]]) -> tuple[list[Entry], float]:
    """An entry for each of ``metas`` (the dicts made beforehand, as the snapshot's are), and
    the bytes they hold each (tracemalloc; one entry made first, so imports are not counted)."""
    entry("/warm.md", metas[0])
    tracemalloc.start()
    try:
        kept = [entry(f"/docs/n{n}.md", meta) for n, meta in enumerate(metas)]
        return kept, tracemalloc.get_traced_memory()[0] / len(kept)
    finally:
        tracemalloc.stop()


# --- entries -----------------------------------------------------------------------------------


def test_entry_from_publisher_metadata() -> None:
    e = entry("/docs/auth.md", {"tags": "go,auth", "importance": "0.8", "title": " Auth "}, "# H")
    assert (e.title, e.tags, e.importance, e.demote) == ("Auth", ("go", "auth"), 0.8, 1.0)
    assert e.terms == {"auth", "go"}


def test_an_entry_keeps_the_metadata_given_and_no_word_set() -> None:
    """An entry holds the metadata it was given (the snapshot's dict, not a copy) and, of its
    own, little beside its title: the words of its tags and title are made when asked (kept,
    a set and its words were about 800 bytes of an entry's 1,000)."""
    metas = [{"title": f"Query Parameters and String Validations {n}"} for n in range(300)]
    kept, size = entries_traced(metas)
    assert all(e.meta is meta for e, meta in zip(kept, metas, strict=True))
    assert kept[7].terms == {"query", "parameters", "and", "string", "validations"}
    assert size < 320  # 1,015 bytes when the entry kept its words


def test_tags_match_case_folded_and_cost_no_copy_when_already_folded() -> None:
    """A tag filter and a catalog term equal a tag case-folded (Go's EqualFold). An entry
    whose tags fold to themselves (most) keeps no second copy of them (a frozenset of the
    folded copies was about 370 bytes an entry of three tags)."""
    kept, size = entries_traced([{"tags": "go,auth,notes"} for _ in range(200)])
    assert size < 600  # 819 bytes with the frozenset
    mixed = entry("/m.md", {"tags": "Go,AUTH,Notes"})
    for e in (kept[0], mixed):
        assert Clause("tag", "NOTES").holds(e) and Clause("tag", "auth").holds(e)
        assert not Clause("tag", "note").holds(e)
        assert e.score(["GO", "x"]) == 1
    assert mixed.tags == ("Go", "AUTH", "Notes")


@pytest.mark.parametrize(
    ("body", "title"),
    [
        ("# Title\nbody", "Title"),
        ("## Sub\n# Real Title", "Real Title"),
        ("#NoSpace\n# Yes Space", "Yes Space"),
        ("   #   Spacey   ", "Spacey"),
        ("# First\n# Second", "First"),
        ("```\n# install\n```\n# Real", "install"),  # a naive scan: fences do not hide it
        ("# Trailing ##", "Trailing ##"),
        ("no heading", "x.md"),
        ("---\ntitle: From YAML\n---\n# Heading", "From YAML"),
        ("---\n# a yaml comment\nk: v\n---\n# Heading", "Heading"),  # frontmatter is not body
    ],
)
def test_title_fallbacks(body: str, title: str) -> None:
    assert entry("/docs/x.md", {}, body).title == title


@pytest.mark.parametrize(
    ("value", "importance"),
    [("", 0.5), ("0.9", 0.9), (" 0.25 ", 0.25), ("1", 1.0), ("high", 0.5), ("1.5", 0.5)],
)
def test_importance(value: str, importance: float) -> None:
    assert entry("/a.md", {"importance": value}).importance == importance


def test_journal_demotion_is_by_whole_segment() -> None:
    assert entry("/journal/2026-01-01.md").demote == 0.5
    assert entry("/sub/journal/x.md").demote == 0.5
    assert entry("/journals/x.md").demote == 1.0


def test_frontmatter_fills_only_what_the_publisher_left_unset() -> None:
    body = (
        "---\ntitle: Own\ntags: [alpha, ' beta ', 3, {x: y}]\nimportance: 0.9\n"
        "type: Concept\nauthor: someone\n---\n# Heading\n"
    )
    own = entry("/n.md", {"type": "Document"}, body)
    assert (own.title, own.tags, own.importance) == ("Own", ("alpha", "beta", "3"), 0.9)
    assert own.meta == {
        "type": "Concept",
        "title": "Own",
        "tags": "alpha,beta,3",
        "importance": "0.9",
    }
    declared = entry(
        "/n.md", {"title": "Pub", "tags": "x", "importance": "0.1", "type": "Note"}, body
    )
    assert (declared.title, declared.tags, declared.importance) == ("Pub", ("x",), 0.1)
    assert declared.meta["type"] == "Note"


def test_frontmatter_values_are_never_coerced() -> None:
    e = entry("/n.md", {}, "---\ntitle: 2024-01-02\nimportance: 010\ntags: yes, 1.10\n---\n")
    assert (e.title, e.meta["importance"], e.tags) == ("2024-01-02", "010", ("yes", "1.10"))
    assert e.importance == 0.5  # "010" is no float in [0, 1]... and 10 is out of range anyway


@pytest.mark.parametrize(
    "body",
    [
        "---\ntitle: [unclosed\n---\n# H\n",
        "---\n- a list\n---\n# H\n",
        "---\ntitle:\n  nested: map\n---\n# H\n",
        "---\n: : :\n\t- x\n---\n# H\n",
        "---\ntitle: x\n# H\n",  # never closed: not frontmatter at all
    ],
)
def test_frontmatter_that_gives_nothing(body: str) -> None:
    assert entry("/n.md", {}, body).title == "H"
    assert entry("/n.md", {}, body).tags == ()


# --- catalog mode ------------------------------------------------------------------------------


def golden_catalog() -> Catalog:
    catalog = Catalog()
    a_meta = {"tags": "alpha,wire", "importance": "0.7", "type": "Note"}
    catalog.put(entry("/docs/a.md", a_meta, "# Alpha\n"))
    b_meta = {"tags": "beta", "importance": "0.4", "type": "Document"}
    catalog.put(entry("/docs/b.md", b_meta, "# Beta | piped\n"))
    catalog.put(entry("/docs/sub/c d.md", {"type": "Document"}, "# Gamma\n"))
    return catalog


def paths(entries: list[Entry]) -> list[str]:
    return [e.path for e in entries]


def test_golden_catalog_query() -> None:
    assert paths(golden_catalog().match("alpha beta", "/")) == ["/docs/a.md", "/docs/b.md"]
    assert golden_catalog().match("zzznothing", "/") == []


def test_title_substring_and_tag_equality() -> None:
    catalog = golden_catalog()
    assert paths(catalog.match("al", "/")) == ["/docs/a.md"]  # substring of the title
    assert paths(catalog.match("WIRE", "/")) == ["/docs/a.md"]  # tag, any case
    assert catalog.match("wir", "/") == []  # tags are not substrings
    assert paths(catalog.match("|", "/")) == ["/docs/b.md"]  # no punctuation trimming


def test_order_score_importance_modified_path() -> None:
    catalog = Catalog()
    catalog.put(entry("/z.md", {"tags": "x,y", "importance": "0.1"}))
    catalog.put(entry("/b.md", {"tags": "x", "importance": "0.9"}, modified=DAY))
    catalog.put(entry("/a.md", {"tags": "x", "importance": "0.9"}, modified=DAY))
    catalog.put(entry("/c.md", {"tags": "x", "importance": "0.9"}, modified=DAY + timedelta(1)))
    assert paths(catalog.match("x y", "/")) == ["/z.md", "/c.md", "/a.md", "/b.md"]


def test_match_all_and_scope() -> None:
    catalog = golden_catalog()
    catalog.put(entry("/other/x.md", {"importance": "1"}))
    assert paths(catalog.match(" * ", "/")) == [
        "/other/x.md",
        "/docs/a.md",
        "/docs/sub/c d.md",
        "/docs/b.md",
    ]
    assert paths(catalog.match("*", "/docs/sub")) == ["/docs/sub/c d.md"]
    assert catalog.match("*", "/oth") == []
    assert paths(catalog.match("*", "/other/x.md")) == ["/other/x.md"]


def test_remove_and_replace() -> None:
    catalog = golden_catalog()
    catalog.put(entry("/docs/a.md", {"tags": "gamma"}, "# New"))
    assert catalog.match("alpha", "/") == []
    assert catalog.remove("/docs/b.md") is not None
    assert catalog.match("beta", "/") == []
    assert len(catalog) == 2


# --- filters -----------------------------------------------------------------------------------


def test_filter_parsing() -> None:
    assert parse_filter("") == ()
    assert parse_filter(" , ,") == ()
    assert parse_filter(" tag = Go , project=x=y ") == (
        Clause("tag", "Go"),
        Clause("project", "x=y"),
    )
    after = parse_filter("modified-after=2026-01-02")[0]
    assert after.moment == datetime(2026, 1, 2, tzinfo=UTC)
    before = parse_filter("modified-before=2026-01-02T03:04:05.5+01:30")[0]
    assert before.moment == datetime(
        2026, 1, 2, 3, 4, 5, 500000, timezone(timedelta(hours=1, minutes=30))
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("project", 'malformed filter clause "project"'),
        ("=x", 'malformed filter clause "=x"'),
        ("a=", 'malformed filter clause "a="'),
        ("a=b, c = ", 'malformed filter clause "c ="'),
        ('say "hi"', 'malformed filter clause "say \\"hi\\""'),
        (
            "modified-after=nope",
            'filter modified-after: invalid date "nope" (want RFC 3339 or YYYY-MM-DD)',
        ),
        (
            "modified-before=2026-13-01",
            'filter modified-before: invalid date "2026-13-01" (want RFC 3339 or YYYY-MM-DD)',
        ),
        (
            "modified-after=2026-01-02T25:00:00Z",
            'filter modified-after: invalid date "2026-01-02T25:00:00Z"'
            " (want RFC 3339 or YYYY-MM-DD)",
        ),
        (
            "modified-after=2026-1-02",
            'filter modified-after: invalid date "2026-1-02" (want RFC 3339 or YYYY-MM-DD)',
        ),
    ],
)
def test_filter_messages(text: str, message: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(text)
    assert str(caught.value) == message


def test_filter_predicates() -> None:
    catalog = golden_catalog()
    assert paths(catalog.match("*", "/", parse_filter("tag=WIRE"))) == ["/docs/a.md"]
    assert paths(catalog.match("*", "/", parse_filter("tags=beta"))) == ["/docs/b.md"]
    assert catalog.match("*", "/", parse_filter("tags=alpha")) == []  # the whole stored value
    assert paths(catalog.match("*", "/", parse_filter("type=Document"))) == [
        "/docs/sub/c d.md",
        "/docs/b.md",
    ]
    assert catalog.match("*", "/", parse_filter("type=document")) == []  # exact, case and all
    assert catalog.match("*", "/", parse_filter("modified-after=2026-01-02")) == []  # strict
    assert len(catalog.match("*", "/", parse_filter("modified-after=2026-01-01T23:59:59Z"))) == 3
    assert len(catalog.match("*", "/", parse_filter("modified-before=2026-01-02T00:00:01Z"))) == 3
    assert catalog.match("*", "/", parse_filter("tag=alpha,tag=beta")) == []  # all must hold


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_filter_parser_raises_only_filter_errors(text: str) -> None:
    message = ""
    try:
        clauses = parse_filter(text)
    except FilterError as exc:
        message = str(exc)
        clauses = ()
    assert message.startswith(("malformed filter clause ", "filter modified-")) or not message
    assert all(c.key and c.value and "," not in c.value for c in clauses)


YAMLISH = st.text(alphabet=st.sampled_from(list("ab: -[]{}&*!|>'\"\n\t#?%@`,.01\x00")), max_size=60)


@settings(max_examples=300, deadline=None)
@given(YAMLISH)
def test_any_frontmatter_gives_strings_or_nothing(block: str) -> None:
    facts = own_facts(f"---\n{block}\n---\n# Title\n")
    assert set(facts.frontmatter) <= {"tags", "title", "importance", "type"}
    assert all(isinstance(value, str) and trim_space(value) for value in facts.frontmatter.values())
