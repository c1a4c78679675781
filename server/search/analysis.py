"""One body cut into the shared mdoutline sections and split into words (docs/SPEC.md §5.7, body
mode), as the compact, picklable record the body index applies: the per-document half of
indexing.

``analyze`` is a pure function of the body: it touches no index, so it can run in a thread or a
worker process while the event loop serves others, and ``BodyIndex.apply`` only appends its
arrays. Nothing per posting is a Python object: a term's postings are 32-bit entries
``section << 8 | flags`` (sections numbered from 0 within the analysis; the index adds the base
slot it gives them), flags being the term frequency capped at ``TF_MAX``, ``IN_TRAIL`` and
``IN_HEADING``. Stripped text is never kept: a section keeps its span in the body (a snippet is
cut again from there), its word count, its anchor and heading, and the document keeps its
vocabulary, compressed, for removal. The same pass finds the document's links
(``protocol.links.Extractor``), packed for the link index: one parse feeds both indexes.

Transient memory is bounded per piece, not per body: the body is never decoded whole (the heading
parse reads it a line-aligned piece at a time, each section is decoded on its own), and sections
are cut, stripped and counted one at a time (long ones a piece at a time). What stays is per
distinct word and per heading: their strings, while the document is analysed.
"""

from __future__ import annotations

import dataclasses
import zlib
from array import array
from collections import Counter
from dataclasses import dataclass
from itertools import accumulate

from markproto.protocol import mdoutline
from markproto.protocol.document import OwnFacts, own_facts
from markproto.protocol.links import Extractor
from markproto.server.search.links import pack
from markproto.server.search.text import name_length, strip_markup, text_words, word_set

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


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything the indexes need from one body."""

    facts: OwnFacts
    spans: array[int]
    """Start and end of each section's own text, in bytes (a section decodes on its own)."""
    lengths: array[int]
    """Words per section (the BM25 length of its text)."""
    heads: bytes
    """Distinct words of each section's own heading, its attribute block aside (``name_length``;
    capped at 255)."""
    names: str
    name_ends: array[int]
    """Anchor, then heading, of each section: item i is ``names[ends[i-1]:ends[i]]``."""
    vocab: bytes
    """The document's terms, newline-joined and compressed: all that removal needs."""
    links: bytes
    """The document's links, packed (``links.pack``): what the link index keeps."""
    link_count: int
    ids: str
    """The ids HTML elements of the body set, newline-joined (anchors besides the headings')."""
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
    """Cut a body into the shared mdoutline sections and split each into words (SPEC §5.7)."""
    found = _Found()
    return dataclasses.replace(_analyze(body, found, 0), postings=found.pack())


def analyze_many(bodies: list[bytes]) -> tuple[list[Analysis], Postings]:
    """``analyze`` over a batch (the unit of work a bulk build sends to a worker process), with
    the batch's postings in one block, sections numbered on across its documents, so the index
    appends once per term, not per document."""
    found = _Found()
    analyses = []
    base = 0
    for body in bodies:
        analysis = _analyze(body, found, base)
        analyses.append(analysis)
        base += analysis.slots
    return analyses, found.pack()


class _Found:
    """Postings as they are found: one entry array and, beside it, each entry's term number,
    so a term costs its string and a few array items, not an array of its own."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.of = array("I")
        """The term number of each entry."""
        self.entries = array("I")
        self.last = array("i")
        """Per term number, the index of its latest entry."""
        self.seen = array("i")
        """Per term number, the latest document (``begin``'s count) that holds it."""
        self.documents = 0
        self.vocab: list[str] = []

    def begin(self) -> None:
        """A new document: ``vocab`` collects its terms."""
        self.documents += 1
        self.vocab = []

    def add_text(self, counts: Counter[str], entry: int) -> None:
        """One section's text words: a new entry per term (the section's first for each)."""
        ids, last, seen, entries, of, vocab = (
            self.ids,
            self.last,
            self.seen,
            self.entries,
            self.of,
            self.vocab,
        )
        document = self.documents
        for term, count in counts.items():
            number = ids.get(term)
            if number is None:
                number = ids[term] = len(last)
                last.append(-1)
                seen.append(0)
            if seen[number] != document:
                seen[number] = document
                vocab.append(term)
            last[number] = len(entries)
            entries.append(entry | (count if count < TF_MAX else TF_MAX))
            of.append(number)

    def add(self, term: str, entry: int) -> None:
        """Record ``entry`` for ``term``, or-ing its flags into the term's latest entry when that
        one is for the same section."""
        number = self.ids.get(term)
        if number is None:
            number = self.ids[term] = len(self.last)
            self.last.append(-1)
            self.seen.append(0)
        if self.seen[number] != self.documents:
            self.seen[number] = self.documents
            self.vocab.append(term)
        at = self.last[number]
        if at >= 0 and self.entries[at] >> FLAG_BITS == entry >> FLAG_BITS:
            self.entries[at] |= entry
            return
        self.last[number] = len(self.entries)
        self.entries.append(entry)
        self.of.append(number)

    def pack(self) -> Postings:
        """Entries grouped by term (a counting sort: each term's stay in section order)."""
        counts = array("I", bytes(4 * len(self.last)))
        for number in self.of:
            counts[number] += 1
        places = array("I", accumulate(counts, initial=0))
        out = array("I", bytes(4 * len(self.entries)))
        for number, entry in zip(self.of, self.entries, strict=True):
            out[places[number]] = entry
            places[number] += 1
        return Postings("\n".join(self.ids), counts, out)


_PIECE = 1 << 14
"""Characters of a section's text stripped and split at a time: markup stripping works line by
line, so line-aligned pieces give the same words, and a long section's words are never all
held as strings at once."""


def _words(text: str) -> tuple[Counter[str], int, bool]:
    """The word counts of a section's raw text, its length, and whether its stripped text is
    non-empty."""
    counts: Counter[str] = Counter()
    length, has_text, start = 0, False, 0
    while start < len(text):
        stop = len(text) if len(text) - start <= _PIECE else text.find("\n", start + _PIECE) + 1
        stripped = strip_markup(text[start : stop or len(text)])
        has_text = has_text or bool(stripped)
        words = text_words(stripped)
        length += len(words)
        counts.update(words)
        start = stop or len(text)
    return counts, length, has_text


def _analyze(body: bytes, found: _Found, base: int) -> Analysis:
    """Add this body's postings to ``found`` (sections numbered from ``base``)."""
    spans, lengths, heads, name_ends = array("I"), array("I"), bytearray(), array("I")
    names: list[str] = []
    heading_words: dict[str, frozenset[str]] = {}
    """The word sets of the current trail's headings (only those: a body may have 100k)."""
    entry = base << FLAG_BITS
    size = 0
    found.begin()
    linked = Extractor(body)
    for start, stop, section in mdoutline.iter_own_sections(body):
        linked.section(start, stop, section)
        counts, length, has_text = _words(section.text)
        if not has_text and not section.heading:
            continue
        found.add_text(counts, entry)
        del counts
        heading_words = {
            heading: heading_words.get(heading) or frozenset(word_set((heading,)))
            for heading in section.trail
        }
        own: frozenset[str] = frozenset()
        for level, heading in enumerate(reversed(section.trail)):
            if level == 0:
                own = heading_words[heading]
                for term in own:
                    found.add(term, entry | IN_TRAIL | IN_HEADING)
            else:
                for term in heading_words[heading] - own:
                    found.add(term, entry | IN_TRAIL)
        spans.extend((start, stop))
        lengths.append(length)
        heads.append(min(name_length((section.heading,), own), 255))
        for name in (section.anchor, section.heading):
            names.append(name)
            size += len(name)
            name_ends.append(size)
        entry += 1 << FLAG_BITS
    packed, link_count = pack(linked.links())
    return Analysis(
        facts=own_facts(body),
        spans=spans,
        lengths=lengths,
        heads=bytes(heads),
        names="".join(names),
        name_ends=name_ends,
        vocab=zlib.compress("\n".join(sorted(found.vocab)).encode(), 1),
        links=packed,
        link_count=link_count,
        ids="\n".join(i for i in linked.ids if "\n" not in i),
        postings=None,
    )
