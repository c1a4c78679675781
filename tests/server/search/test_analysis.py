"""Per-document analysis (SPEC §5.7): the sections kept, their names, lengths and spans,
the posting flags, and a batch's one block of postings."""

from __future__ import annotations

import itertools
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import mdoutline
from markproto.protocol.document import own_facts
from markproto.server.search.analysis import (
    FLAG_BITS,
    IN_HEADING,
    IN_TRAIL,
    TF_MAX,
    Analysis,
    Postings,
    analyze,
    analyze_many,
)
from markproto.server.search.text import strip_markup


def name_list(analysis: Analysis) -> list[str]:
    ends = [0, *analysis.name_ends]
    return [analysis.names[a:b] for a, b in itertools.pairwise(ends)]


def unpack(postings: Postings | None) -> dict[str, list[tuple[int, int]]]:
    """term -> ``(section, flags)`` in posting order."""
    assert postings is not None
    terms = postings.terms.split("\n") if postings.terms else []
    starts = itertools.accumulate(postings.counts, initial=0)
    rows = [(entry >> FLAG_BITS, entry & 0xFF) for entry in postings.entries]
    return {
        term: rows[start : start + count]
        for term, start, count in zip(terms, starts, postings.counts, strict=False)
    }


def own_texts(body: bytes, analysis: Analysis) -> list[str]:
    spans = list(analysis.spans)
    cut = [body[start:end] for start, end in zip(spans[0::2], spans[1::2], strict=True)]
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
    assert list(analysis.lengths) == [0, 70, 1]
    assert list(analysis.heads) == [1, 1, 1]  # distinct tokens: "Kiwi kiwi" is one
    assert name_list(analysis) == ["guide", "Guide", "kiwi-kiwi", "Kiwi kiwi", "leaf", "Leaf"]


def test_spans_are_bytes_and_sections_decode_on_their_own() -> None:
    valid = "é preamble\n\n# Ünï\n\nçà text\n".encode()
    analysis = analyze(valid)
    assert list(analysis.spans) == [0, 13, 21, 32]  # in str: 0, 12, 18, 27
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
        assert one.spans == batched.spans and one.names == batched.names
        assert one.lengths == batched.lengths and one.vocab == batched.vocab
        assert one.facts == batched.facts
        for term, rows in unpack(one.postings).items():
            merged.setdefault(term, []).extend((base + s, f) for s, f in rows)
        base += one.slots  # a document without sections still takes a slot
    assert unpack(block) == merged
    assert unpack(block)["kiwi"] == [(0, 1), (2, 1), (3, 1), (4, 1)]


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
    assert len(analysis.lengths) == len(analysis.heads) == len(kept)
    postings = unpack(analysis.postings)
    for rows in postings.values():
        assert rows and all(s < len(kept) and f for s, f in rows)
        assert [s for s, _ in rows] == sorted({s for s, _ in rows})
    vocab = zlib.decompress(analysis.vocab).decode()
    assert sorted(postings) == sorted(vocab.split("\n") if vocab else [])


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
