"""One body cut into the shared mdoutline sections and split into words (docs/SPEC.md §5.7, body
mode), as the compact, picklable record the body index applies: the per-document half of
indexing.

``analyze`` is a pure function of the body: it touches no index, so it can run in a thread or a
worker process while the event loop serves others, and ``BodyIndex.apply`` only appends its
arrays. Nothing per posting is a Python object: a term's postings are 32-bit entries
``section << 8 | flags`` (sections numbered from 0 within the analysis; the index adds the base
slot it gives them), flags being the term frequency capped at ``TF_MAX``, ``IN_TRAIL`` and
``IN_HEADING``. Stripped text is never kept: a section keeps its span in the body (a snippet is
cut again from there), its word count and its heading; its anchor is its heading's slug but
where the dedupe gave it a suffix. Nothing else is kept that the body can give again: removal
analyses the old body again for its terms. The same pass finds the document's links
(``protocol.links.Extractor``), packed for the link index: one parse feeds both indexes.

Transient memory is bounded by pieces, not by the body, whatever its shape: the body is never
decoded whole (the heading parse streams line-aligned pieces of it, and a section's text is
decoded, stripped and split 16 KiB at a time), headings are handled one at a time as the parse
gives them, and postings gather in runs of at most ``RUN_TERMS`` distinct terms (each run packed
into three flat arrays before the next starts), so a document of 100k headings or 50k distinct
words never holds that many strings at once.
"""

from __future__ import annotations

import dataclasses
import heapq
import sys
from array import array
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import accumulate, compress, count, islice, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Literal, cast, overload

from markproto.protocol.linkkinds import Link
from markproto.server.search.links import pack_tails, tail
from markproto.server.search.text import line_cut, name_length, prose_counts, word_set

if TYPE_CHECKING:
    from markproto.protocol import mdoutline
    from markproto.protocol.document import OwnFacts

# mdoutline, document and links are imported where a body is first analysed (``_analyze``) or an
# anchor first made: a server holding no document yet never loads their parsers and patterns.

__all__ = [
    "FLAG_BITS",
    "IN_HEADING",
    "IN_TRAIL",
    "RUN_TERMS",
    "TF_MAX",
    "Analysis",
    "Outline",
    "Postings",
    "analyze",
    "analyze_many",
    "narrow",
]

FLAG_BITS = 8
"""Bits below the section slot in a posting entry; the slot has the other 24."""
TF_MAX = 63
IN_TRAIL = 64
IN_HEADING = 128
RUN_TERMS = 2048
"""Distinct terms gathered before they are packed into a run of postings."""

_LIMITS = (("B", 0xFF), ("H", 0xFFFF), ("I", 0xFFFFFFFF))


def narrow(values: array[int]) -> array[int]:
    """``values`` in the smallest unsigned array type that holds them all (word counts, posting
    counts: mostly small)."""
    top = max(values, default=0)
    code = next(code for code, limit in _LIMITS if top <= limit)
    return values if values.typecode == code else array(code, values)


@dataclass(frozen=True, slots=True)
class Postings:
    """One run of postings, ready to append to an index: for each term (``terms``,
    newline-joined; a word never holds whitespace) ``counts[i]`` entries ``section << 8 |
    flags``, term after term, each term's in section order. Sections are numbered from 0
    across everything analysed together. A term may be in several runs, later runs holding
    later sections, and a section split between two runs (a long one) has an entry in each,
    to be combined (``combine``)."""

    terms: str
    counts: array[int]
    entries: array[int]


def combine(first: int, second: int) -> int:
    """One entry from two of the same section: frequencies added (capped), flags or-ed."""
    tf = min((first & TF_MAX) + (second & TF_MAX), TF_MAX)
    return (first | second) & ~TF_MAX | tf


_NO_SUFFIXES = array("I")
"""The suffixes of every outline that has none: never appended to (``_analyze`` gathers them
in arrays of its own and makes the outline again)."""


_WIDTHS = {code: array(code).itemsize for code in "BHI"}
_BLOCK_SHIFT = 8
_BLOCK = 1 << _BLOCK_SHIFT
"""Headings a block of an outline's heading texts spans: finding a heading sums at most this
many sizes."""


@cache
def _offsets(codes: str) -> tuple[int, ...]:
    """Where each packed column of an outline of ``codes`` starts, per section (at most 3^4
    shapes)."""
    return tuple(accumulate(map(_WIDTHS.__getitem__, codes), initial=0))


@dataclass(frozen=True, slots=True)
class Outline:
    """What the index keeps of a document's sections: for each, where its own text is, its word
    count, its heading's word count, its heading and its anchor.

    A few objects whatever the number of sections, each number in the narrowest unsigned type
    that holds its column: a note of two sections keeps about 250 bytes, where an array a
    column and a tuple of heading parts were 600."""

    counts: array[int]
    """What ranking reads, in one array: each section's words (the BM25 length of its text),
    then each one's own heading's distinct words (capped at 255)."""
    packed: bytes
    """What a shown row reads, column after column: where each section's own text starts, in
    bytes (a section decodes on its own); that text's size; its heading text's length; then,
    for each block of ``_BLOCK`` headings after the first, the length of the heading texts
    before it."""
    codes: str
    """Each packed column's array type code (one string shared by every outline of a shape)."""
    headings: str
    """The sections' heading texts ("" for the preamble), concatenated."""
    preamble: bool
    """Whether section 0 is the preamble (its anchor is "", not a heading's)."""
    suffixed: array[int]
    """The sections whose anchor has a dedupe suffix, ascending, and ``suffixes`` theirs."""
    suffixes: array[int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "codes", sys.intern(self.codes))  # also a restored outline's
        if not self.suffixed:  # most documents: one shared pair, not two arrays (160 bytes)
            object.__setattr__(self, "suffixed", _NO_SUFFIXES)
            object.__setattr__(self, "suffixes", _NO_SUFFIXES)

    @classmethod
    def pack(
        cls,
        lengths: array[int],
        heads: array[int],
        columns: Sequence[array[int]],
        headings: str,
        preamble: bool,
    ) -> Outline:
        """The outline of these per-section values (``columns``: starts, sizes and heading
        sizes; the blocks are made here from the heading sizes)."""
        words = narrow(lengths)
        counts = words + array(words.typecode, heads)  # a new array: sized exactly
        del words
        sizes, blocks, before = columns[2], array("I"), 0
        for block in range(_BLOCK, len(sizes), _BLOCK):
            before += sum(sizes[block - _BLOCK : block])
            blocks.append(before)
        narrowed = [narrow(column) for column in (*columns, blocks)]
        codes = "".join(column.typecode for column in narrowed)
        packed = b"".join(narrowed)
        return cls(counts, packed, codes, headings, preamble, _NO_SUFFIXES, _NO_SUFFIXES)

    def __len__(self) -> int:
        return len(self.counts) >> 1

    @property
    def lengths(self) -> array[int]:
        return self.counts[: len(self)]

    @property
    def heads(self) -> array[int]:
        return self.counts[len(self) :]

    def length(self, section: int) -> int:
        return self.counts[section]

    def head(self, section: int) -> int:
        return self.counts[(len(self.counts) >> 1) + section]

    def _place(self, number: int) -> tuple[int, int]:
        """Where packed column ``number`` (0-3, as ``packed``) starts, and its values' width."""
        offsets = _offsets(self.codes)
        return (len(self.counts) >> 1) * offsets[number], offsets[number + 1] - offsets[number]

    def _column(self, number: int, first: int, stop: int) -> Sequence[int]:
        """Values ``first`` to ``stop`` of packed column ``number`` (0-2)."""
        start, width = self._place(number)
        if width == 1:  # bytes are their own values: no view
            return self.packed[start + first : start + stop]
        view = memoryview(self.packed)[start + first * width : start + stop * width]
        return view.cast(cast(Literal["H", "I"], self.codes[number]))

    def _value(self, number: int, index: int) -> int:
        """Value ``index`` of packed column ``number`` without a view (a shown row reads a
        few)."""
        start, width = self._place(number)
        at = start + index * width
        if width == 1:
            return self.packed[at]
        return int.from_bytes(self.packed[at : at + width], sys.byteorder)

    @property
    def heading_sizes(self) -> Sequence[int]:
        return self._column(2, 0, len(self))

    def heading(self, section: int) -> str:
        block = section >> _BLOCK_SHIFT
        sizes = self._column(2, block << _BLOCK_SHIFT, section + 1)  # the block's, to this one
        start = sum(sizes[:-1]) + (self._value(3, block - 1) if block else 0)
        return self.headings[start : start + sizes[-1]]

    def anchor(self, section: int, heading: str | None = None) -> str:
        """The section's anchor (``heading``: its heading text, when the caller has it)."""
        if section == 0 and self.preamble:
            return ""
        at = bisect_left(self.suffixed, section)
        found = at < len(self.suffixed) and self.suffixed[at] == section
        # the module itself, not a name from it: a from-import of a package's module runs
        # importlib's Python code at every call, this one is a lookup in sys.modules
        import markproto.protocol.mdoutline as mdoutline

        text = self.heading(section) if heading is None else heading
        return mdoutline.anchor(text, self.suffixes[at] if found else 0)

    def span(self, section: int) -> tuple[int, int]:
        """Where the section's own text starts and ends in the body."""
        start = self._value(0, section)
        return start, start + self._value(1, section)


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything the indexes need from one body."""

    facts: OwnFacts
    outline: Outline
    links: bytes
    """The document's links, packed (``links.pack``): what the link index keeps."""
    link_count: int
    ids: str
    """The ids HTML elements of the body set, newline-joined (anchors besides the headings')."""
    postings: tuple[Postings, ...] | None
    """None when the postings travel in a batch's runs (``analyze_many``)."""

    @property
    def sections(self) -> int:
        return len(self.outline)

    @property
    def slots(self) -> int:
        """Index slots the document takes: one per section, and one for a document without
        any, so that every document's first slot is its own."""
        return max(len(self.outline), 1)


def analyze(body: bytes) -> Analysis:
    """Cut a body into the shared mdoutline sections and split each into words (SPEC §5.7)."""
    found = _Found()
    return dataclasses.replace(_analyze(body, found, 0), postings=found.finish())


def analyze_many(bodies: list[bytes]) -> tuple[list[Analysis], tuple[Postings, ...]]:
    """``analyze`` over a batch (the unit of work a bulk build sends to a worker process), with
    the batch's postings in one set of runs, sections numbered on across its documents, so the
    index appends once per term and run, not per document."""
    found = _Found()
    analyses = []
    base = 0
    for body in bodies:
        analysis = _analyze(body, found, base)
        analyses.append(analysis)
        base += analysis.slots
    return analyses, found.finish()


class _Found:
    """Postings as they are found: one entry array and, beside it, each entry's term number,
    so a term costs its string and a few array items, not an array of its own; packed into a
    run whenever ``RUN_TERMS`` distinct terms are held. A section's first terms are appended
    in C (none can have an entry for it yet); later pieces of its text and its heading's words
    merge into its entries, found by each term's latest entry (``last``)."""

    def __init__(self) -> None:
        self.runs: list[Postings] = []
        self._start()

    def _start(self) -> None:
        self.ids: dict[str, int] = {}
        self.of = array("I")
        """The term number of each entry."""
        self.entries = array("I")
        self.last = array("i")
        """Per term number, the index of its latest entry."""
        self.section = -1
        """The section of the latest entry."""

    def _room(self, terms: int, entry: int, hot: Iterable[str] = ()) -> bool:
        """Whether ``entry``'s section has no entry in the run yet, a run packed first if
        ``terms`` more would pass ``RUN_TERMS``. The terms of ``hot`` the run holds stay in it
        when it is packed, where they are at most half of it: a long section's pieces share
        many words, which every run would repeat otherwise."""
        if len(self.ids) + terms > RUN_TERMS and self.ids:
            kept = [term for term in hot if term in self.ids]
            if kept and len(kept) <= RUN_TERMS // 2 and len(self.ids) <= 2 * RUN_TERMS:
                self.runs.append(self._pack_but(kept))
            else:
                self.runs.append(self._pack())
                self._start()
        section, self.section = self.section, entry >> FLAG_BITS
        return section != self.section

    def _numbers(self, terms: Iterable[str]) -> list[int]:
        """Each term's number, a new term given the next one (and no latest entry)."""
        ids = self.ids
        numbers = list(map(ids.setdefault, terms, map(len, repeat(ids))))
        if len(ids) > len(self.last):
            self.last.frombytes(b"\xff" * (4 * (len(ids) - len(self.last))))  # -1 each
        return numbers

    def _append(self, numbers: list[int], entries: Iterable[int]) -> None:
        """New entries for ``numbers``, which have none for their section."""
        first = len(self.entries)
        self.entries.extend(entries)
        self.of.extend(numbers)
        deque(map(self.last.__setitem__, numbers, range(first, len(self.entries))), maxlen=0)

    def add_text(self, counts: dict[str, int], entry: int) -> None:
        """One piece of a section's text: each term's count added to its entry for the section.
        Only its terms new to the run count against ``RUN_TERMS``: a long section's pieces
        share most of their words, and a run packed early would repeat them all."""
        fresh = self._room(len(counts) - sum(map(self.ids.__contains__, counts)), entry, counts)
        numbers = self._numbers(counts)
        tfs: Iterable[int] = counts.values()
        if counts and max(tfs) > TF_MAX:
            tfs = map(min, tfs, repeat(TF_MAX))
        if fresh:
            self._append(numbers, map(entry.__or__, tfs))
            return
        last, entries, of = self.last, self.entries, self.of
        section = entry >> FLAG_BITS
        for number, tf in zip(numbers, tfs, strict=True):
            at = last[number]
            if at >= 0 and entries[at] >> FLAG_BITS == section:
                entries[at] = combine(entries[at], tf)
                continue
            last[number] = len(entries)
            entries.append(entry | tf)
            of.append(number)

    def fits(self, terms: int) -> bool:
        """Whether ``terms`` more terms leave the run within ``RUN_TERMS``."""
        return len(self.ids) + terms <= RUN_TERMS

    def add_section(self, values: dict[str, int], entry: int) -> None:
        """A whole section at once, none of it added before and its terms ``fits``: each
        term's flags and frequency (capped), or-ed into ``entry``. Nothing is added to the
        section after, so its entries are never looked up again and ``last`` is left as it
        was: a later section's term finds there an entry of an earlier section, as when it
        has none of its own yet."""
        self._room(len(values), entry)
        self.of.extend(self._numbers(values))
        self.entries.extend(map(entry.__or__, values.values()))

    def add(self, terms: frozenset[str] | set[str], entry: int) -> None:
        """Or ``entry``'s flags into each term's entry for its section."""
        fresh = self._room(len(terms), entry)
        numbers = self._numbers(terms)
        if fresh:
            self._append(numbers, repeat(entry, len(numbers)))
            return
        last, entries, of = self.last, self.entries, self.of
        section = entry >> FLAG_BITS
        for number in numbers:
            at = last[number]
            if at >= 0 and entries[at] >> FLAG_BITS == section:
                entries[at] |= entry
                continue
            last[number] = len(entries)
            entries.append(entry)
            of.append(number)

    def _pack(self, held: bytearray | None = None) -> Postings:
        """Entries grouped by term (a counting sort: each term's stay in section order), in C
        for a run of a few thousand terms (a dict and an iterator a term), else in arrays;
        the terms ``held`` marks (by number) left out."""
        of, entries, terms = self.of, self.entries, len(self.ids)
        names: Iterable[str] = self.ids
        if held is not None:  # the ids are in the order of their numbers
            names = compress(self.ids, map((1).__xor__, held))
        if len(entries) == terms:
            # one entry a term (a long section's run, or sections of distinct words): each
            # term's entry was appended as it was numbered, so they are in order already
            if held is not None:
                entries = array("I", compress(entries, map((1).__xor__, held)))
            return Postings("\n".join(names), array("B", b"\x01") * len(entries), entries)
        if terms <= 2 * RUN_TERMS:  # (``_room`` holds no terms back from a larger run)
            found = Counter(of)
            counts = array("I", map(found.__getitem__, range(terms)))
            del found
            gone = len(entries)
            if held is not None:
                for number in compress(range(terms), held):
                    gone -= counts[number]
                    counts[number] = 0
            out = array("I", bytes(4 * (gone + 1)))
            places: list[Iterator[int]] = list(map(count, accumulate(counts, initial=0)))
            """Per term, where its next entry goes (a held term's: past the end)."""
            if held is not None:
                past = repeat(gone)
                for number in compress(range(terms), held):
                    places[number] = past
            deque(map(out.__setitem__, map(next, map(places.__getitem__, of)), entries), maxlen=0)
            del places
            out.pop()
            if held is not None:
                counts = array("I", compress(counts, map((1).__xor__, held)))
        else:
            counts = array("I", bytes(4 * terms))
            for number in of:
                counts[number] += 1
            at = array("I", accumulate(counts, initial=0))
            out = array("I", bytes(4 * len(entries)))
            for number, entry in zip(of, entries, strict=True):
                out[at[number]] = entry
                at[number] += 1
        return Postings("\n".join(names), narrow(counts), out)

    def _pack_but(self, kept: list[str]) -> Postings:
        """``_pack`` of the terms but ``kept``, which stay in the run with their entries (in
        their order, numbered again in theirs)."""
        ids, of, entries = self.ids, self.of, self.entries
        held = bytearray(len(ids))
        for term in kept:
            held[ids[term]] = 1
        run = self._pack(held)
        renumbered = array("I", bytes(4 * len(ids)))
        live: dict[str, int] = {}
        for term, number in ids.items():
            if held[number]:
                renumbered[number] = len(live)
                live[term] = len(live)
        marks = list(map(held.__getitem__, of))
        self.of = array("I", map(renumbered.__getitem__, compress(of, marks)))
        self.entries = array("I", compress(entries, marks))
        self.ids = live
        self.last = array("i", b"\xff\xff\xff\xff" * len(live))
        deque(map(self.last.__setitem__, self.of, range(len(self.of))), maxlen=0)
        return run

    def seal(self) -> None:
        """A document's end: its terms are packed now if they are many (they would be held
        through the anchor pass otherwise), else left for the batch's next document."""
        if len(self.ids) > RUN_TERMS // 4:
            self.runs.append(self._pack())
            self._start()

    def finish(self) -> tuple[Postings, ...]:
        if self.ids or not self.runs:
            self.runs.append(self._pack())
        runs, self.runs = tuple(self.runs), []
        self._start()
        return runs


_PIECE = 1 << 12
"""Bytes of a section's text decoded, stripped and split at a time: markup stripping works line
by line, so line-aligned pieces give the same words, and a long section's words are never all
held as strings at once. A piece's fields, their marks-to-spaces copies and its new words are
live together (about 40 bytes of objects a byte of text): at 8 KiB that was 0.3 MB, which took
a 0.26 MB body of dense reference links to 4.19x its size (3.58x at 4 KiB, speed the same).
A line over twice this is cut where ``text.line_cut`` finds its words unchanged."""


def _capped(counts: dict[str, int]) -> dict[str, int]:
    """Each word's frequency capped at ``TF_MAX``."""
    if max(counts.values()) > TF_MAX:
        return dict(zip(counts, map(min, counts.values(), repeat(TF_MAX)), strict=True))
    return counts


def _words(body: bytes, start: int, stop: int, found: _Found, entry: int) -> tuple[int, bool]:
    """Add the words of a section's own text ``body[start:stop]`` to ``found``; its length
    and whether its stripped text is non-empty."""
    length, has_text = 0, False
    continued = False
    while start < stop:
        end = stop if stop - start <= _PIECE else body.find(b"\n", start + _PIECE, stop) + 1
        end = end or stop
        if end - start > 2 * _PIECE:  # a long line: cut it where its words stay the same
            line = body.rfind(b"\n", start, start + _PIECE) + 1 or start
            low = start + _PIECE
            cut = line_cut(body, line, low, min(end, low + _PIECE), continued and line == start)
            continued = cut > 0
            end = cut if continued else end
        else:
            continued = False
        counts = prose_counts(body[start:end].decode("utf-8", "replace"))
        if counts is not None:
            has_text = True
            length += counts.total()
            found.add_text(counts, entry)
            del counts  # not held while a run is packed, nor while the next piece's are made
        start = end
    return length, has_text


_TOPS = dict(_LIMITS)


def _wider(values: array[int], value: int) -> array[int]:
    """``values`` with ``value`` appended, in a wider type first if it needs one."""
    if value <= _TOPS[values.typecode]:
        values.append(value)
        return values
    if value > _LIMITS[-1][1]:
        raise OverflowError(value)
    for code, limit in _LIMITS:
        if values.typecode == code and value > limit:
            values = array(next(c for c, top in _LIMITS if value <= top), values)
            break
    values.append(value)
    return values


class _Headings(Sequence[str]):
    """Every heading's text in document order (what the anchor dedupe reads), from the kept
    sections' headings and the dropped headings' positions (a dropped heading's text is "")."""

    def __init__(self, outline: Outline, dropped: array[int], count: int) -> None:
        self._outline, self._dropped, self._count = outline, dropped, count
        self._first = 1 if outline.preamble else 0

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if not 0 <= index < self._count:
            raise IndexError(index)
        at = bisect_left(self._dropped, index)
        if at < len(self._dropped) and self._dropped[at] == index:
            return ""
        return self._outline.heading(index - at + self._first)

    def __iter__(self) -> Iterator[str]:
        """In order, the outline's headings cut once (``heading`` sums sizes)."""
        outline, dropped = self._outline, self._dropped
        text, sizes = outline.headings, outline.heading_sizes
        gone, section, start = 0, self._first, 0
        for index in range(self._count):
            if gone < len(dropped) and dropped[gone] == index:
                gone += 1
                yield ""
                continue
            size = sizes[section]
            yield text[start : start + size]
            start += size
            section += 1


def _analyze(body: bytes, found: _Found, base: int) -> Analysis:
    """Add this body's postings to ``found`` (sections numbered from ``base``)."""
    from markproto.protocol import mdoutline
    from markproto.protocol.document import own_facts

    facts = own_facts(body)  # first, while nothing else is held (it decodes a line whole)
    starts, sizes, lengths, heads = array("I"), array("B"), array("B"), array("B")
    heading_sizes = array("B")
    headings: list[str] = []
    parts: list[str] = []
    """Heading texts joined ``_BLOCK`` at a time: a body may have 100k headings."""
    dropped = array("I")
    """Headings whose section is not kept, numbered among all headings."""
    trail_words: dict[str, frozenset[str]] = {}
    """The word sets of the current trail's headings (only those: a body may have 100k)."""
    entry = base << FLAG_BITS
    count = 0
    preamble = False
    linked = _Links(body)
    for span in mdoutline.iter_own_spans(body):
        linked.section(span, count)
        whole = span.stop - span.start <= _PIECE
        """A section of one piece, added with its heading's words in one go (most)."""
        values: dict[str, int] = {}
        if whole:
            counts = prose_counts(body[span.start : span.stop].decode("utf-8", "replace"))
            length, has_text = (counts.total(), True) if counts is not None else (0, False)
            values = _capped(counts) if counts else values
            del counts  # not held through the next section's links
        else:
            length, has_text = _words(body, span.start, span.stop, found, entry)
        if not has_text and not span.heading:
            if span.level:
                dropped.append(count)
                count += 1
            continue
        if span.level:
            count += 1
        else:
            preamble = True
        trail_words = {
            heading: trail_words.get(heading) or frozenset(word_set((heading,)))
            for heading in span.trail
        }
        own: frozenset[str] = frozenset()
        above: set[str] = set()
        if span.trail:
            own = trail_words[span.trail[-1]]
            # a list, not a generator, to unpack: see ``mdoutline.iter_own_spans``'s trail
            above = set().union(*[trail_words[heading] for heading in span.trail[:-1]]) - own
        if whole and found.fits(len(values) + len(own) + len(above)):
            for term in own:
                values[term] = values.get(term, 0) | IN_TRAIL | IN_HEADING
            for term in above:
                values[term] = values.get(term, 0) | IN_TRAIL
            if values:
                found.add_section(values, entry)
        else:  # a run may be packed between its text's words and its heading's
            if whole and has_text:
                found.add_text(values, entry)
            if span.trail:
                found.add(own, entry | IN_TRAIL | IN_HEADING)
                found.add(above, entry | IN_TRAIL)
        del values
        starts.append(span.start)
        sizes = _wider(sizes, span.stop - span.start)
        lengths = _wider(lengths, length)
        heads.append(min(name_length((span.heading,), own), 255))
        headings.append(span.heading)
        heading_sizes = _wider(heading_sizes, len(span.heading))
        if len(headings) == _BLOCK:
            parts.append("".join(headings))
            headings.clear()
        entry += 1 << FLAG_BITS
    found.seal()
    parts.append("".join(headings))
    text = "".join(parts)  # one part: that very string
    del headings, parts
    outline = Outline.pack(lengths, heads, (starts, sizes, heading_sizes), text, preamble)
    del text, lengths, heads, starts, sizes, heading_sizes
    suffixed, suffixes = array("I"), array("I")
    first = 1 if preamble else 0
    gone = 0
    wanted = linked.headings_linked()
    anchors: dict[int, str] = {-1: ""}
    texts = _Headings(outline, dropped, count)
    for number, suffix in enumerate(mdoutline.anchor_suffixes(texts)):
        if number in wanted:
            anchors[number] = mdoutline.anchor(texts[number], suffix)
        if gone < len(dropped) and dropped[gone] == number:
            gone += 1
        elif suffix:
            suffixed.append(number - gone + first)
            suffixes.append(suffix)
    packed, link_count = linked.pack(anchors)
    if suffixed:
        outline = dataclasses.replace(outline, suffixed=suffixed, suffixes=suffixes)
    return Analysis(facts, outline, packed, link_count, linked.ids(), None)


_HEADING_KEY = "\0"
"""A link's section while the anchors are not yet known: this and its heading's number."""


def _marked(body: bytes, start: int, stop: int) -> bool:
    """Whether the text may hold a link (``links.Extractor.feed``'s own first test)."""
    find = body.find
    return (
        find(b"[", start, stop) >= 0
        or find(b"<", start, stop) >= 0
        or find(b"://", start, stop) >= 0
        or find(b"www.", start, stop) >= 0
    )


class _Links:
    """The body's links as the sections stream by, each kept as its ``links.tail`` in UTF-8
    with its line and its heading's number in arrays, until the anchors are known: a
    link-dense body holds a few bytes a link beside its text, not a string or a tuple. The
    reference links are not among them: the extractor holds their uses (fewer bytes still)
    and they are matched as they are packed."""

    __slots__ = ("_body", "_end", "_ends", "_extractor", "_heading", "_tails", "headings", "lines")

    def __init__(self, body: bytes) -> None:
        from markproto.protocol.links import Extractor

        self._body = body
        self.lines = lines = array("I")
        self.headings = headings = array("i")
        """Each link's heading, numbered among all headings (-1: before the first)."""
        self._tails = tails = bytearray()
        self._ends = ends = array("I")
        """Where each link's tail ends in ``_tails``."""
        self._end = 0
        """Where the last section fed ends (the next heading's line starts there)."""
        self._heading = heading = array("i", [-1])
        """The heading of the section being fed (what its links' ``section`` names)."""

        def keep(link: Link) -> None:
            """A function, not a bound method: the extractor holds it, and a method would tie
            this object and its extractor in a cycle, the body and every tail with them,
            freed only by the collector's full pass, which a server runs rarely."""
            rest = tail(link)
            if rest is not None:
                lines.append(link.line)
                headings.append(heading[0])
                tails.extend(rest)
                ends.append(len(tails))

        self._extractor = Extractor(body, keep)

    def section(self, span: mdoutline.OwnSpan, heading: int) -> None:
        """Feed one section: its own text decoded only if it may hold a link, and nothing at
        all where neither it nor its heading's line may."""
        body, start, stop = self._body, span.start, span.stop
        marked = _marked(body, start, stop)
        # a heading's line ends with a newline or the body: no mark spans it and the text
        if not marked and not _marked(body, self._end, start):
            self._extractor.skip(stop)
            self._end = stop
            return
        text = body[start:stop].decode("utf-8", "replace") if marked else ""
        key = f"{_HEADING_KEY}{heading}" if span.level else ""
        self._heading[0] = heading if span.level else -1
        self._extractor.section_parts(start, stop, key, span.level, text)
        self._end = stop

    def headings_linked(self) -> set[int]:
        """The headings (numbered among all) whose sections hold a link, or may (a reference
        use)."""
        uses = self._extractor.reference_sections()
        return set(self.headings).union(int(key[1:]) if key else -1 for key in uses)

    def pack(self, anchors: dict[int, str]) -> tuple[bytes, int]:
        """The links packed in the order of the body, given each heading's anchor: the
        others in the order of their lines, then within a line the reference links."""
        lines, headings, tails, ends = self.lines, self.headings, self._tails, self._ends
        found: Iterable[tuple[int, str, bytes | bytearray]] = (
            (lines[i], anchors[headings[i]], tails[ends[i - 1] if i else 0 : ends[i]])
            for i in _line_order(lines)
        )
        if self._extractor.reference_sections():
            references = (
                (link.line, anchors[int(link.section[1:]) if link.section else -1], rest)
                for link in self._extractor.references()
                if (rest := tail(link)) is not None
            )
            found = heapq.merge(found, references, key=itemgetter(0))
        return pack_tails(found)

    def ids(self) -> str:
        return "\n".join(i for i in self._extractor.ids if "\n" not in i)


_RUNS = 64


def _line_order(lines: array[int]) -> Iterable[int]:
    """The links' numbers sorted stably by line (found order within a line). They are found
    in a few ascending runs (bare URLs come after a paragraph's other links, reference links
    at the end), which are merged without a list of every number where they are few."""
    size = len(lines)
    starts = [0, *islice((i for i in range(1, size) if lines[i] < lines[i - 1]), _RUNS)]
    if len(starts) == 1:
        return range(size)
    if len(starts) <= _RUNS:
        runs = map(range, starts, [*starts[1:], size])
        return heapq.merge(*runs, key=lines.__getitem__)  # ties: the earlier run first
    return sorted(range(size), key=lines.__getitem__)
