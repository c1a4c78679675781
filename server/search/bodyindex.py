"""The body index behind ``match: body`` (docs/SPEC.md §5.7, body mode): postings, ranking,
snippets, built from the per-document records of ``analysis``.

Recall is the spec's: a section is a row when every query term is a word of its text, of its
heading trail, or of the document's tags and title, and at least one is in text or trail; a
document whose tags and title hold every term is one bare row instead of its sections. Order is
ours (``Weights``, docs/SPEC.md §5.7).

Memory is what bounds a body index, so nothing per posting is a Python object. Every section of
every live document has a slot (a 24-bit number; slots only grow, so a new document's sections
come after every other's), and a term's postings are one ``array('I')`` of entries
``slot << 8 | flags``, sorted, so matching is set algebra in C. A document keeps its analysis's
outline (section spans, word counts, headings) and nothing that its body can give again: a
snippet is cut again from the body for each row shown, and removal needs only the document's
slots (``PostingLists.remove``: a range cut out of the frozen segment, a search of the tail). A
term left without postings is dropped, so the vocabulary never outgrows the live documents; when
slots run out, the live ones are renumbered from 0 (in order, so every array stays sorted).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, compress, islice, repeat
from operator import and_, contains, eq, mul, rshift
from typing import Any

from markproto.protocol.gotext import lower
from markproto.protocol.limits import LOOKUP_DEFAULT_LIMIT, LOOKUP_MAX, SNIPPET_MAX
from markproto.server.search import intmap
from markproto.server.search.analysis import (
    FLAG_BITS,
    IN_HEADING,
    IN_TRAIL,
    TF_MAX,
    Analysis,
    Outline,
    Postings,
    narrow,
)
from markproto.server.search.catalog import Entry, SavedEntry
from markproto.server.search.postings import PostingLists
from markproto.server.search.text import identifier_words, loose_text, name_length, strip_line

__all__ = ["MAX_SLOTS", "REORDERED", "BodyIndex", "Hit", "Ranking", "Weights", "snippet"]

MAX_SLOTS = 1 << (32 - FLAG_BITS)
DumpedDoc = tuple[SavedEntry, str, int, tuple[Any, ...]]
"""A document as ``BodyIndex.dump`` gives it: entry, content hash, first slot, outline."""
_FLAGS = (1 << FLAG_BITS) - 1
REORDERED = LOOKUP_DEFAULT_LIMIT
"""The first rows a query's identifier words reorder (docs/SPEC.md §5.7): the rows a LOOKUP
shows by default; a fixed number, so a smaller limit shows a prefix of a larger one."""


@dataclass(frozen=True, slots=True)
class Weights:
    """The ranking, BM25F: one saturation (``k1``) over a row's weighted fields, each field's
    term frequency normalized by that field's length (``b``, ``heading_b``). A section row's
    fields are its text (weight 1), its own heading and its trail: its ancestors' headings and,
    at their root, its document's tags and title. A bare row is the section its document would
    be if the title headed its preamble: tags and title weighted as an own heading (normalized
    by the titles' mean length with ``title_b``, as every field by its own), the preamble (text
    before any heading) as text, so both are on one scale. Then
    the importance prior and the journal demotion, which order rows but never admit one. The
    first ``REORDERED`` rows are then reordered with the words of the query's snake_case
    identifiers, each a mention of its identifier (``identifier_word``) where it occurs apart
    from it (``BodyIndex._reordered``).
    docs/SPEC.md §5.7 says why each value is what it is."""

    k1: float = 0.9
    b: float = 0.5
    heading: float = 4.0
    heading_b: float = 0.75
    title_b: float = 1.0
    trail: float = 0.5
    identifier_word: float = 1.0
    prior_floor: float = 0.3


def snippet(raw: str, terms: Sequence[str], rarity: Sequence[float] = ()) -> str:
    """The snippet of a section's raw own text (SPEC §5.7): the line of its stripped text holding
    the most distinct query terms (as substrings of the lower-cased line), then the rarest ones
    (the greatest sum of ``rarity``, one weight per term; all alike when not given), then the
    first; the first line when none holds any; cut to 240 bytes on a rune boundary. Terms never
    hold whitespace.

    Stripping is line by line, so only the lines that can win are stripped: each line's
    ``loose_text`` bounds its terms from above. The first line holding every term wins outright
    (most often there is one); else lines are tried best bound first until no bound left can
    beat what was found. Lines are found with ``str.find`` over the loose text (in C), and only
    a line that can win is cut out of the raw text. The loose text is made a piece of whole
    lines at a time (its rules never cross a line), growing, so a winner among the first lines
    leaves the rest of a long section alone (where the first phase wins, the line ends at a
    third of the text, by bytes, over the FastAPI questions' rows).
    """
    weights = list(rarity) or [1.0] * len(terms)
    rarest = terms[weights.index(max(weights))]
    texts = []
    begin, size = 0, _PIECE
    while True:
        end = raw.find("\n", begin + size) if begin + size < len(raw) else -1
        piece = raw[begin:end] if end >= 0 else raw[begin:]
        text = loose_text(piece)
        won = _first_holding(piece, text, terms, rarest)
        if won is not None:
            return _cut(won)
        texts.append(text)
        if end < 0:
            break
        begin, size = end + 1, size * 4
    text = "\n".join(texts) if len(texts) > 1 else text
    # (distinct terms, then rarity) as one number: each term found adds more than all rarity
    big = sum(weights) + 1.0
    values = [big + weight for weight in weights]
    bounds: dict[int, float] = {}  # by where the line starts in ``text``
    for term, value in zip(terms, values, strict=True):
        at = text.find(term)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            bounds[start] = bounds.get(start, 0.0) + value
            end = text.find("\n", at)
            at = text.find(term, end) if end >= 0 else -1
    best, best_line, best_key = "", -1, 0.0
    for start, bound in sorted(bounds.items(), key=lambda item: (-item[1], item[0])):
        if bound < best_key or (bound == best_key and start > best_line):
            break
        stripped = _stripped_line(raw, text, start)
        key = sum(compress(values, map(lower(stripped).__contains__, terms)))
        if key > best_key or (key == best_key and key and start < best_line):
            best, best_line, best_key = stripped, start, key
    if not best_key:
        best = next(filter(None, map(strip_line, raw.split("\n"))), "")
    return _cut(best)


_PIECE = 128
"""Characters of raw text the first piece of loose text is made of, each next one four times
more (callgrind over the FastAPI questions' rows: 59.8 M in one piece, 55.0 M from 512, 52.4 M
from 128; growing twice as fast or from 32 or 64 did worse)."""


def _first_holding(raw: str, text: str, terms: Sequence[str], rarest: str) -> str | None:
    """The stripped form of the first line of ``raw`` (``text`` its loose text) holding every
    term, if one does."""
    at = text.find(rarest)
    while at >= 0:  # the lines holding the rarest term, found in C, in order
        start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
        if all(map(text[start : end if end >= 0 else len(text)].__contains__, terms)):
            stripped = _stripped_line(raw, text, start)
            if all(map(lower(stripped).__contains__, terms)):
                return stripped
        at = text.find(rarest, end) if end >= 0 else -1
    return None


def _stripped_line(raw: str, text: str, start: int) -> str:
    """The stripped line of ``raw`` whose ``loose_text`` starts at ``start`` of ``text`` (the
    loose text keeps the raw text's lines, one for one)."""
    line = text.count("\n", 0, start)
    return strip_line(raw.split("\n", line + 1)[line])


def _cut(line: str) -> str:
    encoded = line.encode()
    if len(encoded) <= SNIPPET_MAX:
        return line
    cut = SNIPPET_MAX - 3
    while cut > 0 and encoded[cut] & 0xC0 == 0x80:
        cut -= 1
    return encoded[:cut].decode() + "..."


@dataclass(slots=True, eq=False)
class _Doc:
    """A live document: its catalog entry and prior, its first slot, and its analysis's outline
    (the postings are the index's)."""

    entry: Entry
    content_hash: str
    start: int
    outline: Outline
    prior: float
    title_length: int
    """Its field of tags and title's length (``_title_length``), for scoring bare rows."""

    @property
    def sections(self) -> int:
        return len(self.outline)

    @property
    def slots(self) -> int:
        """Slots taken (``Analysis.slots``)."""
        return max(len(self.outline), 1)

    @property
    def lengths(self) -> array[int]:
        return self.outline.lengths

    @property
    def heads(self) -> array[int]:
        return self.outline.heads


def _anchor(doc: _Doc, section: int) -> str:
    return doc.outline.anchor(section) if section >= 0 else ""


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked row: a section (``section >= 0``) or the bare document (``-1``)."""

    doc: _Doc
    section: int
    score: float

    @property
    def entry(self) -> Entry:
        return self.doc.entry

    @property
    def content_hash(self) -> str:
        """The content hash of the version indexed: a snippet is cut from that body only."""
        return self.doc.content_hash

    @property
    def anchor(self) -> str:
        return _anchor(self.doc, self.section)

    @property
    def heading(self) -> str:
        return self.doc.outline.heading(self.section) if self.section >= 0 else ""

    def names(self) -> tuple[str, str]:
        """Its anchor and heading text, the heading read once (a slice summed: about as dear
        as the anchor's slug)."""
        if self.section < 0:
            return "", ""
        heading = self.doc.outline.heading(self.section)
        return self.doc.outline.anchor(self.section, heading), heading

    def snippet(self, body: bytes, terms: Sequence[str], rarity: Sequence[float] = ()) -> str:
        """This row's snippet, cut again from the body it was indexed from."""
        if self.section < 0:
            return ""
        start, end = self.doc.outline.span(self.section)
        return snippet(body[start:end].decode("utf-8", "replace"), terms, rarity)


@dataclass(frozen=True, slots=True)
class Ranking:
    """A query's rows (iterated: best first, lazily) and each term's rarity, its inverse
    document frequency over the whole index (what a snippet weighs terms by)."""

    rarity: list[float]
    hits: Iterator[Hit]

    def __iter__(self) -> Iterator[Hit]:
        return self.hits


def _slots(entries: array[int]) -> array[int]:
    """The slot of every entry, in C: on a little-endian machine an entry's bytes are its flags
    then its slot, so the bytes shifted by one, every fourth zeroed, are the slots."""
    if sys.byteorder != "little" or not entries:
        return array("I", map(rshift, entries, repeat(FLAG_BITS)))
    shifted = bytearray(memoryview(entries).cast("B")[1:])
    shifted.append(0)
    shifted[3::4] = bytes(len(entries))
    out = array("I")
    out.frombytes(shifted)
    return out


def _flags(entries: array[int]) -> bytes:
    """The flags of every entry (the low byte of each)."""
    if sys.byteorder != "little":
        return bytes(map(and_, entries, repeat(_FLAGS)))
    return memoryview(entries).cast("B")[0::4].tobytes()


def _flag_map(entries: array[int]) -> dict[int, int]:
    """Slot -> flags of every entry, in C."""
    return dict(zip(_slots(entries), _flags(entries), strict=True))


def _probe(entries: array[int], keys: set[int]) -> dict[int, int]:
    """The flags of those ``keys`` present in ``entries``, by bisection."""
    size = len(entries)
    out = {}
    for key in keys:
        at = bisect_left(entries, key << FLAG_BITS)
        if at < size and entries[at] >> FLAG_BITS == key:
            out[key] = entries[at] & _FLAGS
    return out


class _Kept:
    """A term's postings as ``_match`` reads them: its entries, and each one's slot (one int
    object each, made once)."""

    __slots__ = ("entries", "slots")

    def __init__(self, entries: array[int]) -> None:
        self.entries = entries
        self.slots: list[int] = _slots(entries).tolist()

    def aligned(self, slots: list[int], keys: set[int]) -> Sequence[int]:
        """The flags of each of the ascending ``slots`` (``keys`` as a set; 0 where this term
        has no entry for it): a few are bisected for, else every entry is passed once."""
        if len(slots) * _ALIGN < len(self.entries):
            return _gather(self.entries, self.slots, slots)
        among = list(map(keys.__contains__, self.slots))
        flags = bytes(compress(_flags(self.entries), among))
        if len(flags) == len(slots):  # every slot has an entry: they are parallel
            return flags
        found = dict(zip(compress(self.slots, among), flags, strict=True))
        return list(map(found.get, slots, repeat(0)))


def _gather(entries: array[int], kept: list[int], slots: list[int]) -> list[int]:
    """The flags of each of the ascending ``slots`` in ``entries`` (``kept``: each one's slot;
    0 where absent), each bisected for in C among ``kept``, whose ints exist already (a step
    over ``entries`` makes one)."""
    last = len(kept) - 1
    # searched below the last entry: a slot past every entry lands there (not its own slot)
    at = list(map(bisect_left, repeat(kept), slots, repeat(0), repeat(last)))
    present = map(eq, map(kept.__getitem__, at), slots)
    return list(map(mul, map(and_, map(entries.__getitem__, at), repeat(_FLAGS)), present))


def _aligned(found: _Kept | dict[int, int], slots: list[int], keys: set[int]) -> Sequence[int]:
    """The flags of each of the ascending ``slots`` (``keys`` as a set; 0 where it has none)
    from what ``_match`` kept of a term: its postings, or the flags of the slots it probed."""
    if isinstance(found, dict):
        return list(map(found.get, slots, repeat(0)))
    return found.aligned(slots, keys)


_ALIGN = 16
"""Bisecting for a slot costs about this many entries passed."""
_NOBODY = array("I")
_PROBE = 8
"""Bisection beats a pass over a postings list this many times the keys' number. Both by
instruction counts (callgrind, the 50 FastAPI questions over x20): matching took 73.3 M with
``_ALIGN`` 8 and ``_PROBE`` 16, 70.8 M with 16 and 16, 68.0 M with 16 and 8 (``_ALIGN`` 12 or
24, ``_PROBE`` 4, 6, 12, 24 or 32 did worse)."""


class BodyIndex:
    """Postings over the sections of every live document."""

    def __init__(self, weights: Weights | None = None, max_slots: int = MAX_SLOTS) -> None:
        self.weights = weights or Weights()
        self._max_slots = max_slots
        self._postings = PostingLists()
        self._holders: intmap.IntMap = {}
        """Term -> first slots of the documents whose tags or title hold it, ascending."""
        self._docs: dict[int, _Doc] = {}
        """First slot -> document."""
        self._starts: list[int] = []
        """First slots of the live documents, ascending: the very int objects that key
        ``_docs``, so 4 bytes a document more than an array, whose bisection (a candidate's
        document, found while matching and scoring) made an int object at every step: 2.6% of
        a query's instructions (callgrind, FastAPI x20)."""
        self._paths: dict[str, int] = {}
        self._next_slot = 0
        self._sections = 0
        self._length = 0
        self._heading_length = 0
        self._title_length = 0
        """The sum over documents of their tags-and-title field's length."""

    def __len__(self) -> int:
        return len(self._paths)

    @property
    def sections(self) -> int:
        return self._sections

    @property
    def terms(self) -> int:
        """Distinct terms with postings (the vocabulary never outgrows the live documents)."""
        return len(self._postings)

    def freeze(self) -> None:
        """Pack every posting into the frozen segment (``postings``): when writes pause, so
        the index holds no object per term while idle."""
        self._postings.freeze(self._next_slot)

    # -- keeping current ----------------------------------------------------------------------

    def apply(self, entry: Entry, content_hash: str, analysis: Analysis) -> None:
        """Index (or re-index) a document from its analysis; its catalog entry supplies tags,
        title and prior. Appends only: the analysis was done elsewhere."""
        assert analysis.postings is not None, "a batch's analyses go in with apply_batch"
        self.apply_batch([(entry, content_hash, analysis)], analysis.postings)

    def apply_batch(
        self,
        docs: Sequence[tuple[Entry, str, Analysis]],
        runs: Sequence[Postings],
        *,
        merge: bool = True,
    ) -> None:
        """Index the documents of one ``analyze_many`` batch (distinct paths) and its runs of
        postings. A document indexed before is removed first. ``merge`` (a live write) merges
        a due tail before each run and after the last, so a large document's runs never pile
        up as a tail of objects a term (the FastAPI x1 publish settled at 1.9x its bodies,
        was 2.8x; x5 1.05x, was 1.22x). False leaves every merge to the caller
        (``merge_due``), once it no longer holds the runs."""
        for entry, _, _ in docs:
            self.remove(entry.path)
        need = sum(analysis.slots for _, _, analysis in docs)
        if self._next_slot + need > self._max_slots:
            self._compact()
            if self._next_slot + need > self._max_slots:
                raise OverflowError("the body index has no slots left")
        base = self._next_slot
        start = base
        for entry, content_hash, analysis in docs:
            start += self._add(entry, content_hash, start, analysis.outline).slots
        self._next_slot = start
        postings = self._postings
        for run in runs:
            due = merge and postings.due()
            postings.extend(run.terms, run.counts, run.entries, base, merge=due)
        if merge:
            self.merge_due()

    def merge_due(self) -> bool:
        """Merge the postings' tail if it has outgrown its share (``PostingLists.due``);
        whether it did."""
        if not self._postings.due():
            return False
        self.freeze()
        return True

    def _add(self, entry: Entry, content_hash: str, start: int, outline: Outline) -> _Doc:
        """A document's own records from ``start`` (its postings are the caller's)."""
        terms = entry.terms
        title = _title_length(entry, terms)
        doc = _Doc(entry, content_hash, start, outline, self._prior(entry), title)
        self._docs[start] = doc
        self._starts.append(start)
        self._paths[entry.path] = start
        for term in terms:
            intmap.add(self._holders, term, start, "I")
        self._sections += doc.sections
        self._length += sum(doc.lengths)
        self._heading_length += sum(doc.heads)
        self._title_length += title
        return doc

    def entry(self, path: str) -> Entry | None:
        """The catalog entry of ``path`` as indexed, if it is."""
        start = self._paths.get(path)
        return None if start is None else self._docs[start].entry

    def indexed(self, path: str) -> str | None:
        """The content hash of the version of ``path`` indexed, if any."""
        start = self._paths.get(path)
        return None if start is None else self._docs[start].content_hash

    def remove(self, path: str) -> None:
        """Forget a document (its postings by slot range, ``PostingLists.remove``)."""
        start = self._paths.pop(path, None)
        if start is None:
            return
        doc = self._docs.pop(start)
        del self._starts[bisect_left(self._starts, start)]
        self._postings.remove(start, start + doc.slots)
        if self._postings.due():
            self.freeze()
        for term in doc.entry.terms:
            intmap.discard(self._holders, term, start)
        self._sections -= doc.sections
        self._length -= sum(doc.lengths)
        self._heading_length -= sum(doc.heads)
        self._title_length -= doc.title_length

    # -- saved and restored -----------------------------------------------------------------

    def dump(self) -> tuple[list[DumpedDoc], str, array[int], array[int], int]:
        """The index as plain data for ``restore``: per document its catalog entry's saved
        form, content hash, first slot and outline fields; every term's postings in two flat
        arrays; the next slot."""
        docs = [
            (doc.entry.saved(), doc.content_hash, doc.start, _shallow(doc.outline))
            for doc in self._docs.values()
        ]
        terms, counts, entries = self._postings.dump(self._next_slot)
        return docs, terms, narrow(counts), entries, self._next_slot

    def restore(
        self,
        docs: Sequence[tuple[Entry, str, int, Outline]],
        terms: str,
        counts: array[int],
        entries: array[int],
        next_slot: int,
    ) -> None:
        """Make an empty index the one ``dump`` gave (its entries built again by the caller,
        from what the documents' versions are now)."""
        assert not self._docs, "restore into an empty index"
        for entry, content_hash, start, outline in sorted(docs, key=lambda doc: doc[2]):
            self._add(entry, content_hash, start, outline)
        self._postings = PostingLists.restored(terms, counts, entries, next_slot)
        self._next_slot = next_slot

    def _compact(self) -> None:
        """Renumber the live slots from 0, in order (rare: only when slots run out)."""
        old = self._starts
        moves = array("I")
        start = 0
        for first in old:
            moves.append(first - start)
            start += self._docs[first].slots
        self._postings.renumber(array("I", old), moves, start)
        holders, self._holders = self._holders, {}
        for term in holders:
            for h in intmap.values(holders, term):
                intmap.add(self._holders, term, h - moves[bisect_left(old, h)], "I")
        docs = {}
        for first, move in zip(old, moves, strict=True):
            doc = self._docs[first]
            doc.start = first - move
            docs[doc.start] = doc
            self._paths[doc.entry.path] = doc.start
        self._docs = docs
        self._starts = list(docs)
        self._next_slot = start

    # -- queries ----------------------------------------------------------------------------------

    def _idf(self, lists: Sequence[array[int]]) -> list[float]:
        n = self._sections
        return [math.log(1 + (n - len(found) + 0.5) / (len(found) + 0.5)) for found in lists]

    def rank(self, terms: Sequence[str], accept: Callable[[Entry], bool] | None = None) -> Ranking:
        """Rows for the query terms among accepted documents (all, when ``accept`` is None),
        best first, ties by path then anchor, at most ``LOOKUP_MAX``; lazily, as a LOOKUP
        usually shows only the first few. Statistics (N, df, mean lengths) are the whole
        index's."""
        if not terms:
            return Ranking([], iter(()))
        lists = [self._postings.get(term) for term in terms]
        holders = [set(intmap.values(self._holders, term)) for term in terms]
        bare = set.intersection(*holders)
        keys, flags = self._match(lists, holders, bare)
        idf = self._idf(lists)
        sections = self._score(keys, idf, holders, flags, bare, accept)
        if accept is not None:
            bare = {start for start in bare if accept(self._docs[start].entry)}
        ranked = self._ranked(sections + self._score_bare(bare, idf, lists))
        identifiers = identifier_words(terms)
        if identifiers and self.weights.identifier_word:
            ranked = self._reordered(ranked, identifiers)
        return Ranking(idf, ranked)

    def _match(
        self, lists: Sequence[array[int]], holders: Sequence[set[int]], bare: set[int]
    ) -> tuple[list[int], list[Sequence[int]]]:
        """The matching section slots, ascending, and per term the flags of each (0 where the
        term has no entry for it).

        A section matches when every term is in its text or trail or in its document's tags or
        title (then at least one is in text or trail, or the document is a bare row). So the
        candidates are the sections of the term with the fewest (its postings, plus every
        section of the documents whose tags or title hold it), narrowed term by term: a few
        candidates are probed in a long postings list by bisection, else the candidates are
        intersected with its slots in C (``_Kept``: one int object an entry, where a map of
        slot to flags cost about twice). What each term was read as is kept, and read once
        more for the flags of the sections that matched, parallel to them (``_aligned``), so
        scoring indexes a list where it called a map's ``get``."""
        docs, starts = self._docs, self._starts
        per_doc = self._sections / len(docs) if docs else 0.0

        def reach(j: int) -> float:
            """About how many sections term j admits (the order only changes the work)."""
            return len(lists[j]) + len(holders[j]) * per_doc

        order = sorted(range(len(lists)), key=reach)
        kept: list[_Kept | dict[int, int]] = [{}] * len(lists)
        first = kept[order[0]] = _Kept(lists[order[0]])
        keys = set(first.slots)
        for start in holders[order[0]]:
            if start not in bare:
                keys.update(range(start, start + docs[start].sections))
        for j in order[1:]:
            entries = lists[j]
            present: set[int]
            if len(keys) * _PROBE < len(entries):
                found = kept[j] = _probe(entries, keys)
                present = set(found)
            else:
                postings = kept[j] = _Kept(entries)
                present = keys.intersection(postings.slots)
            held = holders[j]
            rest = keys.difference(present) if held else ()
            if rest:
                # the rest of the keys stay when their document's tags or title hold the term:
                # look up each one's document, or list the held documents' slots if fewer
                # (about: either gives the same keys)
                if len(held) * per_doc <= 4 * len(rest):
                    for start in held:
                        present.update(rest.intersection(range(start, start + docs[start].slots)))
                else:
                    present.update(
                        key for key in rest if starts[bisect_right(starts, key) - 1] in held
                    )
            keys = present
        slots = sorted(keys)
        return slots, [_aligned(found, slots, keys) for found in kept]

    # -- ranking ----------------------------------------------------------------------------------

    def _norms(self) -> tuple[float, float, float]:
        """Mean text and own-heading lengths over the sections, and the mean length of the
        documents' tags-and-title field (each at least 1): every field is normalized by its
        own mean."""
        n, documents = self._sections, len(self._docs)
        return (
            max(self._length / n if n else 0.0, 1.0),
            max(self._heading_length / n if n else 0.0, 1.0),
            max(self._title_length / documents if documents else 0.0, 1.0),
        )

    def _score(
        self,
        keys: list[int],
        idf: Sequence[float],
        holders: Sequence[set[int]],
        flags: Sequence[Sequence[int]],
        bare: set[int],
        accept: Callable[[Entry], bool] | None,
    ) -> list[tuple[float, int, int]]:
        """``(-score, first slot, section)`` for each of the sorted ``keys`` (per term,
        ``flags`` holds each one's flags, as ``_match`` gives them) whose document is accepted
        and not a bare row (a bare row stands for all of its document's sections)."""
        w = self.weights
        k1, trail, heading_weight = w.k1, w.trail, w.heading
        mean, mean_heading, _ = self._norms()
        # each field's length normalization as c + slope * length
        text_c, text_slope = 1 - w.b, w.b / mean
        head_c, head_slope = 1 - w.heading_b, w.heading_b / mean_heading
        scale = [weight * (k1 + 1) for weight in idf]
        # per term: its weight and the field weight a section gets when only its document's
        # tags or title hold it (the trail's root)
        plain = [(weight, found, 0.0) for weight, found in zip(scale, flags, strict=True)]
        titled = set().union(*holders)
        variants: dict[tuple[bool, ...], list[tuple[float, Sequence[int], float]]] = {}
        starts, docs = self._starts, self._docs
        in_heading, tf_max = IN_HEADING, TF_MAX
        out: list[tuple[float, int, int]] = []
        append = out.append
        end, skip, number = -1, True, 0
        start, counts, sections, prior, terms = 0, _NOBODY, 0, 0.0, plain
        for at, key in enumerate(keys):
            if key >= end:  # the next document: keys are sorted, so it is past the last one
                number = bisect_right(starts, key, number)
                start = starts[number - 1]
                doc = docs[start]
                counts = doc.outline.counts  # each section's words, then its heading's
                sections = len(counts) >> 1
                end = start + (sections or 1)
                skip = start in bare or (accept is not None and not accept(doc.entry))
                if skip:
                    continue
                prior = -doc.prior
                terms = plain
                if start in titled:  # the terms its tags or title hold, as one key
                    held = tuple(map(contains, holders, repeat(start)))
                    terms = variants.get(held, [])
                    if not terms:
                        terms = variants[held] = [
                            (weight, found, trail if h else 0.0)
                            for (weight, found, _), h in zip(plain, held, strict=True)
                        ]
            elif skip:
                continue
            section = key - start
            text = 1 / (text_c + text_slope * counts[section])
            raw = 0.0
            for weight, found, x in terms:  # x: the field weight of the title alone, if any
                flag = found[at]
                if flag > tf_max:  # IN_HEADING or IN_TRAIL: the nearest such field counts
                    if flag & in_heading:
                        x = heading_weight / (head_c + head_slope * counts[sections + section])
                    else:
                        x = trail
                    flag &= tf_max
                x += text * flag
                raw += weight * x / (k1 + x)
            append((raw * prior, start, section))
        return out

    def _score_bare(
        self, bare: set[int], idf: Sequence[float], lists: Sequence[array[int]]
    ) -> list[tuple[float, int, int]]:
        """The bare rows: every term in the tags and title, scored as a section whose own
        heading they are and whose text is the document's preamble (its text before any
        heading, when it has one), on the same scale as sections."""
        w = self.weights
        k1, (mean, _, mean_title) = w.k1, self._norms()
        text_c, text_slope = 1 - w.b, w.b / mean
        head_c, head_slope = 1 - w.title_b, w.title_b / mean_title
        out = []
        for start in bare:
            doc = self._docs[start]
            heading = w.heading / (head_c + head_slope * doc.title_length)
            preamble = doc.outline.preamble  # text before any heading
            text = 1 / (text_c + text_slope * doc.outline.length(0)) if preamble else 0.0
            raw = 0.0
            for entries, weight in zip(lists, idf, strict=True):
                tf = _probe(entries, {start}).get(start, 0) & TF_MAX if preamble else 0
                x = heading + text * tf
                raw += weight * x * (k1 + 1) / (k1 + x)
            out.append((-raw * doc.prior, start, -1))
        return out

    # -- identifier words -------------------------------------------------------------------------

    def _reordered(self, ranked: Iterator[Hit], identifiers: dict[str, list[str]]) -> Iterator[Hit]:
        """The first ``REORDERED`` rows again, with each snake_case identifier of the query
        (``text.identifier_words``) also found in its words: a word's weighted frequency in a
        row (SPEC §5.7's ``x``, the same as a query term's) is more of the identifier's, times
        ``identifier_word``, before its one saturation; then the other rows as they were. Only
        the first rows: the words can only add, so the order past them stays the BM25F one,
        and the cost is a few bisections a row (in C), whatever the number of candidates."""
        first = list(islice(ranked, REORDERED))
        w = self.weights
        k1, (mean, mean_heading, mean_title) = w.k1, self._norms()
        text_c, text_slope = 1 - w.b, w.b / mean
        head_c, head_slope = 1 - w.heading_b, w.heading_b / mean_heading
        title_c, title_slope = 1 - w.title_b, w.title_b / mean_title
        keys = [(hit.doc.start + max(hit.section, 0)) << FLAG_BITS for hit in first]
        terms = {*identifiers, *chain(*identifiers.values())}
        lists = {term: self._postings.get(term) for term in terms}
        flags = {term: _flags_at(entries, keys) for term, entries in lists.items()}
        # whether each row's document's tags or title hold each word, from ``_holders`` (an
        # entry's ``terms`` is made again at each call: 40% of this method's instructions)
        starts = [hit.doc.start for hit in first]
        titled = {term: _holds(intmap.values(self._holders, term), starts) for term in terms}
        idf = self._idf([lists[identifier] for identifier in identifiers])
        each = [
            (
                flags[identifier],
                titled[identifier],
                [(flags[word], titled[word]) for word in words],
                weight,
            )
            for (identifier, words), weight in zip(identifiers.items(), idf, strict=True)
        ]
        scored = []
        for at, hit in enumerate(first):
            doc, section = hit.doc, hit.section
            if section < 0:  # a bare row: its title is its heading, its preamble its text
                heading = w.heading / (title_c + title_slope * doc.title_length)
                preamble = doc.outline.preamble
                text = 1 / (text_c + text_slope * doc.outline.length(0)) if preamble else 0.0
            else:
                heading = w.heading / (head_c + head_slope * doc.outline.head(section))
                text = 1 / (text_c + text_slope * doc.outline.length(section))
            fields = (section < 0, text, heading, w.trail)
            raw = 0.0
            for found, held, words, weight in each:
                alone = _frequency(found[at], held[at], *fields)
                more = sum(_frequency(f[at], h[at], *fields) for f, h in words)
                if more:
                    more = alone + w.identifier_word * more
                    raw += weight * (more / (k1 + more) - alone / (k1 + alone))
            scored.append((-hit.score - raw * (k1 + 1) * doc.prior, doc.start, section))
        yield from self._ranked(scored)  # ties as ever: by path, then anchor
        yield from ranked

    def _prior(self, entry: Entry) -> float:
        """Importance as a prior (it orders rows, it never admits one), then journal demotion."""
        floor = self.weights.prior_floor
        return (floor + (1 - floor) * entry.importance) * entry.demote

    def _ranked(self, scored: list[tuple[float, int, int]]) -> Iterator[Hit]:
        """Pop rows best first; rows of equal score go out by path, then anchor."""
        heapq.heapify(scored)
        docs = self._docs
        given = 0
        while scored and given < LOOKUP_MAX:
            top = heapq.heappop(scored)
            group = [top]
            while scored and scored[0][0] == top[0]:
                group.append(heapq.heappop(scored))
            if len(group) > 1:
                if len({start for _, start, _ in group}) == len(group):  # one row a document
                    group.sort(key=lambda row: docs[row[1]].entry.path)
                else:
                    group.sort(
                        key=lambda row: (docs[row[1]].entry.path, _anchor(docs[row[1]], row[2]))
                    )
            for score, start, section in group[: LOOKUP_MAX - given]:
                yield Hit(docs[start], section, -score)
            given += len(group)


def _flags_at(entries: array[int], keys: Sequence[int]) -> list[int]:
    """The flags of the slot of each of a few ``keys`` (slots shifted by ``FLAG_BITS``) in a
    postings list, 0 where it has none; each bisected for in C (``_gather`` copies the list
    first, which makes a long one dear for a few slots)."""
    if not entries:
        return [0] * len(keys)
    at = map(min, map(bisect_left, repeat(entries), keys), repeat(len(entries) - 1))
    got = list(map(entries.__getitem__, at))
    present = map(eq, map(and_, got, repeat(~_FLAGS)), keys)
    return list(map(mul, map(and_, got, repeat(_FLAGS)), present))


def _holds(holders: Sequence[int], starts: Sequence[int]) -> list[bool]:
    """Whether each of a few document ``starts`` is among ``holders`` (ascending), each
    bisected for in C."""
    if not holders:
        return [False] * len(starts)
    at = map(min, map(bisect_left, repeat(holders), starts), repeat(len(holders) - 1))
    return list(map(eq, map(holders.__getitem__, at), starts))


def _frequency(
    flag: int, titled: bool, bare: bool, text: float, heading: float, trail: float
) -> float:
    """A term's weighted frequency ``x`` in a row (SPEC §5.7), as ``_score`` and ``_score_bare``
    compute it, from its flags there, whether the document's tags or title hold it, and the
    row's field weights (``text`` per occurrence; ``heading``: a bare row's title)."""
    if bare:
        return text * (flag & TF_MAX) + (heading if titled else 0.0)
    if flag & IN_HEADING:
        return text * (flag & TF_MAX) + heading
    return text * (flag & TF_MAX) + (trail if flag & IN_TRAIL or titled else 0.0)


def _title_length(entry: Entry, terms: frozenset[str]) -> int:
    """The length of a document's field of tags and title (``text.name_length``; ``terms``:
    ``entry.terms``, made once for both)."""
    return name_length((*entry.tags, entry.title), terms)


def _shallow(outline: Outline) -> tuple[Any, ...]:
    """``outline``'s fields as they are (``astuple`` would deep-copy every array: the save
    made while serving does this on the event loop)."""
    return tuple(getattr(outline, field.name) for field in dataclasses.fields(outline))
