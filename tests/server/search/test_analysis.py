"""Per-document analysis (SPEC §5.7): the sections kept, their names, lengths and spans,
the posting flags, and a batch's one block of postings."""

from __future__ import annotations

import dataclasses
import itertools
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import mdoutline
from markproto.protocol.document import own_facts
from markproto.protocol.links import extract
from markproto.server.search.analysis import (
    FLAG_BITS,
    IN_HEADING,
    IN_TRAIL,
    RUN_TERMS,
    TF_MAX,
    Analysis,
    Outline,
    Postings,
    analyze,
    analyze_many,
    combine,
)
from markproto.server.search.links import pack
from markproto.server.search.text import strip_markup


def name_list(analysis: Analysis) -> list[str]:
    outline = analysis.outline
    return [n for i in range(len(outline)) for n in (outline.anchor(i), outline.heading(i))]


def unpack(runs: tuple[Postings, ...] | None) -> dict[str, list[tuple[int, int]]]:
    """term -> ``(section, flags)`` in posting order, the runs combined."""
    assert runs is not None
    out: dict[str, list[int]] = {}
    for run in runs:
        terms = run.terms.split("\n") if run.terms else []
        starts = itertools.accumulate(run.counts, initial=0)
        for term, start, count in zip(terms, starts, run.counts, strict=False):
            entries = out.setdefault(term, [])
            for entry in run.entries[start : start + count]:
                if entries and entries[-1] >> FLAG_BITS == entry >> FLAG_BITS:
                    entries[-1] = combine(entries[-1], entry)
                else:
                    entries.append(entry)
    return {
        term: [(entry >> FLAG_BITS, entry & 0xFF) for entry in entries]
        for term, entries in out.items()
    }


def own_texts(body: bytes, analysis: Analysis) -> list[str]:
    outline = analysis.outline
    cut = [body[slice(*outline.span(i))] for i in range(len(outline))]
    return [c.decode("utf-8", "replace") for c in cut]


def test_blank_bodies_and_frontmatter() -> None:
    assert analyze(b"").sections == 0
    assert analyze(b"  \n\n").sections == 0
    analysis = analyze(b"---\ntitle: secretword\n---\nvisible\n")
    assert analysis.sections == 1
    assert list(unpack(analysis.postings)) == ["visible"]  # its own metadata is not body


def test_flags_frequency_and_headings() -> None:
    body = b"# Guide\n\n## Kiwi kiwi\n\n" + b"kiwi " * 70 + b"\n\n### Leaf\n\npear\n"
    analysis = analyze(body)
    own = IN_TRAIL | IN_HEADING
    assert unpack(analysis.postings) == {
        "guide": [(0, own), (1, IN_TRAIL), (2, IN_TRAIL)],
        "kiwi": [(1, TF_MAX | own), (2, IN_TRAIL)],  # 70 in text, capped
        "pear": [(2, 1)],
        "leaf": [(2, own)],
    }
    assert list(analysis.outline.lengths) == [0, 70, 1]
    assert list(analysis.outline.heads) == [1, 1, 1]  # distinct tokens: "Kiwi kiwi" is one
    assert name_list(analysis) == ["guide", "Guide", "kiwi-kiwi", "Kiwi kiwi", "leaf", "Leaf"]


def test_spans_are_bytes_and_sections_decode_on_their_own() -> None:
    valid = "é preamble\n\n# Ünï\n\nçà text\n".encode()
    analysis = analyze(valid)
    assert [analysis.outline.span(i) for i in (0, 1)] == [(0, 13), (21, 32)]  # str: 12, 18, 27
    assert own_texts(valid, analysis) == ["é preamble\n\n", "\nçà text\n"]
    broken = "é\n\n# A\n\n".encode() + b"\xff x\n"
    analysis = analyze(broken)
    assert own_texts(broken, analysis) == ["é\n\n", "\n\ufffd x\n"]


def test_a_batch_is_its_analyses_with_one_block_of_postings() -> None:
    bodies = [b"# A\n\nkiwi pear\n", b"", b"kiwi\n\n## B\n\napple kiwi\n", b"\xff kiwi\n"]
    alone = [analyze(body) for body in bodies]
    analyses, block = analyze_many(bodies)
    assert [a.postings for a in analyses] == [None] * len(bodies)
    base = 0
    merged: dict[str, list[tuple[int, int]]] = {}
    for one, batched in zip(alone, analyses, strict=True):
        assert one.outline == batched.outline and one.facts == batched.facts
        for term, rows in unpack(one.postings).items():
            merged.setdefault(term, []).extend((base + s, f) for s, f in rows)
        base += one.slots  # a document without sections still takes a slot
    assert unpack(block) == merged
    assert unpack(block)["kiwi"] == [(0, 1), (2, 1), (3, 1), (4, 1)]


def test_runs_split_a_long_section_and_combine() -> None:
    words = [f"w{n}" for n in range(3 * RUN_TERMS)]
    body = f"# Big\n\n{' '.join(words)} big big big\n{' '.join(words[:10])}\n".encode()
    analysis = analyze(body)
    assert analysis.postings is not None and len(analysis.postings) > 1
    postings = unpack(analysis.postings)
    assert postings["w0"] == [(0, 2)]  # in the first run and the last, one entry
    assert postings[f"w{3 * RUN_TERMS - 1}"] == [(0, 1)]
    assert postings["big"] == [(0, 3 | IN_TRAIL | IN_HEADING)]
    assert list(analysis.outline.lengths) == [3 * RUN_TERMS + 13]


def test_a_term_of_whole_sections_and_of_a_long_one_has_an_entry_in_each() -> None:
    """A section added whole leaves no way to its entries (``_Found.add_section``): the long
    section after it, whose pieces go in one at a time and combine, and the whole sections
    after that, each have an entry of their own."""
    long = "kiwi pear\n" * 1000  # pieces of 4 KiB: kiwi in each
    body = f"# Alpha\n\nkiwi kiwi\n\n# Beta\n\n{long}\n# Gamma\n\nkiwi\n\n# Delta\n\nkiwi\n"
    postings = unpack(analyze(body.encode()).postings)
    assert postings["kiwi"] == [(0, 2), (1, TF_MAX), (2, 1), (3, 1)]
    assert postings["pear"] == [(1, TF_MAX)]
    assert postings["beta"] == [(1, IN_TRAIL | IN_HEADING)]


def test_many_headings_keep_their_anchors() -> None:
    body = "".join(f"# h{n % 700}\n\nt\n" for n in range(2000)).encode()
    outline = analyze(body).outline
    expected = list(mdoutline.own_sections(body.decode())[1:])
    assert [outline.anchor(i) for i in range(len(outline))] == [s.anchor for s in expected]
    assert [outline.heading(i) for i in range(len(outline))] == [s.heading for s in expected]


LINE = st.lists(
    st.sampled_from(["#", "##", "Kiwi", "pear", "é", "`x`", "---", "> q", "=", "\udcff", " "]),
    max_size=5,
).map(" ".join)


BODY = st.one_of(
    st.lists(LINE, max_size=8).map("\n".join).map(lambda t: t.encode("utf-8", "surrogateescape")),
    st.binary(max_size=200),
)


@settings(max_examples=200, deadline=None)
@given(BODY)
def test_analysis_is_the_kept_sections(body: bytes) -> None:
    analysis = analyze(body)
    decoded = body.decode("utf-8", "replace")
    kept = [s for s in mdoutline.own_sections(decoded) if strip_markup(s.text) or s.heading]
    assert own_texts(body, analysis) == [s.text for s in kept]
    assert name_list(analysis) == [n for s in kept for n in (s.anchor, s.heading)]
    assert len(analysis.outline.lengths) == len(analysis.outline.heads) == len(kept)
    postings = unpack(analysis.postings)
    for rows in postings.values():
        assert rows and all(s < len(kept) and f for s, f in rows)
        assert [s for s, _ in rows] == sorted({s for s, _ in rows})
    assert analysis.postings is not None
    runs = [run.terms.split("\n") for run in analysis.postings if run.terms]
    assert {term for terms in runs for term in terms} == set(postings)


LINKED_LINE = st.lists(
    st.sampled_from(
        [
            "[a][r]",
            "[r]",
            "[R  ]",
            "[x][]",
            "[l](/p.md)",
            "<https://e.com>",
            "https://b.org/y",
            "[[W|w]]",
            "#",
            "##",
            "```",
            "<!--",
            "-->",
            "    ",
            "[r]: /d.md",
            "[x]: /e.md 't'",
            "text",
            "`[c](d)`",
            "- ",
            "\\[r]",
            "é",
        ]
    ),
    max_size=6,
).map(" ".join)
LINKED = st.lists(LINKED_LINE, max_size=12).map(
    lambda lines: ("\n".join(lines) + "\n\n[r]: /d.md\n[X]: /e.md 't'\n").encode()
)
"""Lines of links of every kind, then definitions (a use may also come after its own)."""


@settings(max_examples=300, deadline=None)
@given(LINKED)
def test_links_are_the_extractors_in_the_order_of_the_body(body: bytes) -> None:
    """The analysis matches reference uses only as it packs them, merged by line after the
    other links: still the links ``links.extract`` finds (sorted by line, references after the
    others within a line), packed alike."""
    analysis = analyze(body)
    assert (analysis.links, analysis.link_count) == pack(extract(body))


FACTS_BODY = st.builds(
    lambda front, lines, pad: (front + pad + "\n".join(lines)).encode("utf-8", "surrogateescape"),
    st.sampled_from(["", "---\ntitle: T\ntags: [a, b]\n---\n", "\ufeff", "\ufeff---\nx: y\n---\n"]),
    st.lists(st.sampled_from(["# Title é", "  # Sp", "#No", "text", "\udcff", "## Sub", ""])),
    st.sampled_from(["", "x" * 70_000 + "\n"]),  # past the first piece
)


@settings(max_examples=100, deadline=None)
@given(FACTS_BODY)
def test_facts_from_bytes_are_the_facts_of_the_text(body: bytes) -> None:
    """The catalog's facts read from the bytes a piece at a time equal those of the decoded
    text: the frontmatter fallbacks and the first ``# `` line."""
    assert own_facts(body) == own_facts(body.decode("utf-8", "replace"))


_SECTION = st.tuples(
    st.integers(0, 2**32 - 1),  # its words
    st.integers(0, 255),  # its heading's words
    st.integers(0, 2**32 - 1),  # where its text starts
    st.integers(0, 2**32 - 1),  # its size
    st.text(max_size=6),  # its heading
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_SECTION, max_size=20)
    | st.lists(_SECTION, min_size=255, max_size=700),  # past a block of headings
    st.booleans(),
    st.sampled_from([None, 255, 65_535]),
)
def test_an_outline_gives_back_every_value_it_packs(
    sections: list[tuple[int, int, int, int, str]], preamble: bool, top: int | None
) -> None:
    """Each column goes in its narrowest type and comes back as it was, through the outline
    and through its saved form (its fields, as a saved index holds them)."""
    if top is not None:  # narrow columns too, where most outlines are
        sections = [(a % top, b, c % top, d % top, e) for a, b, c, d, e in sections]
    lengths, heads, starts, sizes = ([row[i] for row in sections] for i in range(4))
    texts = [row[4] for row in sections]
    outline = Outline.pack(
        array("I", lengths),
        array("B", heads),
        (array("I", starts), array("I", sizes), array("I", map(len, texts))),
        "".join(texts),
        preamble,
    )
    saved = Outline(*(getattr(outline, field.name) for field in dataclasses.fields(outline)))
    for got in (outline, saved):
        assert len(got) == len(sections)
        assert list(got.lengths) == lengths and list(got.heads) == heads
        spans = list(map(got.span, range(len(got))))
        assert [start for start, _ in spans] == starts
        assert [end - start for start, end in spans] == sizes
        assert [got.length(i) for i in range(len(got))] == lengths
        assert [got.head(i) for i in range(len(got))] == heads
        assert [got.span(i) for i in range(len(got))] == [
            (start, start + size) for start, size in zip(starts, sizes, strict=True)
        ]
        assert [got.heading(i) for i in range(len(got))] == texts


def test_a_two_section_note_keeps_a_few_small_objects() -> None:
    """The outline of a short note: its packed numbers are one bytes and its ranking counts
    one array, each exactly as long as its values."""
    analysis = analyze(b"# Note\n\nSome words here.\n\n## Links\n\nSee [a](b.md).\n")
    outline = analysis.outline
    assert [outline.heading(i) for i in range(len(outline))] == ["Note", "Links"]
    assert len(outline.packed) == 2 * 3 + 0  # starts, sizes, heading sizes: a byte each
    assert outline.counts.buffer_info()[1] == 4 and outline.counts.typecode == "B"
    assert outline.codes == "BBBB"
