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
from collections.abc import Iterator
from itertools import chain, repeat
from operator import add
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

    def extend(self, terms: str, counts: array[int], entries: array[int], base: int) -> None:
        """Append a run of postings (``analysis.Postings``: slots from ``base``, at or past
        ``top``, so after every entry of each term), combining an entry with the last one of
        the same section (a section split between two runs)."""
        tail, shift = self._tail, base << _SHIFT
        begin = 0
        for term, count in zip(terms.split("\n") if terms else (), counts, strict=True):
            stop = begin + count
            part = entries[begin:stop]
            if shift:
                part = array("I", map(add, part, repeat(shift)))
            found = tail.get(term)
            if found is None:
                tail[term] = part
            elif found[-1] >> _SHIFT == part[0] >> _SHIFT:
                found[-1] = combine(found[-1], part[0])
                found += part[1:]
            else:
                found += part
            begin = stop
        self._tail_entries += len(entries)

    def remove(self, low: int, high: int) -> None:
        """Forget the entries of slots ``[low, high)`` (one document's): a dead range in the
        frozen segment, else a search of every term of the tail (the writes since the last
        merge: a document's own terms are not kept, and to analyse it again costs more)."""
        if low < self._top:
            insort(self._dead, (low, high))
            return
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
            out = _Segment()
            if self._dead:  # every term's entries to cut
                for word, found in self._merged():
                    out.add(word, len(found))
                    out.entries += found
                entries = out.entries
            else:  # the frozen terms between two of the tail's are copied as they are, in C
                terms, ats, same = self._places()
                tail, begins, done = self._tail, self._begins, 0
                for term, at, matched in zip(terms, ats, same, strict=True):
                    out.copy(self, done, at)
                    count = len(tail[term]) + (begins[at + 1] - begins[at] if matched else 0)
                    out.add(_encode(term), count)
                    done = at + matched
                out.copy(self, done, len(begins) - 1)
                entries = self._spread(terms, ats, same)
                del terms, ats, same, tail, begins
            self._words = bytes(out.words)
            self._begins, self._entries, self._starts = out.begins, entries, out.starts
            self._tail, self._tail_entries, self._dead, self._lent = {}, 0, [], False
            self._sample = _sample(self._words, out.starts)  # the merge's transients freed first
        self._top = top

    def _places(self) -> tuple[list[str], array[int], bytes]:
        """The tail's terms, ascending; for each, the number of the first frozen term not
        before it, and whether that term is the same (1) or not (0). Flat arrays and one list,
        not an object a term: what the merge holds throughout, beside what it writes (see
        ``_sample``)."""
        tail, words, starts, sample = self._tail, self._words, self._starts, self._sample
        count = len(starts) - 1

        def term_at(number: int) -> bytes:
            return words[starts[number] : starts[number + 1] - 1]

        terms = sorted(tail)  # code point order is UTF-8's
        ats, same = array("I"), bytearray()
        done = 0
        for term in terms:
            key = _encode(term)
            low = max((bisect_right(sample, key) - 1) * SAMPLE, done)
            at = bisect_left(range(count), key, low, min(low + SAMPLE, count), key=term_at)
            matched = at < count and term_at(at) == key
            ats.append(at)
            same.append(matched)
            done = at + matched
        return terms, ats, bytes(same)

    def _spread(self, terms: list[str], ats: array[int], same: bytes) -> array[int]:
        """The frozen entries with each tail term's after its frozen ones (``_places``), moved
        from the back in the frozen array itself, grown by the tail's size: a merge holds the
        segment once, where a new array held it twice (at FastAPI x5, 2 MB of entries, the
        publish's peak). Into a new array when ``dump`` lent the frozen one out."""
        old, tail, begins = self._entries, self._tail, self._begins
        size = len(old)
        grown = size + sum(map(len, tail.values()))  # (``_tail_entries`` counts combined ones)
        if self._lent:
            entries = array("I", bytes(4 * grown))
            entries[:size] = old
        else:
            entries = old
            entries.frombytes(bytes(4 * (grown - size)))
        view = memoryview(entries)
        read, write = size, grown
        for number in range(len(terms) - 1, -1, -1):
            at, matched, found = ats[number], same[number], tail[terms[number]]
            begin = begins[at + matched]
            view[write - (read - begin) : write] = view[begin:read]  # overlapping: a memmove
            write -= read - begin
            view[write - len(found) : write] = found
            write -= len(found)
            read = begin
            if matched:
                begin = begins[at]
                view[write - (read - begin) : write] = view[begin:read]
                write -= read - begin
                read = begin
        view.release()
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

    def copy(self, old: PostingLists, first: int, stop: int) -> None:
        """The frozen terms ``first`` to ``stop`` (excluded) of ``old``, as they are."""
        if stop <= first:
            return
        starts = old._starts
        shift = len(self.words) - starts[first]
        self.starts.extend(map(add, starts[first + 1 : stop + 1], repeat(shift)))
        self.words += old._words[starts[first] : starts[stop]]
        shift = self.begins[-1] - old._begins[first]
        self.begins.extend(map(add, old._begins[first + 1 : stop + 1], repeat(shift)))
