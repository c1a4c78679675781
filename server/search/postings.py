"""The body index's postings: for every term, its entries ``slot << 8 | flags``, ascending, held
as one frozen segment of flat arrays and a small mutable tail.

A term of its own (a str, a dict slot and an array object) costs about 200 bytes, more than the
postings of most terms (about half of a vocabulary occurs once), so most of the index is one
frozen segment with no object per term: the terms sorted, UTF-8, each followed by a newline, in
one bytes object, and every term's entries one after the other in one array, each with its
offset. A term is found in C: every ``SAMPLE``-th term is kept as a bytes object in a list (with
where it starts), bisected for the block of terms the term would be in, which is searched for
it; the newlines before it in the block give its number. Writes go to the tail: new entries to
a dict of arrays (slots only grow, so a term's new entries always follow its frozen ones), and
a document removed from the frozen segment to a list of dead slot ranges, cut out of what a
lookup gives. ``freeze`` merges the tail in and drops the dead entries: when the tail outgrows
a share of the frozen segment, and when the writes pause (``BodyIndex.freeze``).
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable, Iterator
from itertools import accumulate, chain, compress, islice, repeat
from operator import add, eq, iadd, is_, itemgetter, not_, rshift, sub
from re import Match

from markproto.server.search.analysis import FLAG_BITS, combine

__all__ = ["PostingLists"]

_SHIFT = FLAG_BITS
_TERM_COST = 200
"""About what a term of the tail costs beside its entries (str, dict slot, array), bytes."""
_TAIL_MIN = 128 << 10
"""Tail bytes below which a write never merges."""
_TAIL_SHARE = 8
"""A write merges once the tail is this share of the whole. The tail's objects (a str and an
array a term) are small, in pymalloc's arenas, and a merge frees them all at once: the arenas a
large tail spread into stay behind, pinned by what was allocated beside it (at half the
segment, FastAPI x5 published settled at 1.6-1.7x its bodies, at an eighth 1.2-1.4x; with the
merges in place, a half 1.36x and an eighth 1.23-1.24x). A smaller share merges more often: the
x5 documents' postings took 2.2 s of CPU at an eighth, 1.4 s at a half (docs/PERFORMANCE.md,
"Board budget")."""
_DEAD_MAX = 64
"""Dead ranges (documents removed from the frozen segment) that make a write merge: each is
cut out of every lookup until then."""
SAMPLE = 64
"""One frozen term in this many is kept whole (about 50 bytes): a lookup bisects them in C, then
searches the ~600 bytes of one block, where bisecting every term with a key function took 14
calls into Python (about 12 us a term, twice a query)."""
_NOBODY = array("I")
_NO_SLOT = 1 << 32
_FIRST, _LAST = itemgetter(0), itemgetter(-1)
_NEWLINE = re.compile(b"\n")


def _encode(term: str) -> bytes:
    return term.encode("utf-8", "surrogatepass")


class PostingLists:
    """Every term's entries (``get``), kept by ``extend`` and ``remove``."""

    def __init__(self) -> None:
        self._words = b""
        """The frozen terms, ascending, each followed by a newline (a term holds none)."""
        self._sample: list[bytes] = []
        """Frozen terms 0, ``SAMPLE``, 2 ``SAMPLE``, ..., each a bytes object (bisected)."""
        self._starts = array("I", (0,))
        """Where each frozen term starts in ``_words``, and where the last ends (a lookup searches
        the block between two sampled terms' starts; a merge bisects the terms by them, holding no
        object per term: see ``_starts``)."""
        self._begins = array("I", (0,))
        """Where each frozen term's entries start in ``_entries``, and their end."""
        self._entries = array("I")
        self._top = 0
        """Slots below this are the frozen segment's, the others the tail's."""
        self._tail: dict[str, array[int]] = {}
        self._tail_entries = 0
        self._tail_slot = -1
        """The greatest slot the tail has an entry of (or had: a removal leaves it)."""
        self._tail_low = _NO_SLOT
        """The least slot the tail has an entry of (or had): below ``_top`` only where
        ``extend``'s ``merge`` cut a document's runs."""
        self._dead: list[tuple[int, int]] = []
        """Slot ranges ``[low, high)`` of documents removed from the frozen segment, ascending."""
        self._lent = False
        """``dump`` gave ``_entries`` out (a save writes them on a thread): the next merge
        writes new arrays instead of moving the entries in place."""

    @classmethod
    def restored(
        cls, terms: str, counts: array[int], entries: array[int], top: int
    ) -> PostingLists:
        """Posting lists ``dump`` gave (``terms`` ascending, newline-joined), every slot below
        ``top``."""
        out = cls()
        if terms:
            words = _encode(terms) + b"\n"
            begins = out._begins
            total = 0
            for count in counts:
                total += count
                begins.append(total)
            out._words, out._entries = words, entries
            out._starts = _starts(words)
            out._sample = _sample(words, out._starts)
        out._top = top
        return out

    def __len__(self) -> int:
        """Terms with entries."""
        if not self._dead:
            return len(self._begins) - 1 + sum(1 for t in self._tail if self._find(t) < 0)
        return sum(1 for _ in self._merged())

    @property
    def size(self) -> int:
        """Bytes held, about (what decides a merge)."""
        frozen = len(self._words) + 4 * (len(self._begins) + len(self._starts) + len(self._entries))
        return frozen + _TERM_COST * len(self._tail) + 4 * self._tail_entries

    # -- lookups ----------------------------------------------------------------------------------

    def _find(self, term: str) -> int:
        """The frozen segment's number of ``term``, or -1."""
        key = _encode(term)
        block = bisect_right(self._sample, key) - 1
        if block < 0:
            return -1
        if self._sample[block] == key:
            return block * SAMPLE
        words, starts = self._words, self._starts
        low = starts[block * SAMPLE]
        high = starts[min((block + 1) * SAMPLE, len(starts) - 1)]
        at = words.find(b"\n" + key + b"\n", low, high)
        return -1 if at < 0 else block * SAMPLE + words.count(b"\n", low, at + 1)

    def get(self, term: str) -> array[int]:
        """The entries of ``term``, ascending (empty when it has none). Not to be changed."""
        at = self._find(term)
        tail = self._tail.get(term)
        if at < 0:
            return _NOBODY if tail is None else tail
        found = self._entries[self._begins[at] : self._begins[at + 1]]
        if self._dead:
            found = self._alive(found)
        if tail is not None:
            found += tail
        return found

    def _alive(self, found: array[int]) -> array[int]:
        """``found`` (a copy of frozen entries) without those of dead slots."""
        for low, high in self._dead:
            if not found or low << _SHIFT > found[-1]:
                break
            begin = bisect_left(found, low << _SHIFT)
            stop = bisect_left(found, high << _SHIFT, begin)
            if stop > begin:
                del found[begin:stop]
        return found

    # -- writes -----------------------------------------------------------------------------------

    def extend(
        self,
        terms: str,
        counts: array[int],
        entries: array[int],
        base: int,
        *,
        merge: bool = False,
    ) -> None:
        """Append a run of postings (``analysis.Postings``: slots from ``base``, each term's
        after every entry it has), combining an entry with the last one of the same section
        (a section split between two runs). In C but for those: each term's part is cut out
        of the run shifted whole, new terms go in at once and the others' arrays are extended
        in place (a loop a term was 6% of a FastAPI x5 build).

        ``merge``: the tail is merged into the frozen segment first, even between two runs of
        one document (a section split there is combined in the segment), so a large
        document's runs never pile up as one tail of objects a term: the FastAPI release
        notes' seven runs made a tail of 9,254 terms, 1.6 MB beside their 0.5 MB of runs,
        before the merge added 1 MB more."""
        if not entries:
            return
        if base:
            entries = array("I", map(add, entries, repeat(base << _SHIFT)))
        low = min(entries) >> _SHIFT
        if merge and (self._tail or self._dead):
            self.freeze(max(self._top, self._tail_slot + 1))
        names = terms.split("\n")
        ends = list(accumulate(counts))
        if len(names) != len(ends) or ends[-1] != len(entries):  # (as a strict zip would)
            raise ValueError("a run's terms, counts and entries disagree")
        parts = list(map(entries.__getitem__, map(slice, chain((0,), ends), ends)))
        del ends
        added = len(entries)
        if low < self._top:  # a section may go on from the frozen segment
            names, parts, combined = self._go_on(names, parts)
            added -= combined
        tail = self._tail
        found = list(map(tail.get, names, repeat(_NOBODY)))
        new = list(map(is_, found, repeat(_NOBODY)))
        tail.update(zip(compress(names, new), compress(parts, new), strict=True))
        kept = list(map(not_, new))
        olds, parts = list(compress(found, kept)), list(compress(parts, kept))
        if low <= self._tail_slot:  # a section may go on from the last run
            lasts = map(rshift, map(_LAST, olds), repeat(_SHIFT))
            goes_on = map(eq, lasts, map(rshift, map(_FIRST, parts), repeat(_SHIFT)))
            for old, part in compress(zip(olds, parts, strict=True), goes_on):
                old[-1] = combine(old[-1], part.pop(0))
        deque(map(iadd, olds, parts), maxlen=0)
        self._tail_entries += added
        self._tail_slot = max(self._tail_slot, max(entries) >> _SHIFT)
        self._tail_low = min(self._tail_low, low)

    def _go_on(
        self, names: list[str], parts: list[array[int]]
    ) -> tuple[list[str], list[array[int]], int]:
        """A run's terms and parts after each part's first entry is combined with its term's
        last frozen one, where both are of one section (``extend``'s ``merge`` cut the
        section's runs); the parts left empty dropped; how many entries were combined."""
        frozen, begins, top = self._entries, self._begins, self._top
        combined = 0
        for name, part in zip(names, parts, strict=True):
            if part[0] >> _SHIFT >= top:
                continue
            at = self._find(name)
            if at >= 0 and begins[at + 1] > begins[at]:
                last = begins[at + 1] - 1
                if frozen[last] >> _SHIFT == part[0] >> _SHIFT:
                    if self._lent:  # a save may be writing the frozen entries: change a copy
                        self._entries = frozen = array("I", frozen)
                        self._lent = False
                    frozen[last] = combine(frozen[last], part.pop(0))
                    combined += 1
        if combined:
            kept = list(map(len, parts))
            names, parts = list(compress(names, kept)), list(compress(parts, kept))
        return names, parts, combined

    def remove(self, low: int, high: int) -> None:
        """Forget the entries of slots ``[low, high)`` (one document's): a dead range in the
        frozen segment, else a search of every term of the tail (the writes since the last
        merge: a document's own terms are not kept, and to analyse it again costs more)."""
        if low < self._top:
            insort(self._dead, (low, high))
            if high <= self._tail_low:
                return  # none in the tail
        tail = self._tail
        low, high = low << _SHIFT, high << _SHIFT
        for term, found in list(tail.items()):
            begin = bisect_left(found, low)
            stop = bisect_left(found, high, begin)
            self._tail_entries -= stop - begin
            if stop - begin == len(found):
                del tail[term]
            elif stop > begin:
                del found[begin:stop]

    def due(self) -> bool:
        """Whether the tail has outgrown its share: a write should ``freeze`` now."""
        tail = _TERM_COST * len(self._tail) + 4 * self._tail_entries
        return len(self._dead) > _DEAD_MAX or tail > max(_TAIL_MIN, self.size // _TAIL_SHARE)

    def freeze(self, top: int) -> None:
        """Merge the tail into the frozen segment and drop the dead entries; slots below
        ``top`` are the frozen segment's from now on."""
        if self._tail or self._dead:
            if self._dead:  # every term's entries to cut
                out = _Segment()
                for word, found in self._merged():
                    out.add(word, len(found))
                    out.entries += found
                words, begins, entries = bytes(out.words), out.begins, out.entries
                del out
            else:
                words, begins, entries = self._merge()
            self._words, self._begins, self._entries = words, begins, entries
            self._starts = _starts(words)
            self._tail, self._tail_entries, self._dead, self._lent = {}, 0, [], False
            self._tail_slot, self._tail_low = -1, _NO_SLOT
            self._sample = _sample(words, self._starts)  # the merge's transients freed first
        self._top = top

    def _merge(self) -> tuple[bytes, array[int], array[int]]:
        """The frozen segment's terms, entry starts and entries with the tail's put in among
        them (``_places``): the frozen pieces between two of the tail's terms are joined as
        they are and the counts summed again, all in C (a loop a tail term, 4% of a FastAPI
        x5 build)."""
        terms, ats, same = self._places()
        found = list(map(self._tail.__getitem__, terms))
        # the terms: the new ones (not frozen already) joined in among the frozen ones
        fresh = bytes(map((1).__xor__, same))
        new_ats = array("I", compress(ats, fresh))
        old, out = self._words, bytearray()
        cuts = array("I", map(self._starts.__getitem__, new_ats))
        keys = map(add, map(_encode, compress(terms, fresh)), repeat(b"\n"))
        with memoryview(old) as view:  # (one piece at a time: a view is 200 bytes)
            cut: Callable[[slice], memoryview] = view.__getitem__
            pieces = map(cut, map(slice, chain((0,), cuts), chain(cuts, (None,))))
            deque(
                map(
                    out.__iadd__, chain.from_iterable(zip(pieces, chain(keys, (b"",)), strict=True))
                ),
                0,
            )
            del pieces, cut
        del cuts, keys, terms
        words = bytes(out)
        del out
        # each term's count of entries: the frozen ones, more where the tail has a term
        begins = self._begins
        counts = array("I", map(sub, islice(begins, 1, None), begins))
        matched = array("I", compress(ats, same))
        more = map(len, compress(found, same))
        deque(map(counts.__setitem__, matched, map(add, map(counts.__getitem__, matched), more)), 0)
        news = array("I", map(len, compress(found, fresh)))
        del matched, more
        merged = array("I")
        part: Callable[[slice], array[int]] = counts.__getitem__
        runs = map(part, map(slice, chain((0,), new_ats), chain(new_ats, (None,))))
        ones = map(news.__getitem__, map(slice, range(len(news)), range(1, len(news) + 1)))
        deque(
            map(
                merged.extend,
                chain.from_iterable(zip(runs, chain(ones, (_NOBODY,)), strict=True)),
            ),
            0,
        )
        del runs, ones, part
        del counts, news
        entries = self._spread(ats, same, found)
        return words, array("I", accumulate(merged, initial=0)), entries

    def _places(self) -> tuple[list[str], array[int], bytes]:
        """The tail's terms, ascending; for each, the number of the first frozen term not
        before it, and whether that term is the same (1) or not (0). Flat arrays and one list,
        not an object a term: what the merge holds throughout, beside what it writes (see
        ``_sample``). Each key is bisected in C, among the sample and then among the terms of
        its block, split once for all the keys that fall in it (a key function called Python
        at every step: 7% of a FastAPI x5 build)."""
        words, starts, sample = self._words, self._starts, self._sample
        count = len(starts) - 1
        terms = sorted(self._tail)  # code point order is UTF-8's
        ats, same = array("I"), bytearray()
        block, low, names = -1, 0, [b""]
        for term in terms:
            key = _encode(term)
            at = bisect_right(sample, key) - 1
            if at < 0:  # before every frozen term
                ats.append(0)
                same.append(0)
                continue
            if at != block:
                block, low = at, at * SAMPLE
                high = min(low + SAMPLE, count)
                names = words[starts[low] : starts[high] - 1].split(b"\n")
            at = bisect_left(names, key)
            matched = at < len(names) and names[at] == key
            ats.append(low + at)
            same.append(matched)
        return terms, ats, bytes(same)

    def _spread(self, ats: array[int], same: bytes, found: list[array[int]]) -> array[int]:
        """The frozen entries with each tail term's (``found``, ascending) after its frozen
        ones (``_places``), moved from the back in the frozen array itself, grown by the
        tail's size: a merge holds the segment once, where a new array held it twice (at
        FastAPI x5, 2 MB of entries, the publish's peak). Into a new array when ``dump`` lent
        the frozen one out. The frozen entries before the k-th tail term's (``cuts``) stay
        together, moved right by the tail's entries before them (``shifts``): one memmove a
        piece, the pieces and where they go made in C."""
        old, begins = self._entries, self._begins
        size = len(old)
        lengths = array("I", map(len, found))
        grown = size + sum(lengths)
        if self._lent:
            entries = array("I", bytes(4 * grown))
            entries[:size] = old
        else:
            entries = old
            entries.frombytes(bytes(4 * (grown - size)))
        cuts = array("I", map(begins.__getitem__, map(add, ats, same)))
        shifts = array("I", accumulate(lengths))
        ends = array("I", chain(islice(cuts, 1, None), (size,)))
        for column in (cuts, ends, shifts, lengths):
            column.reverse()
        moved = array("I", map(add, cuts, shifts))  # where each piece goes, the tail's before
        with memoryview(entries) as view:
            cut: Callable[[slice], memoryview] = view.__getitem__
            put: Callable[[slice, memoryview | array[int]], None] = view.__setitem__
            targets = zip(
                map(slice, moved, map(add, ends, shifts)),
                map(slice, map(sub, moved, lengths), moved),
                strict=True,
            )
            pieces = zip(map(cut, map(slice, cuts, ends)), reversed(found), strict=True)
            values: Iterator[memoryview | array[int]] = chain.from_iterable(pieces)
            deque(map(put, chain.from_iterable(targets), values), 0)
            del targets, pieces, values, cut, put
        return entries

    def _merged(self) -> Iterator[tuple[bytes, array[int]]]:
        """Every term with entries, ascending, and its entries (frozen ones copied)."""
        begins, entries = self._begins, self._entries
        tail = self._tail
        news = sorted((_encode(term), term) for term in tail)
        j = 0
        for i, word in enumerate(_terms(self._words)):
            while j < len(news) and news[j][0] < word:
                yield news[j][0], tail[news[j][1]]
                j += 1
            found = entries[begins[i] : begins[i + 1]]
            if self._dead:
                found = self._alive(found)
            if j < len(news) and news[j][0] == word:
                found += tail[news[j][1]]
                j += 1
            if found:
                yield word, found
        for key, term in news[j:]:
            yield key, tail[term]

    # -- whole ------------------------------------------------------------------------------------

    def dump(self, top: int) -> tuple[str, array[int], array[int]]:
        """Every term, ascending, newline-joined; each one's count of entries; the entries
        (frozen first: ``top`` as ``freeze``)."""
        self.freeze(top)
        counts = array("I", (b - a for a, b in zip(self._begins, self._begins[1:], strict=False)))
        self._lent = True
        return self._words[:-1].decode("utf-8", "surrogatepass"), counts, self._entries

    def renumber(self, old: array[int], moves: array[int], top: int) -> None:
        """Move every entry of a document whose first slot is ``old[i]`` down by ``moves[i]``
        (rare: when slots run out); slots below ``top`` are frozen after."""
        self.freeze(self._top)
        out = array("I")
        for entry in self._entries:
            at = bisect_right(old, entry >> _SHIFT) - 1
            out.append(entry - (moves[at] << _SHIFT))
        self._entries = out
        self._top = top


def _starts(words: bytes) -> array[int]:
    """Where each of the frozen terms starts in ``words``, and where the last ends (past its
    newline): one array, not a list of the terms, so a restore holds no object per term (their
    pymalloc arenas would stay behind, pinned by what is allocated meanwhile)."""
    return array("I", chain((0,), map(Match.end, _NEWLINE.finditer(words))))


def _terms(words: bytes) -> Iterator[bytes]:
    """The frozen terms of ``words``, one at a time (see ``_starts``)."""
    begin = 0
    for newline in _NEWLINE.finditer(words):
        yield words[begin : newline.start()]
        begin = newline.end()


def _sample(words: bytes, starts: array[int]) -> list[bytes]:
    """Every ``SAMPLE``-th of the frozen terms (``starts`` where each starts in ``words``), each
    a bytes object of its own, made once a merge's transient objects are freed (one kept from
    among thousands pins the pymalloc pool of each, and so its arena)."""
    return [words[starts[n] : starts[n + 1] - 1] for n in range(0, len(starts) - 1, SAMPLE)]


class _Segment:
    """A frozen segment's terms and where each one's entries start, being written term after
    term, ascending (the entries themselves are the caller's)."""

    def __init__(self) -> None:
        self.words = bytearray()
        self.begins = array("I", (0,))
        self.starts = array("I", (0,))
        self.entries = array("I")
        """The entries, where the caller writes them here."""

    def add(self, word: bytes, count: int) -> None:
        """A term with ``count`` entries."""
        self.words += word
        self.words += b"\n"
        self.starts.append(len(self.words))
        self.begins.append(self.begins[-1] + count)
