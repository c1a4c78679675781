"""One body cut into the shared mdoutline sections and tokenized (docs/SPEC.md §5.7, body mode),
as the compact, picklable record the body index is built from: the per-document half of
indexing, the part a bulk build runs in worker processes.

Nothing per posting is a Python object: a section is a key ``document << DOC_SHIFT | section``,
and a term's postings are such keys in an ``array('Q')`` beside a byte of flags each (term
frequency capped at ``TF_MAX``, ``IN_TRAIL``, ``IN_HEADING``). Stripped text is never kept:
a section keeps its span in the body (a snippet is cut again from there), its token count, its
anchor and heading, and the document keeps its vocabulary, compressed, for removal.
"""

from __future__ import annotations

import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import chain, repeat
from operator import and_, rshift

from markproto.protocol import mdoutline
from markproto.protocol.document import OwnFacts, own_facts
from markproto.server.search.text import strip_markup, text_tokens, token_set

__all__ = [
    "DOC_SHIFT",
    "IN_HEADING",
    "IN_TRAIL",
    "TF_MAX",
    "Analysis",
    "Postings",
    "analyze",
    "analyze_many",
]

DOC_SHIFT = 20
"""Bits below the document id in a section key: a 1 MiB body has fewer than 2**19 headings."""
TF_MAX = 63
IN_TRAIL = 64
IN_HEADING = 128


@dataclass(frozen=True, slots=True)
class Postings:
    """Postings ready to append to an index: for each term (``terms``, newline-joined; a token
    never holds whitespace) ``counts[i]`` section keys and their flags, term after term, each
    term's in document order."""

    terms: str
    counts: array[int]
    keys: array[int]
    flags: bytes

    @classmethod
    def pack(cls, entries: Mapping[str, list[int]]) -> Postings:
        """From term -> ``key << 8 | flags`` entries (the packing is all C-level)."""
        flat = list(chain.from_iterable(entries.values()))
        return cls(
            "\n".join(entries),
            array("I", map(len, entries.values())),
            array("Q", map(rshift, flat, repeat(8))),
            bytes(map(and_, flat, repeat(0xFF))),
        )


_EMPTY = Postings("", array("I"), array("Q"), b"")


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything the indexes need from one body, for the document id it will be indexed under
    (``BodyIndex.reserve``)."""

    doc_id: int
    facts: OwnFacts
    spans: array[int]
    """Start and end of each section's own text: byte offsets, or ``str`` offsets when the body
    is not valid UTF-8 (``byte_spans`` False)."""
    byte_spans: bool
    lengths: array[int]
    """Tokens per section (the BM25 length)."""
    heads: array[int]
    """Distinct tokens of each section's own heading (capped at 255)."""
    names: str
    name_ends: array[int]
    """Anchor, then heading, of each section: item i is ``names[ends[i-1]:ends[i]]``."""
    vocab: bytes
    """The document's terms, newline-joined and compressed: all that removal needs."""
    postings: Postings
    """Empty when the postings travel in a batch's block (``analyze_many``)."""


def analyze(body: bytes, doc_id: int) -> Analysis:
    """Cut a body into the shared mdoutline sections and tokenize each (SPEC §5.7)."""
    return _analyze(body, doc_id, Postings.pack)[0]


def analyze_many(jobs: list[tuple[bytes, int]]) -> tuple[list[Analysis], Postings]:
    """``analyze`` over a batch (the unit of work a bulk build sends to a worker process), with
    the batch's postings in one block, so the index appends once per term, not per document."""
    merged: dict[str, list[int]] = {}
    analyses = []
    for body, doc_id in jobs:
        analysis, entries = _analyze(body, doc_id, lambda _: _EMPTY)
        analyses.append(analysis)
        for term, found in entries.items():
            merged.setdefault(term, []).extend(found)
    return analyses, Postings.pack(merged)


def _analyze(
    body: bytes, doc_id: int, pack: Callable[[dict[str, list[int]]], Postings]
) -> tuple[Analysis, dict[str, list[int]]]:
    try:
        text, valid = body.decode(), True
    except UnicodeDecodeError:
        text, valid = body.decode("utf-8", "replace"), False
    _, content_start = mdoutline.split_frontmatter(text)
    found = mdoutline.headings(text)
    spans, lengths, heads, name_ends = array("I"), array("I"), array("B"), array("I")
    names: list[str] = []
    entries: dict[str, list[int]] = {}
    heading_tokens: dict[str, frozenset[str]] = {}
    key = doc_id << DOC_SHIFT
    size = 0
    for index, section in enumerate(mdoutline.own_sections(text)):
        stripped = strip_markup(section.text)
        if not stripped and not section.heading:
            continue
        tokens = text_tokens(stripped)
        base = key << 8
        for term, count in Counter(tokens).items():
            entry = base | (count if count < TF_MAX else TF_MAX)
            listed = entries.get(term)
            if listed is None:
                entries[term] = [entry]
            else:
                listed.append(entry)
        own: frozenset[str] = frozenset()
        for level, heading in enumerate(reversed(section.trail)):
            found_tokens = heading_tokens.get(heading)
            if found_tokens is None:
                found_tokens = heading_tokens[heading] = frozenset(token_set((heading,)))
            flag = IN_TRAIL | IN_HEADING if level == 0 else IN_TRAIL
            own = found_tokens if level == 0 else own
            for term in found_tokens if level == 0 else found_tokens - own:
                listed = entries.setdefault(term, [])
                if listed and listed[-1] >> 8 == key:
                    listed[-1] |= flag
                else:
                    listed.append(base | flag)
        start = content_start if index == 0 else found[index - 1].line_end
        spans.extend((start, start + len(section.text)))
        lengths.append(len(tokens))
        heads.append(min(len(own), 255))
        for name in (section.anchor, section.heading):
            names.append(name)
            size += len(name)
            name_ends.append(size)
        key += 1
    analysis = Analysis(
        doc_id=doc_id,
        facts=own_facts(text),
        spans=_byte_offsets(text, spans) if valid and not text.isascii() else spans,
        byte_spans=valid,
        lengths=lengths,
        heads=heads,
        names="".join(names),
        name_ends=name_ends,
        vocab=zlib.compress("\n".join(entries).encode(), 1),
        postings=pack(entries),
    )
    return analysis, entries


def _byte_offsets(text: str, offsets: array[int]) -> array[int]:
    """Ascending ``str`` offsets as UTF-8 byte offsets, in one pass."""
    out = array("I")
    done = position = 0
    for offset in offsets:
        position += len(text[done:offset].encode())
        done = offset
        out.append(position)
    return out
