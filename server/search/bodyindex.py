"""The body index behind ``match: body`` (docs/SPEC.md §5.7, body mode): postings, ranking,
snippets, built from the per-document records of ``analysis``.

Recall is the spec's: a section is a row when every query term is a token of its text, of its
heading trail, or of the document's tags and title, and at least one is in text or trail; a
document whose tags and title hold every term is one bare row instead of its sections. Order is
ours (``Weights``).

Memory is what bounds a body index, so nothing per posting is a Python object. A term's postings
are a sorted ``array('Q')`` of section keys beside a ``bytearray`` of their flags, so matching
is set algebra in C. A document keeps its analysis but for the postings: section spans, token
counts, names and its compressed vocabulary, to find its postings again on removal. A snippet is
cut again from the body for each row shown. Document ids only grow, so a new document's postings
append in order and a removed one's are one contiguous run per term; a term left without
postings is dropped, so the vocabulary never outgrows the live documents.
"""

from __future__ import annotations

import heapq
import math
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from markproto.protocol.gotext import lower
from markproto.protocol.limits import LOOKUP_MAX, SNIPPET_MAX
from markproto.server.search.analysis import (
    DOC_SHIFT,
    IN_HEADING,
    IN_TRAIL,
    TF_MAX,
    Analysis,
    Postings,
)
from markproto.server.search.catalog import Entry
from markproto.server.search.text import loose_text, strip_line

__all__ = ["BodyIndex", "Hit", "Weights", "snippet"]

_SECTION = (1 << DOC_SHIFT) - 1
"""The section bits of a section key."""


@dataclass(frozen=True, slots=True)
class Weights:
    """The ranking: BM25 over a section's own text; a BM25F-style heading field (each term in the
    section's own heading, normalized by that heading's length); a flat bonus per term found only
    in an ancestor heading, and per term in the document's tags or title; a boost for a bare
    (tags-and-title) row; then the importance prior and the journal demotion. Importance only
    orders rows, it never admits one. ``reference()`` is the reference implementation's."""

    k1: float = 1.2
    b: float = 0.75
    heading: float = 3.5
    heading_b: float = 0.75
    trail: float = 1.5
    doc: float = 2.0
    bare: float = 2.0
    prior_floor: float = 0.3

    @classmethod
    def reference(cls) -> Weights:
        """The reference's weights (SPEC §13.8): every trail term alike (1.5), no heading length
        normalization."""
        return cls(heading=1.5, heading_b=0.0)


def snippet(raw: str, terms: Sequence[str]) -> str:
    """The snippet of a section's raw own text (SPEC §5.7): the first line of its stripped text
    holding the most query terms (as substrings of the lower-cased line; the first line when
    none does), cut to 240 bytes on a rune boundary. Terms never hold whitespace.

    Stripping is line by line, so only the lines that can win are stripped: each line's
    ``loose_text`` bounds its terms from above, and lines are tried best bound first until no
    bound left can beat what was found.
    """
    loose = loose_text(raw)
    bounds: dict[int, int] = {}
    for term in terms:
        line = done = 0  # the line of ``done``, a line start
        at = loose.find(term)
        while at >= 0:
            line += loose.count("\n", done, at)
            bounds[line] = bounds.get(line, 0) + 1
            done = loose.find("\n", at) + 1
            if not done:
                break
            line += 1
            at = loose.find(term, done)
    lines = raw.split("\n")
    best, best_line, best_hits = "", -1, 0
    for line, bound in sorted(bounds.items(), key=lambda item: (-item[1], item[0])):
        if bound < best_hits or (bound == best_hits and line > best_line):
            break
        stripped = strip_line(lines[line])
        hits = sum(map(lower(stripped).__contains__, terms))
        if hits > best_hits or (hits == best_hits and hits and line < best_line):
            best, best_line, best_hits = stripped, line, hits
    if not best_hits:
        best = next(filter(None, map(strip_line, lines)), "")
    return _cut(best)


def _cut(line: str) -> str:
    encoded = line.encode()
    if len(encoded) <= SNIPPET_MAX:
        return line
    cut = SNIPPET_MAX - 3
    while cut > 0 and encoded[cut] & 0xC0 == 0x80:
        cut -= 1
    return encoded[:cut].decode() + "..."


@dataclass(frozen=True, slots=True, eq=False)
class _Doc:
    """A live document: its catalog entry and prior, and its analysis but for the postings."""

    entry: Entry
    content_hash: str
    spans: array[int]
    byte_spans: bool
    lengths: array[int]
    heads: array[int]
    names: str
    name_ends: array[int]
    vocab: bytes
    """The document's terms, newline-joined and compressed: only removal reads them."""
    prior: float

    def name(self, item: int) -> str:
        ends = self.name_ends
        return self.names[ends[item - 1] if item else 0 : ends[item]]


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
    def anchor(self) -> str:
        return self.doc.name(2 * self.section) if self.section >= 0 else ""

    @property
    def heading(self) -> str:
        return self.doc.name(2 * self.section + 1) if self.section >= 0 else ""

    def snippet(self, body: bytes, terms: Sequence[str]) -> str:
        """This row's snippet, cut again from the body it was indexed from."""
        if self.section < 0:
            return ""
        start, end = self.doc.spans[2 * self.section : 2 * self.section + 2]
        if self.doc.byte_spans:
            own = body[start:end].decode()
        else:
            own = body.decode("utf-8", "replace")[start:end]
        return snippet(own, terms)


class _TermPostings:
    """One term's postings: sorted section keys and their flags."""

    __slots__ = ("flags", "keys")

    def __init__(self) -> None:
        self.keys: array[int] = array("Q")
        self.flags = bytearray()

    def flags_for(self, keys: set[int]) -> dict[int, int]:
        """A map holding the flags of those ``keys`` present here: by bisection when ``keys`` are
        few, else all the postings (a superset is as good to look keys up in)."""
        mine, flags = self.keys, self.flags
        if len(keys) * 8 >= len(mine):
            return dict(zip(mine, flags, strict=True))
        size = len(mine)
        return {
            key: flags[at]
            for key in keys
            if (at := bisect_left(mine, key)) < size and mine[at] == key
        }


_NOBODY: frozenset[int] = frozenset()


class BodyIndex:
    """Postings over the sections of every live document."""

    def __init__(self, weights: Weights | None = None) -> None:
        self.weights = weights or Weights()
        self._postings: dict[str, _TermPostings] = {}
        self._holders: dict[str, set[int]] = {}
        """Term -> documents whose tags or title hold it."""
        self._docs: dict[int, _Doc] = {}
        self._ids: dict[str, int] = {}
        self._sizes: dict[int, int] = {}
        """Document id -> number of sections."""
        self._next_id = 0
        self._last = -1
        self._sections = 0
        self._length = 0
        self._heading_length = 0

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def sections(self) -> int:
        return self._sections

    @property
    def terms(self) -> int:
        """Distinct terms with postings (the vocabulary never outgrows the live documents)."""
        return len(self._postings)

    def reserve(self) -> int:
        """The id for the next document to analyze. Analyses must be put in reserve order: ids
        only grow, so each put appends to the postings and keeps them sorted."""
        self._next_id += 1
        return self._next_id - 1

    def put(self, entry: Entry, content_hash: str, analysis: Analysis) -> None:
        """Index (or re-index) a document; its catalog entry supplies tags, title and prior."""
        doc_id = analysis.doc_id
        if doc_id <= self._last:
            raise ValueError(f"document id {doc_id} put out of reserve order")
        self.remove(entry.path)
        self._last = doc_id
        self.extend(analysis.postings)
        for term in entry.terms:
            self._holders.setdefault(term, set()).add(doc_id)
        self._docs[doc_id] = _Doc(
            entry,
            content_hash,
            analysis.spans,
            analysis.byte_spans,
            analysis.lengths,
            analysis.heads,
            analysis.names,
            analysis.name_ends,
            analysis.vocab,
            self._prior(entry),
        )
        self._ids[entry.path] = doc_id
        self._sizes[doc_id] = len(analysis.lengths)
        self._sections += len(analysis.lengths)
        self._length += sum(analysis.lengths)
        self._heading_length += sum(analysis.heads)

    def extend(self, postings: Postings) -> None:
        """Append postings of documents already put, newer than any postings held (a bulk
        build's batch block; ``put`` passes each document's own)."""
        found_postings, keys, flags = self._postings, postings.keys, postings.flags
        start = 0
        terms = postings.terms.split("\n") if postings.terms else ()
        for term, count in zip(terms, postings.counts, strict=True):
            found = found_postings.get(term)
            if found is None:
                found = found_postings[term] = _TermPostings()
            stop = start + count
            found.keys += keys[start:stop]
            found.flags += flags[start:stop]
            start = stop

    def remove(self, path: str) -> None:
        doc_id = self._ids.pop(path, None)
        if doc_id is None:
            return
        doc = self._docs.pop(doc_id)
        del self._sizes[doc_id]
        low, high = doc_id << DOC_SHIFT, (doc_id + 1) << DOC_SHIFT
        vocab = zlib.decompress(doc.vocab).decode()
        for term in vocab.split("\n") if vocab else ():
            found = self._postings[term]
            start = bisect_left(found.keys, low)
            stop = bisect_left(found.keys, high, start)
            if stop - start == len(found.keys):
                del self._postings[term]
            else:
                del found.keys[start:stop]
                del found.flags[start:stop]
        for term in doc.entry.terms:
            holders = self._holders[term]
            holders.discard(doc_id)
            if not holders:
                del self._holders[term]
        self._sections -= len(doc.lengths)
        self._length -= sum(doc.lengths)
        self._heading_length -= sum(doc.heads)

    def search(
        self, terms: Sequence[str], accept: Callable[[Entry], bool] | None = None
    ) -> Iterator[Hit]:
        """Rows for the query terms among accepted documents (all, when ``accept`` is None),
        best first, ties by path then anchor, at most ``LOOKUP_MAX``; lazily, as a LOOKUP
        usually shows only the first few. Statistics (N, df, mean lengths) are the whole
        index's."""
        if not terms:
            return iter(())
        lists = [self._postings.get(term) for term in terms]
        holders = [self._holders.get(term, _NOBODY) for term in terms]
        bare = set(holders[0]).intersection(*holders[1:]) if all(holders) else set()
        keys, flags = self._match(lists, holders, bare)
        if accept is not None or bare:
            # a bare row stands for all of its document's sections
            docs = self._docs
            wanted = {key >> DOC_SHIFT for key in keys}.difference(bare)
            if accept is not None:
                wanted = {doc_id for doc_id in wanted if accept(docs[doc_id].entry)}
                bare = {doc_id for doc_id in bare if accept(docs[doc_id].entry)}
            keys = {key for key in keys if key >> DOC_SHIFT in wanted}
        return self._ranked(
            self._score(keys, lists, holders, flags) + self._score_bare(bare, lists)
        )

    def _match(
        self,
        lists: Sequence[_TermPostings | None],
        holders: Sequence[frozenset[int] | set[int]],
        bare: set[int],
    ) -> tuple[set[int], list[dict[int, int]]]:
        """The matching section keys and, per term, the flags of keys whose text or trail hold
        it (maps may hold keys that did not match).

        A section matches when every term is in its text or trail or in its document's tags or
        title (then at least one is in text or trail, or the document is a bare row). So the
        candidates are the sections of the term with the fewest (its postings, plus every
        section of the documents whose tags or title hold it), narrowed term by term."""
        sizes = self._sizes.__getitem__

        def reach(j: int) -> int:
            return _length(lists[j]) + sum(map(sizes, holders[j]))

        order = sorted(range(len(lists)), key=reach)
        flags: list[dict[int, int]] = [{} for _ in lists]
        first = lists[order[0]]
        if first is not None:
            flags[order[0]] = dict(zip(first.keys, first.flags, strict=True))
        keys = set(flags[order[0]])
        for doc_id in holders[order[0]]:
            if doc_id not in bare:
                keys.update(range(doc_id << DOC_SHIFT, (doc_id << DOC_SHIFT) + sizes(doc_id)))
        for j in order[1:]:
            found, held = lists[j], holders[j]
            here = flags[j] = found.flags_for(keys) if found is not None else {}
            present = keys.intersection(here)
            if held:
                present.update(key for key in keys if key >> DOC_SHIFT in held)
            keys = present
        return keys, flags

    # -- ranking ----------------------------------------------------------------------------------

    def _score(
        self,
        keys: set[int],
        lists: Sequence[_TermPostings | None],
        holders: Sequence[frozenset[int] | set[int]],
        flags: Sequence[dict[int, int]],
    ) -> list[tuple[float, int, int]]:
        """``(-score, document id, section)`` for each of ``keys``."""
        w = self.weights
        n = self._sections
        k1, b, hb = w.k1, w.b, w.heading_b
        # BM25's k1 * (1 - b + b * length / mean), and the heading field's, as c + slope * length
        mean = max(self._length / n if n else 0.0, 1.0)
        mean_heading = max(self._heading_length / n if n else 0.0, 1.0)
        text_c, text_slope = k1 * (1 - b), k1 * b / mean
        head_c, head_slope = 1 + k1 * (1 - hb), k1 * hb / mean_heading
        idf = self._idf(lists)
        terms = [
            (weight * (k1 + 1), found, weight * w.heading * (k1 + 1), weight * w.trail)
            for weight, found in zip(idf, flags, strict=True)
        ]
        held = [(weight * w.doc, ids) for weight, ids in zip(idf, holders, strict=True) if ids]
        docs = self._docs
        out: list[tuple[float, int, int]] = []
        doc_id = -1
        for key in sorted(keys):  # by document, so each document is looked up once
            if key >> DOC_SHIFT != doc_id:
                doc_id = key >> DOC_SHIFT
                doc = docs[doc_id]
                lengths, heads, prior = doc.lengths, doc.heads, -doc.prior
                doc_bonus = sum(bonus for bonus, holding in held if doc_id in holding)
            section = key & _SECTION
            norm = text_c + text_slope * lengths[section]
            raw = doc_bonus
            for text_weight, found, heading, trail in terms:
                flag = found.get(key)
                if flag:
                    tf = flag & TF_MAX
                    if tf:
                        raw += text_weight * tf / (tf + norm)
                    if flag & IN_HEADING:
                        raw += heading / (head_c + head_slope * heads[section])
                    elif flag & IN_TRAIL:
                        raw += trail
            out.append((raw * prior, doc_id, section))
        return out

    def _score_bare(
        self, bare: set[int], lists: Sequence[_TermPostings | None]
    ) -> list[tuple[float, int, int]]:
        """The bare rows: every term in tags or title, each worth the document weight, boosted."""
        w = self.weights
        raw = sum(self._idf(lists)) * w.doc * w.bare
        docs = self._docs
        return [(-raw * docs[d].prior, d, -1) for d in bare]

    def _idf(self, lists: Sequence[_TermPostings | None]) -> list[float]:
        n = self._sections
        return [math.log(1 + (n - df + 0.5) / (df + 0.5)) for df in map(_length, lists)]

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
                if len({doc_id for _, doc_id, _ in group}) == len(group):
                    group.sort(key=lambda row: docs[row[1]].entry.path)
                else:
                    group.sort(
                        key=lambda row: (docs[row[1]].entry.path, docs[row[1]].name(2 * row[2]))
                    )
            for score, doc_id, section in group[: LOOKUP_MAX - given]:
                yield Hit(docs[doc_id], section, -score)
            given += len(group)


def _length(found: _TermPostings | None) -> int:
    return 0 if found is None else len(found.keys)
