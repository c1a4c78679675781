"""Per-document analysis (SPEC §5.7): the sections kept, their names, lengths and spans,
the posting flags, and a batch's one block of postings."""

from __future__ import annotations

import itertools
import zlib
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import mdoutline
from markproto.server.search.analysis import (
    DOC_SHIFT,
    IN_HEADING,
    IN_TRAIL,
    TF_MAX,
    Analysis,
    Postings,
    analyze,
    analyze_many,
)
from markproto.server.search.text import strip_markup

NO_POSTINGS = Postings("", array("I"), array("Q"), b"")


def name_list(analysis: Analysis) -> list[str]:
    ends = [0, *analysis.name_ends]
    return [analysis.names[a:b] for a, b in itertools.pairwise(ends)]


def unpack(postings: Postings) -> dict[str, list[tuple[int, int, int]]]:
    """term -> ``(document, section, flags)`` in posting order."""
    terms = postings.terms.split("\n") if postings.terms else []
    starts = itertools.accumulate(postings.counts, initial=0)
    rows = [
        (key >> DOC_SHIFT, key & ((1 << DOC_SHIFT) - 1), flags)
        for key, flags in zip(postings.keys, postings.flags, strict=True)
    ]
    return {
        term: rows[start : start + count]
        for term, start, count in zip(terms, starts, postings.counts, strict=False)
    }


def own_texts(body: bytes, analysis: Analysis) -> list[str]:
    text = body if analysis.byte_spans else body.decode("utf-8", "replace")
    spans = list(analysis.spans)
    cut = [text[start:end] for start, end in zip(spans[0::2], spans[1::2], strict=True)]
    return [c.decode() if isinstance(c, bytes) else c for c in cut]


def test_blank_bodies_and_frontmatter() -> None:
    assert len(analyze(b"", 0).lengths) == 0
    assert len(analyze(b"  \n\n", 0).lengths) == 0
    analysis = analyze(b"---\ntitle: secretword\n---\nvisible\n", 0)
    assert len(analysis.lengths) == 1
    assert analysis.postings.terms.split("\n") == ["visible"]  # its own metadata is not body


def test_flags_frequency_and_headings() -> None:
    body = b"# Guide\n\n## Kiwi kiwi\n\n" + b"kiwi " * 70 + b"\n\n### Leaf\n\npear\n"
    analysis = analyze(body, 3)
    own = IN_TRAIL | IN_HEADING
    assert unpack(analysis.postings) == {
        "guide": [(3, 0, own), (3, 1, IN_TRAIL), (3, 2, IN_TRAIL)],
        "kiwi": [(3, 1, TF_MAX | own), (3, 2, IN_TRAIL)],  # 70 in text, capped
        "pear": [(3, 2, 1)],
        "leaf": [(3, 2, own)],
    }
    assert list(analysis.lengths) == [0, 70, 1]
    assert list(analysis.heads) == [1, 1, 1]  # distinct tokens: "Kiwi kiwi" is one
    assert name_list(analysis) == ["guide", "Guide", "kiwi-kiwi", "Kiwi kiwi", "leaf", "Leaf"]


def test_spans_are_bytes_of_valid_utf8_and_str_offsets_otherwise() -> None:
    valid = "é preamble\n\n# Ünï\n\nçà text\n".encode()
    analysis = analyze(valid, 0)
    assert analysis.byte_spans
    assert list(analysis.spans) == [0, 13, 21, 32]  # in str: 0, 12, 18, 27
    assert own_texts(valid, analysis) == ["é preamble\n\n", "\nçà text\n"]
    broken = "é\n\n# A\n\n".encode() + b"\xff x\n"
    analysis = analyze(broken, 0)
    assert not analysis.byte_spans
    assert own_texts(broken, analysis) == ["é\n\n", "\n\ufffd x\n"]


def test_a_batch_is_its_analyses_with_one_block_of_postings() -> None:
    bodies = [b"# A\n\nkiwi pear\n", b"", b"kiwi\n\n## B\n\napple kiwi\n", b"\xff kiwi\n"]
    alone = [analyze(body, doc_id) for doc_id, body in enumerate(bodies, start=5)]
    analyses, block = analyze_many([(body, d) for d, body in enumerate(bodies, start=5)])
    assert [a.postings for a in analyses] == [NO_POSTINGS] * len(bodies)
    assert [a.doc_id for a in analyses] == [5, 6, 7, 8]
    for one, batched in zip(alone, analyses, strict=True):
        assert one.spans == batched.spans and one.names == batched.names
        assert one.lengths == batched.lengths and one.vocab == batched.vocab
        assert one.facts == batched.facts
    merged: dict[str, list[tuple[int, int, int]]] = {}
    for one in alone:
        for term, rows in unpack(one.postings).items():
            merged.setdefault(term, []).extend(rows)
    assert unpack(block) == merged
    assert unpack(block)["kiwi"] == [(5, 0, 1), (7, 0, 1), (7, 1, 1), (8, 0, 1)]


LINE = st.lists(
    st.sampled_from(["#", "##", "Kiwi", "pear", "é", "`x`", "---", "> q", "=", "\udcff", " "]),
    max_size=5,
).map(" ".join)


BODY = st.one_of(
    st.lists(LINE, max_size=8).map("\n".join).map(lambda t: t.encode("utf-8", "surrogateescape")),
    st.binary(max_size=200),
)


@settings(max_examples=200, deadline=None)
@given(BODY, st.integers(0, 1000))
def test_analysis_is_the_kept_sections(body: bytes, doc_id: int) -> None:
    analysis = analyze(body, doc_id)
    decoded = body.decode("utf-8", "replace")
    kept = [s for s in mdoutline.own_sections(decoded) if strip_markup(s.text) or s.heading]
    assert own_texts(body, analysis) == [s.text for s in kept]
    assert name_list(analysis) == [n for s in kept for n in (s.anchor, s.heading)]
    assert len(analysis.lengths) == len(analysis.heads) == len(kept)
    postings = unpack(analysis.postings)
    for rows in postings.values():
        assert rows and all(d == doc_id and s < len(kept) and f for d, s, f in rows)
        assert [s for _, s, _ in rows] == sorted({s for _, s, _ in rows})
    vocab = zlib.decompress(analysis.vocab).decode()
    assert sorted(postings) == sorted(vocab.split("\n") if vocab else [])
