"""One body cut into the shared mdoutline sections and split into words (protocol.md §10.3-10.4),
as the compact, picklable record the body index applies: the per-document half of indexing.

``analyze`` is a pure function of the body: it touches no index, so it can run in a thread or a
worker process while the event loop serves others, and ``BodyIndex.apply`` only appends its
arrays. Nothing per posting is a Python object: a term's postings are 32-bit entries
``section << 8 | flags`` (sections numbered from 0 within the analysis; the index adds the base
slot it gives them), flags being the term frequency capped at ``TF_MAX``, ``IN_TRAIL`` and
``IN_HEADING``. Stripped text is never kept: a section keeps its span in the body (a snippet is
cut again from there), its word count, its anchor and heading, and the document keeps its
vocabulary, compressed, for removal.

Memory is bounded per section, not per body: sections are cut, stripped and counted one at a
time, so analysing a document costs a few times its size whatever its shape.
"""

from __future__ import annotations

import zlib
from array import array
from collections import Counter
from dataclasses import dataclass

from markproto.protocol import mdoutline
from markproto.server.search.catalog import OwnFacts, own_facts
from markproto.server.search.text import strip_markup, text_words, word_set

__all__ = [
    "FLAG_BITS",
    "IN_HEADING",
    "IN_TRAIL",
    "TF_MAX",
    "Analysis",
    "Postings",
    "analyze",
    "analyze_many",
]

FLAG_BITS = 8
"""Bits below the section slot in a posting entry; the slot has the other 24."""
TF_MAX = 63
IN_TRAIL = 64
IN_HEADING = 128


@dataclass(frozen=True, slots=True)
class Postings:
    """Postings ready to append to an index: for each term (``terms``, newline-joined; a word
    never holds whitespace) ``counts[i]`` entries ``section << 8 | flags``, term after term, each
    term's in section order. Sections are numbered from 0 across everything analysed together."""

    terms: str
    counts: array[int]
    entries: array[int]

    @classmethod
    def pack(cls, found: dict[str, array[int]]) -> Postings:
        counts = array("I", map(len, found.values()))
        entries = array("I")
        for listed in found.values():
            entries += listed
        return cls("\n".join(found), counts, entries)


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything the indexes need from one body."""

    facts: OwnFacts
    spans: array[int]
    """Start and end of each section's own text: byte offsets, or ``str`` offsets when the body
    is not valid UTF-8 (``byte_spans`` False)."""
    byte_spans: bool
    lengths: array[int]
    """Words per section (the BM25 length of its text)."""
    heads: bytes
    """Distinct words of each section's own heading (capped at 255)."""
    names: str
    name_ends: array[int]
    """Anchor, then heading, of each section: item i is ``names[ends[i-1]:ends[i]]``."""
    vocab: bytes
    """The document's terms, newline-joined and compressed: all that removal needs."""
    postings: Postings | None
    """None when the postings travel in a batch's block (``analyze_many``)."""

    @property
    def sections(self) -> int:
        return len(self.lengths)

    @property
    def slots(self) -> int:
        """Index slots the document takes: one per section, and one for a document without
        any, so that every document's first slot is its own."""
        return max(len(self.lengths), 1)


def analyze(body: bytes) -> Analysis:
    """Cut a body into the shared mdoutline sections and split each into words (§10.4)."""
    found: dict[str, array[int]] = {}
    analysis = _analyze(body, found, 0)
    return _with_postings(analysis, Postings.pack(found))


def analyze_many(bodies: list[bytes]) -> tuple[list[Analysis], Postings]:
    """``analyze`` over a batch (the unit of work a bulk build sends to a worker process), with
    the batch's postings in one block, sections numbered on across its documents, so the index
    appends once per term, not per document."""
    found: dict[str, array[int]] = {}
    analyses = []
    base = 0
    for body in bodies:
        analysis = _analyze(body, found, base)
        analyses.append(analysis)
        base += analysis.slots
    return analyses, Postings.pack(found)


def _with_postings(analysis: Analysis, postings: Postings) -> Analysis:
    return Analysis(
        analysis.facts,
        analysis.spans,
        analysis.byte_spans,
        analysis.lengths,
        analysis.heads,
        analysis.names,
        analysis.name_ends,
        analysis.vocab,
        postings,
    )


def _analyze(body: bytes, found: dict[str, array[int]], base: int) -> Analysis:
    """Append this body's postings to ``found`` (sections numbered from ``base``)."""
    try:
        text, valid = body.decode(), True
    except UnicodeDecodeError:
        text, valid = body.decode("utf-8", "replace"), False
    spans, lengths, heads, name_ends = array("I"), array("I"), bytearray(), array("I")
    names: list[str] = []
    mine: set[str] = set()
    heading_words: dict[str, frozenset[str]] = {}
    entry = base << 8
    size = 0
    for start, section in mdoutline.iter_own_sections(text):
        stripped = strip_markup(section.text)
        if not stripped and not section.heading:
            continue
        words = text_words(stripped)
        del stripped
        for term, count in Counter(words).items():
            listed = found.get(term)
            if listed is None:
                listed = found[term] = array("I")
            listed.append(entry | (count if count < TF_MAX else TF_MAX))
            mine.add(term)
        own: frozenset[str] = frozenset()
        for level, heading in enumerate(reversed(section.trail)):
            heading_set = heading_words.get(heading)
            if heading_set is None:
                heading_set = heading_words[heading] = frozenset(word_set((heading,)))
            flag = IN_TRAIL | IN_HEADING if level == 0 else IN_TRAIL
            if level == 0:
                own = heading_set
            for term in heading_set if level == 0 else heading_set - own:
                listed = found.get(term)
                if listed is None:
                    listed = found[term] = array("I")
                if listed and listed[-1] >> 8 == entry >> 8:
                    listed[-1] |= flag
                else:
                    listed.append(entry | flag)
                mine.add(term)
        spans.extend((start, start + len(section.text)))
        lengths.append(len(words))
        heads.append(min(len(own), 255))
        for name in (section.anchor, section.heading):
            names.append(name)
            size += len(name)
            name_ends.append(size)
        entry += 1 << 8
    return Analysis(
        facts=own_facts(text),
        spans=_byte_offsets(text, spans) if valid and not text.isascii() else spans,
        byte_spans=valid,
        lengths=lengths,
        heads=bytes(heads),
        names="".join(names),
        name_ends=name_ends,
        vocab=zlib.compress("\n".join(sorted(mine)).encode(), 1),
        postings=None,
    )


def _byte_offsets(text: str, offsets: array[int]) -> array[int]:
    """Ascending ``str`` offsets as UTF-8 byte offsets, in one pass."""
    out = array("I")
    done = position = 0
    for offset in offsets:
        position += len(text[done:offset].encode())
        done = offset
        out.append(position)
    return out
