"""The body index (SPEC §5.7, body mode): sections, the recall rule (fixed by the spec and
checked against a brute-force oracle), the order rules the spec fixes (ties, importance as a
prior only), the properties of our ranking (never particular scores), snippets, and removal."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from markproto.protocol import mdoutline
from markproto.protocol.document import own_facts
from markproto.protocol.gotext import lower as go_lower
from markproto.server.search import bodyindex, intmap
from markproto.server.search.analysis import analyze
from markproto.server.search.bodyindex import BodyIndex, Hit, snippet
from markproto.server.search.catalog import Entry
from markproto.server.search.text import query_terms, strip_markup, text_words, word_set

DAY = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Docs:
    """A body index with the bodies it was given, for snippets."""

    index: BodyIndex
    bodies: dict[str, bytes]

    def put(self, path: str, body: str, meta: dict[str, str] | None = None) -> None:
        data = body.encode("utf-8", "surrogateescape")
        self.bodies[path] = data
        entry = Entry.build(path, meta or {}, DAY, own_facts(data.decode("utf-8", "replace")))
        self.index.apply(entry, path, analyze(data))

    def hits(self, query: str, accept: Callable[[Entry], bool] = lambda _: True) -> list[Hit]:
        return list(self.index.rank(query_terms(query), accept))

    def where(self, query: str) -> list[str]:
        return [
            f"{h.entry.path}#{h.anchor}" if h.section >= 0 else h.entry.path
            for h in self.hits(query)
        ]

    def snippets(self, query: str) -> list[str]:
        terms = query_terms(query)
        return [h.snippet(self.bodies[h.entry.path], terms) for h in self.hits(query)]


def docs(max_slots: int | None = None) -> Docs:
    return Docs(BodyIndex() if max_slots is None else BodyIndex(max_slots=max_slots), {})


# --- sections ----------------------------------------------------------------------------------

UPSTREAM = (
    "Preamble text.\n\nSetext Title\n============\n\nunder setext\n\n## Child\n\nchild text\n\n"
    "### Grandchild\n\ndeep text\n\n## Sibling\n"
)


def test_upstream_sections() -> None:
    outline = analyze(UPSTREAM.encode()).outline
    sections = range(len(outline))
    assert [outline.anchor(i) for i in sections] == [
        "",
        "setext-title",
        "child",
        "grandchild",
        "sibling",
    ]
    assert [outline.heading(i) for i in sections] == [
        "",
        "Setext Title",
        "Child",
        "Grandchild",
        "Sibling",
    ]
    assert list(outline.lengths) == [2, 2, 2, 2, 0]
    index = docs()
    index.put("/u.md", UPSTREAM)
    assert index.where("deep setext") == ["/u.md#grandchild"]  # one in text, one in the trail
    assert index.where("sibling") == ["/u.md#sibling"]  # a heading with no text still matches
    assert index.snippets("deep") == ["deep text"]
    assert sorted(index.snippets("setext")) == ["", "child text", "deep text", "under setext"]


# --- recall (fixed by the spec) ----------------------------------------------------------------


def test_bare_row_when_tags_and_title_hold_every_term() -> None:
    index = docs()
    index.put("/a.md", "# Alpha\n\nalpha text\n\n## More\n\nalpha wire\n", {"tags": "wire"})
    assert index.where("alpha wire") == ["/a.md"]  # one bare row, no section rows
    assert index.snippets("alpha wire") == [""]
    assert index.where("alpha more") == ["/a.md#more"]  # "more" only in the trail


def test_doc_terms_complete_a_section_but_cannot_carry_it_alone() -> None:
    index = docs()
    index.put("/a.md", "# Alpha\n\nbeta here\n\n## Other\n\nnothing\n", {"tags": "gamma"})
    assert index.where("gamma beta") == ["/a.md#alpha"]
    assert index.where("gamma nothing") == ["/a.md#other"]
    assert index.where("gamma alpha") == ["/a.md"]


def test_whole_tokens_only_any_case() -> None:
    index = docs()
    index.put("/a.md", "Tune the `net.core.rmem_max` buffer via SYSCTL.\n")
    assert index.where("buffers") == []
    assert index.where("sysctl") == ["/a.md#"]
    assert index.where("rmem_max net.core.rmem_max") == ["/a.md#"]
    assert index.where("core.rmem") == []


def test_no_terms_no_rows() -> None:
    index = docs()
    index.put("/a.md", "anything\n")
    assert index.hits("*") == []
    assert index.hits("a") == []


# --- order: what the spec fixes ------------------------------------------------------------------


def test_importance_orders_but_never_admits() -> None:
    index = docs()
    index.put("/lo.md", "# Lo\n\napple pie\n", {"importance": "0.2"})
    index.put("/hi.md", "# Hi\n\napple pie\n", {"importance": "0.9"})
    index.put("/top.md", "# Top\n\nunrelated\n", {"importance": "1"})
    assert index.where("apple") == ["/hi.md#hi", "/lo.md#lo"]


def test_ties_by_path_then_anchor() -> None:
    index = docs()
    index.put("/tie/b.md", "# B\n\npear\n")
    index.put("/tie/a.md", "# A\n\npear\n")
    index.put("/tie/c.md", "# Same\n\npear\n\n# Same\n\npear\n")
    assert index.where("pear") == [
        "/tie/a.md#a",
        "/tie/b.md#b",
        "/tie/c.md#same",
        "/tie/c.md#same-1",
    ]


def test_journal_demotion() -> None:
    for journal in ("/journal/2026-01-01.md", "/sub/journal/2026-01-01.md"):
        index = docs()
        index.put(journal, "# Day\n\nshared phrase kiwi\n", {"importance": "0.6"})
        index.put("/notes.md", "# Notes\n\nshared phrase kiwi\n", {"importance": "0.6"})
        assert index.where("kiwi") == ["/notes.md#notes", journal + "#day"]


# --- order: ours (properties, not numbers) ------------------------------------------------------


def test_mango_the_headed_section_beats_the_tag() -> None:
    """The reference ranks the tagged document's bare row first (its bare rows are boosted on a
    scale of their own); here the 0.9-importance section headed "Mango" that says it twice wins
    over a tag and a title word. Recall is the same."""
    index = docs()
    index.put(
        "/plans/mango.md",
        "# Mango plan\n\n## Goal\n\nRipen the mango.\n",
        {"tags": "mango,fruit", "importance": "0.5"},
    )
    index.put(
        "/plans/other.md",
        "# Other\n\n## Mango\n\nA mango is mentioned here and mango again.\n",
        {"importance": "0.9"},
    )
    assert index.where("mango") == ["/plans/other.md#mango", "/plans/mango.md"]


def test_papaya_section_beats_a_tagged_journal() -> None:
    index = docs()
    index.put(
        "/journal/2026-01-02.md",
        "# Day two\n\nFixed the papaya bug.\n",
        {"tags": "papaya", "importance": "0.55"},
    )
    index.put(
        "/debugging.md",
        "# Debugging\n\n## Papaya reverts on restart\n\n"
        "The papaya path is rewritten by the watcher.\n",
        {"tags": "debugging", "importance": "0.85"},
    )
    want = ["/debugging.md#papaya-reverts-on-restart", "/journal/2026-01-02.md"]
    assert index.where("papaya") == want


def test_own_heading_beats_mentions() -> None:
    index = docs()
    index.put(
        "/a.md",
        "# Guide\n\n## Dockerfile\n\nWrite it.\n\n## Build\n\nThe dockerfile, the dockerfile.\n",
    )
    assert index.where("dockerfile") == ["/a.md#dockerfile", "/a.md#build"]


FILLER = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "the", "of"]), max_size=60)


@settings(max_examples=100, deadline=None)
@given(FILLER, FILLER, st.integers(1, 5), FILLER)
def test_a_heading_only_match_never_outranks_heading_and_text(
    with_term: list[str], without: list[str], mentions: int, others: list[str]
) -> None:
    """One saturation over all fields: a term in the text adds to the same heading, whatever
    the lengths, so a section whose heading alone holds the term cannot come first."""
    index = docs()
    titled = {"title": "Doc"}
    text = " ".join(with_term + ["kiwi"] * mentions)
    index.put("/x.md", "# Kiwi guide\n\n" + text + "\n", titled)
    index.put("/y.md", "# Kiwi guide\n\n" + " ".join(without) + "\n", titled)
    index.put("/z.md", "# Other\n\n" + " ".join(others) + "\n")  # statistics around them
    assert index.where("kiwi") == ["/x.md#kiwi-guide", "/y.md#kiwi-guide"]


def test_a_bare_row_competes_on_the_same_scale() -> None:
    """A bare row is scored like any row (its one field is the title and tags): it comes first
    against a passing mention and after a section that is about the query, so neither kind of
    row always wins."""
    index = docs()
    index.put("/kiwi.md", "# Kiwi\n\nAbout the fruit.\n")  # title "Kiwi": a bare row
    index.put("/notes.md", "# Notes\n\n" + "lots of words here " * 20 + "and a kiwi once.\n")
    assert index.where("kiwi") == ["/kiwi.md", "/notes.md#notes"]
    index = docs()
    index.put("/kiwi.md", "# Kiwi\n\nAbout the fruit.\n", {"importance": "0.2"})
    index.put(
        "/guide.md",
        "# Guide\n\n## Kiwi\n\nKiwi care: a kiwi wants sun.\n",
        {"importance": "0.9"},
    )
    assert index.where("kiwi") == ["/guide.md#kiwi", "/kiwi.md"]


HEADING_WORDS = st.lists(st.sampled_from(["care", "guide", "notes", "sun", "water"]), max_size=4)


PADS = ["one", "two", "three", "four", "five"]


@settings(max_examples=60, deadline=None)
@given(HEADING_WORDS, FILLER, FILLER, st.integers(1, 4))
def test_a_bare_row_is_a_heading_alone(
    extra: list[str], without: list[str], with_term: list[str], mentions: int
) -> None:
    """A bare row is scored as a section whose own heading is its title: it ties a section
    headed the same whose text lacks the term, and loses to one whose text holds it too. (Every
    title and heading here is as long as its field's mean, so each normalizes to 1.)"""
    heading = " ".join(["Kiwi", *extra])
    pad = " ".join(PADS[: len(word_set((heading,))) - 1])
    index = docs()
    index.put("/bare.md", f"# Other {pad}\n\nfiller words\n", {"title": heading})
    plain = f"# {heading}\n\n" + " ".join(without) + "\n"
    index.put("/plain.md", plain, {"title": f"Doc {pad}"})
    index.put("/z.md", f"# Spare {pad}\n\nalpha beta\n", {"title": f"Zed {pad}"})
    by_path = {hit.entry.path: hit.score for hit in index.hits("kiwi")}
    assert by_path["/bare.md"] == pytest.approx(by_path["/plain.md"])
    text = " ".join(with_term + ["kiwi"] * mentions)
    index.put("/text.md", f"# {heading}\n\n{text}\n", {"title": f"Doc {pad}"})
    assert index.where("kiwi")[0] == "/text.md#" + mdoutline.slug(heading)


@pytest.mark.parametrize(
    ("name", "others", "bare", "plain", "first"),
    [
        ("Kiwi", "Alpha beta gamma", "/b.md", "/a.md", "/b.md"),
        ("Kiwi care guide", "Alpha", "/a.md", "/b.md", "/b.md#kiwi-care-guide"),
    ],
)
def test_a_titles_length_counts_in_full(
    name: str, others: str, bare: str, plain: str, first: str
) -> None:
    """A title names its whole document, so its length counts in full (``title_b`` 1, a
    heading's 0.75): at the same ratio to its field's mean, a title shorter than the mean
    outweighs the same words as a heading, and a longer one weighs less. (The paths are such
    that a tie would put the other row first.)"""
    index = docs()
    index.put(bare, f"# {others}\n\nfiller words\n", {"title": name})
    index.put(plain, f"# {name}\n\nfiller words\n", {"title": others})
    index.put("/z.md", "# Spare part\n\nalpha beta\n", {"title": "Zed part"})  # means of 2
    assert index.where("kiwi")[0] == first


@settings(max_examples=60, deadline=None)
@given(HEADING_WORDS, FILLER, st.integers(0, 4))
def test_a_bare_rows_text_is_its_preamble(extra: list[str], lead: list[str], mentions: int) -> None:
    """A bare row's text is its document's preamble (the text before any heading): text under
    a later heading is not the document's, whether or not a preamble precedes it."""
    heading = " ".join(["Kiwi", *extra])
    text = " ".join(lead + ["kiwi"] * mentions) or "none"
    index = docs()
    index.put("/bare.md", f"{text}\n", {"title": heading})
    index.put("/more.md", f"{text}\n\n## Later\n\nkiwi kiwi\n", {"title": heading})
    index.put("/late.md", f"## Later\n\n{text}\n", {"title": heading})
    index.put("/z.md", "# Spare\n\nalpha beta\n")  # statistics around them
    by_path = {hit.entry.path: hit.score for hit in index.hits("kiwi")}
    assert by_path["/more.md"] == pytest.approx(by_path["/bare.md"])
    if mentions:
        assert by_path["/late.md"] < by_path["/bare.md"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta"]), min_size=1, max_size=8))
def test_titles_and_headings_are_each_normalized_by_their_own_mean(words: list[str]) -> None:
    """A bare row's title is one field, normalized by the documents' mean title length; a
    section's own heading another, by the sections' mean heading length: how long other
    documents' headings are moves a section's score, never a bare row's."""
    scores = []
    for spare in ("Spare", "Spare " + " ".join(words)):
        index = docs()
        index.put("/bare.md", "filler words\n", {"title": "Kiwi care"})
        index.put("/plain.md", "# Kiwi care\n\nfiller words\n", {"title": "Doc"})
        index.put("/z.md", f"## {spare}\n\nomega\n", {"title": "Zed"})
        scores.append({hit.entry.path: hit.score for hit in index.hits("kiwi")})
    assert scores[0]["/bare.md"] == pytest.approx(scores[1]["/bare.md"])
    assert scores[0]["/plain.md"] != pytest.approx(scores[1]["/plain.md"])


def test_an_attribute_block_sets_the_anchor_not_the_length() -> None:
    """``{ #id }`` closing a heading is markup (MkDocs, Pandoc): it adds no heading length, so
    the section ranks as if it had the bare heading."""
    index = docs()
    index.put("/a.md", "# Kiwi care { #kiwi-care-and-feeding }\n\nkiwi\n")
    index.put("/b.md", "# Kiwi care\n\nkiwi\n")
    index.put("/c.md", "# Other\n\nalpha\n")
    scores = [hit.score for hit in index.hits("kiwi")]
    assert scores[0] == pytest.approx(scores[1])


def test_an_identifiers_words_apart_from_it_tell_what_a_section_is_about() -> None:
    """A snake_case identifier's words count for the rows that hold it: of two sections that
    mention ``honor_labels`` once, the one headed by one of its words (or saying one elsewhere
    in its text) comes first, where without the words it comes second."""
    for second in (
        "## Target labels\n\nThe honor_labels option, set.\n",
        "## Security\n\nThe honor_labels option keeps labels.\n",
    ):
        index = docs()
        index.put("/a.md", "# Guide\n\n## Security\n\nThe honor_labels option, set.\n")
        index.put("/b.md", "# Guide\n\n" + second)
        index.put("/c.md", "# Other\n\nalpha beta gamma\n")
        assert index.where("honor_labels")[0].startswith("/b.md#")
        index.index.weights = dataclasses.replace(index.index.weights, identifier_word=0.0)
        assert index.where("honor_labels")[0] == "/a.md#security"


def test_identifier_words_join_the_identifiers_one_saturation() -> None:
    """The words are more of the identifier's own weighted frequency, before its saturation:
    the same words apart from it lift a row that mentions it in passing more than one whose
    heading names it (which they cannot outrank by that alone)."""
    index = docs()
    index.put("/a.md", "# Doc\n\n## kiwi_tree\n\nThe kiwi_tree: a tree, a tree.\n")
    index.put("/b.md", "# Doc\n\n## Notes\n\nThe kiwi_tree: a tree, a tree.\n")
    index.put("/c.md", "# Other\n\nalpha beta gamma\n")
    runs = []
    for weight in (0.0, 1.0):
        index.index.weights = dataclasses.replace(index.index.weights, identifier_word=weight)
        runs.append({hit.entry.path: hit.score for hit in index.hits("kiwi_tree")})
    plain, words = runs
    assert words["/b.md"] - plain["/b.md"] > words["/a.md"] - plain["/a.md"] > 0
    assert index.where("kiwi_tree")[0] == "/a.md#kiwi_tree"


def test_identifier_words_admit_no_row() -> None:
    """Recall is the protocol's: a section holding the words but not the identifier is no row."""
    index = docs()
    index.put("/a.md", "# Guide\n\n## Honor labels\n\nLabels we honor.\n")
    index.put("/b.md", "# Guide\n\n## Scrape\n\nSee honor_labels.\n")
    assert index.where("honor_labels") == ["/b.md#scrape"]


def test_identifier_words_for_a_bare_row_of_an_empty_document() -> None:
    """A document without a section still has its bare row (its title is its path's last
    segment); the words count in its title, as any term's would."""
    index = docs()
    index.put("/my_doc.md", "")
    index.put("/other.md", "# Other\n\nmy_doc here\n")
    assert set(index.where("my_doc")) == {"/my_doc.md", "/other.md#other"}


@pytest.mark.parametrize("plain", [4, bodyindex.REORDERED])
def test_identifier_words_move_only_the_first_rows(plain: int) -> None:
    """Only the first ``REORDERED`` rows are reordered (a fixed number, so a smaller limit
    shows a prefix of a larger one): a row the words would put first stays where BM25F put
    it when it is not among them."""
    index = docs()
    for n in range(plain):
        index.put(f"/a{n}.md", "# Doc\n\n## Security\n\nThe kiwi_tree option.\n")
    index.put("/b.md", "# Doc\n\n## Kiwi notes\n\nThe kiwi_tree option, said in many more words.\n")
    where = index.where("kiwi_tree")
    assert where.index("/b.md#kiwi-notes") == (0 if plain < bodyindex.REORDERED else plain)


IDENTIFIER_TEXT = st.lists(
    st.sampled_from(["kiwi_tree", "kiwi", "tree", "alpha", "beta", "kiwi-tree"]), max_size=12
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(IDENTIFIER_TEXT, IDENTIFIER_TEXT), min_size=1, max_size=16))
def test_identifier_words_reorder_the_first_rows_only(
    sections: list[tuple[list[str], list[str]]],
) -> None:
    """The identifier words reorder the first ``REORDERED`` rows and nothing else: those rows
    are the same rows, the ones past them are in the same order with the same scores, and
    scores never rise down the list (a word can only add)."""
    index = docs()
    for n, (heading, text) in enumerate(sections):
        index.put(f"/d{n}.md", f"# Doc\n\n## {' '.join(heading)} x\n\n{' '.join(text)} kiwi_tree\n")
    runs = []
    for weight in (0.0, 1.0):
        index.index.weights = dataclasses.replace(index.index.weights, identifier_word=weight)
        runs.append([(hit.entry.path, hit.anchor, hit.score) for hit in index.hits("kiwi_tree")])
    plain, words = runs
    first = bodyindex.REORDERED
    assert {row[:2] for row in plain[:first]} == {row[:2] for row in words[:first]}
    assert plain[first:] == words[first:]
    scores = [score for _, _, score in words]
    assert scores == sorted(scores, reverse=True)
    before = {(path, anchor): score for path, anchor, score in plain}
    assert all(score >= before[path, anchor] for path, anchor, score in words)


@settings(max_examples=40, deadline=None)
@given(st.permutations(range(5)), st.lists(st.sampled_from(["pear", "plum"]), min_size=5))
def test_ties_break_the_same_whatever_the_order_of_indexing(
    order: list[int], words: list[str]
) -> None:
    """Equal scores go out by path, then anchor, however the documents came in."""
    bodies = {f"/t/{n}.md": f"# Same\n\n{words[n]} kiwi\n\n# Same\n\nkiwi\n" for n in range(5)}
    runs = []
    for paths in (sorted(bodies), [f"/t/{n}.md" for n in order]):
        index = docs()
        for path in paths:
            index.put(path, bodies[path])
        runs.append([(hit.entry.path, hit.anchor, hit.score) for hit in index.hits("kiwi")])
    assert runs[0] == runs[1]
    keys = [(-score, path, anchor) for path, anchor, score in runs[0]]
    assert keys == sorted(keys)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["0.1", "0.3", "0.5", "0.7", "0.9"]), min_size=2, max_size=5))
def test_importance_orders_ties_of_relevance(importances: list[str]) -> None:
    index = docs()
    for number, importance in enumerate(importances):
        index.put(f"/d{number}.md", "# Same\n\nkiwi text\n", {"importance": importance})
    order = sorted(range(len(importances)), key=lambda n: (-float(importances[n]), f"/d{n}.md"))
    assert index.where("kiwi") == [f"/d{n}.md#same" for n in order]


# --- snippets ----------------------------------------------------------------------------------


def test_snippet_rules() -> None:
    assert snippet("More.\n", ["appended"]) == "More."  # no line holds a term: the first line
    assert snippet("one\ntwo beta\nalpha beta\nalpha beta", ["alpha", "beta"]) == "alpha beta"
    assert snippet("xx\nalphabet soup", ["alpha"]) == "alphabet soup"  # substrings count
    assert snippet("```\ncode alpha\n```\n", ["alpha"]) == "code alpha"
    assert snippet("\n\n", ["x"]) == ""
    long = "é" * 200
    cut = snippet(long, ["x"])
    assert cut == "é" * 118 + "..." and len(cut.encode()) == 239
    assert snippet("a" * 240, ["a"]) == "a" * 240
    assert snippet("a" * 241, ["a"]) == "a" * 237 + "..."


def test_snippets_come_from_the_right_bytes() -> None:
    index = docs()
    body = "# Été\n\nnaïve café ☕ text\n\n## Zebra\n\nzebra crossing ünïcode\n"
    index.put("/u.md", body)
    assert index.snippets("zebra") == ["zebra crossing ünïcode"]
    index.put("/bad.md", "# Bad\n\nbroken \udcff byte\n\n## Zulu\n\nzulu line\n")
    assert index.snippets("zulu") == ["zulu line"]
    assert index.snippets("broken") == ["broken \ufffd byte"]


def test_snippet_prefers_the_rarest_terms() -> None:
    raw = "alpha common\nbeta common\nbeta\n"
    assert snippet(raw, ["alpha", "beta", "common"], [1.0, 5.0, 0.1]) == "beta common"
    assert snippet(raw, ["alpha", "beta", "common"]) == "alpha common"  # alike: the first
    assert snippet(raw + "alpha beta common", ["alpha", "beta", "common"], [1.0, 5.0, 0.1]) == (
        "alpha beta common"  # the most distinct terms come first
    )


def oracle_snippet(raw: str, terms: Sequence[str], rarity: Sequence[float]) -> str:
    best, best_key = "", (-1, 0.0)
    for line in strip_markup(raw).split("\n"):
        found = [w for term, w in zip(terms, rarity, strict=True) if term in go_lower(line)]
        key = (len(found), sum(found))
        if key > best_key:
            best, best_key = line, key
    return best if len(best.encode()) <= 240 else snippet(best, ["\n"])


SNIPPET_TEXT = st.lists(
    st.lists(
        st.sampled_from(
            ["kiwi", "Kiwi", "pear", "**ki**wi", "[pe](x)ar", "`a`", "> ", "- ", "|", "```", "x"]
        ),
        max_size=5,
    ).map(" ".join),
    max_size=8,
).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(
    SNIPPET_TEXT,
    st.lists(st.sampled_from(["kiwi", "pear", "ki.wi", "wi", "ar"]), min_size=1, max_size=3),
)
def test_snippet_is_the_literal_rule(raw: str, terms: list[str]) -> None:
    terms = list(dict.fromkeys(terms))
    rarity = [float(len(term) % 3) for term in terms]  # ties and orders alike
    assert snippet(raw, terms, rarity) == oracle_snippet(raw, terms, rarity)


@settings(max_examples=200, deadline=None)
@given(
    SNIPPET_TEXT,
    st.lists(st.sampled_from(["kiwi", "pear", "ki.wi", "wi", "ar"]), min_size=1, max_size=3),
    st.sampled_from([1, 5, 1 << 30]),
)
def test_snippet_is_the_rule_whatever_the_pieces(raw: str, terms: list[str], piece: int) -> None:
    """The loose text is made a piece of lines at a time: a line a piece, a few, or one piece
    for the whole text give the rule's snippet alike."""
    terms = list(dict.fromkeys(terms))
    rarity = [float(len(term) % 3) for term in terms]
    with mock.patch.object(bodyindex, "_PIECE", piece):
        assert snippet(raw, terms, rarity) == oracle_snippet(raw, terms, rarity)


# --- removal -----------------------------------------------------------------------------------


def test_put_replaces_and_remove_forgets() -> None:
    index = docs()
    index.put("/a.md", "# A\n\nkeep\n")
    baseline = index.index.terms
    index.put("/b.md", "# B\n\nonlyinb transient words\n")
    for round_ in range(5):
        index.put("/b.md", f"# B\n\nversion{round_} keep\n")
    assert index.where("onlyinb") == []
    assert index.where("version4") == ["/b.md#b"]
    assert index.where("keep") == ["/a.md#a", "/b.md#b"]
    index.index.remove("/b.md")
    index.index.remove("/b.md")
    assert index.where("keep") == ["/a.md#a"]
    assert index.index.terms == baseline
    assert len(index.index) == 1
    assert index.index.sections == 1


def test_slots_renumber_when_they_run_out() -> None:
    """Slots only grow; when they run out the live ones are renumbered, and nothing changes."""
    small, fresh = docs(max_slots=12), docs()
    for round_ in range(10):
        for index in (small, fresh):
            index.put("/a.md", f"# A\n\nkiwi {round_}\n\n## B\n\npear kiwi\n", {"tags": "fruit"})
            index.put("/e.md", "")  # no sections, still a slot
            index.put("/c.md", f"# C\n\nkiwi pear v{round_}\n")
    for query in ("kiwi", "pear kiwi", "fruit", "fruit pear", "v9"):
        assert [(h.entry.path, h.anchor, h.score) for h in small.hits(query)] == [
            (h.entry.path, h.anchor, h.score) for h in fresh.hits(query)
        ]
    assert small.index.terms == fresh.index.terms
    with pytest.raises(OverflowError):
        small.put("/big.md", "".join(f"# H{n}\n\nx\n\n" for n in range(20)))


# --- the recall rule, against a brute-force oracle ---------------------------------------------


def oracle(bodies: dict[str, tuple[str, dict[str, str]]], terms: Sequence[str]) -> set[str]:
    rows: set[str] = set()
    for path, (body, meta) in bodies.items() if terms else ():
        doc_terms = Entry.build(path, meta, DAY, own_facts(body)).terms
        if all(t in doc_terms for t in terms):
            rows.add(path)
            continue
        for section in mdoutline.own_sections(body):
            text = strip_markup(section.text)
            if not text and not section.heading:
                continue
            here = set(text_words(text)) | word_set(section.trail)
            if all(t in here or t in doc_terms for t in terms) and any(t in here for t in terms):
                rows.add(f"{path}#{section.anchor}")
    return rows


WORDS = ["kiwi", "Mango", "pear", "apple", "a.b", "x", "kiwi_pear"]
LINE = st.lists(st.sampled_from([*WORDS, "#", "##", "-", "`", "**", " "]), max_size=6).map(" ".join)
BODY = st.lists(LINE, max_size=8).map("\n".join)
META = st.fixed_dictionaries(
    {},
    optional={"tags": st.sampled_from(["kiwi", "mango,pear", ""]), "title": st.sampled_from(WORDS)},
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["/a.md", "/b/c.md", "/journal/d.md"]), st.tuples(BODY, META), max_size=3
    ),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
)
@example({"/a.md": ("kiwi\n# `\nkiwi", {})}, "kiwi")  # the preamble and a heading of "`": anchor ""
@example(
    {"/a.md": ("", {"title": "kiwi_pear"})}, "kiwi_pear"
)  # an identifier's bare row, no section
def test_recall_is_exactly_the_rule(
    bodies: dict[str, tuple[str, dict[str, str]]], query: str
) -> None:
    index = docs()
    for path, (body, meta) in bodies.items():
        index.put(path, body, meta)
    hits = index.hits(query)
    assert set(index.where(query)) == oracle(bodies, query_terms(query))
    assert len(index.where(query)) == len(hits)
    for before, after in itertools.pairwise(hits):
        # ties by path, then anchor, then document order (two rows of a document may share
        # an anchor: the preamble's and an all-punctuation heading's are both "")
        assert before.score > after.score or (
            before.score == after.score
            and (before.entry.path, before.anchor, before.section)
            < (after.entry.path, after.anchor, after.section)
        )


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.text(max_size=30))
def test_arbitrary_bodies_and_queries_never_raise(body: str, query: str) -> None:
    index = docs()
    index.put("/a.md", body)
    for hit in index.hits(query):
        assert len(hit.snippet(index.bodies["/a.md"], query_terms(query)).encode()) <= 240
    index.index.remove("/a.md")
    assert index.index.terms == 0
    assert len(index.index) == 0


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["/a.md", "/b/c.md", "/journal/d.md"]),
            st.one_of(st.none(), st.tuples(BODY, META)),
            st.booleans(),
        ),
        max_size=8,
    )
)
def test_any_writes_and_freezes_give_the_index_of_the_last_versions(
    writes: list[tuple[str, tuple[str, dict[str, str]] | None, bool]],
) -> None:
    """Puts and removals, the posting lists frozen after some of them, rank as an index given
    only the documents left (its scores too), and hold as many terms."""
    index, live = docs(), {}
    for path, version, freeze in writes:
        if version is None:
            index.index.remove(path)
            live.pop(path, None)
        else:
            index.put(path, *version)
            live[path] = version
        if freeze:
            index.index.freeze()
    fresh = docs()
    for path, (body, meta) in live.items():
        fresh.put(path, body, meta)
    for query in ["kiwi", "Mango pear", "apple", "a.b x", "kiwi pear"]:
        assert [(h.entry.path, h.anchor, h.score) for h in index.hits(query)] == [
            (h.entry.path, h.anchor, h.score) for h in fresh.hits(query)
        ]
    assert index.index.terms == fresh.index.terms


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["/a.md", "/b.md", "/c.md"]),
            st.one_of(st.none(), st.tuples(BODY, META)),
        ),
        max_size=8,
    )
)
def test_the_holders_of_a_word_are_the_documents_whose_tags_or_title_hold_it(
    writes: list[tuple[str, tuple[str, dict[str, str]] | None]],
) -> None:
    """The identifier words read whether a row's tags or title hold a word from that word's
    holders (``_holds``), not from its entry: after any puts and removals they agree, for
    every live document and every word."""
    index, live = docs(), set()
    for path, version in writes:
        if version is None:
            index.index.remove(path)
            live.discard(path)
        else:
            index.put(path, *version)
            live.add(path)
    body, paths = index.index, sorted(live)
    starts = [body._paths[path] for path in paths]
    words = set(query_terms(" ".join(WORDS))) | {"kiwi", "pear", "a", "b", "absent"}
    for word in words:
        held = bodyindex._holds(intmap.values(body._holders, word), starts)
        assert held == [word in body.entry(path).terms for path in paths]  # type: ignore[union-attr]


# --- every way of reading a postings list ranks alike -------------------------------------------

PATHS = [f"/p{n}.md" for n in range(6)]
TAGGED = st.fixed_dictionaries(
    {},
    optional={
        "tags": st.lists(st.sampled_from(WORDS[:4]), max_size=2).map(",".join),
        "title": st.sampled_from(WORDS),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(PATHS), st.tuples(BODY, TAGGED), min_size=1, max_size=6),
    st.lists(st.sampled_from(PATHS), max_size=2),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
)
def test_every_postings_reading_gives_the_same_rows(
    bodies: dict[str, tuple[str, dict[str, str]]], removed: list[str], query: str
) -> None:
    """Matching reads a term's postings by bisection for a few candidates or by one pass over
    them, and the flags of the matches the same two ways: forcing either everywhere changes no
    row, no score and no order (a removal leaves dead ranges for the lookups to cut)."""
    index = docs()
    for path, (body, meta) in bodies.items():
        index.put(path, body, meta)
    for path in removed:
        index.index.remove(path)
    runs = []
    for probe, align in ((16, 8), (0, 0), (1 << 30, 1 << 30)):
        with mock.patch.multiple(bodyindex, _PROBE=probe, _ALIGN=align):
            runs.append([(h.entry.path, h.section, h.score) for h in index.hits(query)])
    assert runs[0] == runs[1] == runs[2]
