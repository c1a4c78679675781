"""The link index (docs/SPEC.md §5.9): every link of every live document, what links to each
document, and where each link leads for a given reader.

A document's links come from its analysis (``analysis.Analysis.links``, found in the same pass
that feeds the body index) as one compressed record, and its typed relations from its metadata
(kept by reference: the snapshot holds the same dict). What a link resolves to is never stored:
it depends on which documents exist and on who asks (a reader's view has only the documents it
may read, so a link never resolves to, or is counted from, one it may not). So the index keeps
what does not change until the document does, and answers by resolving at query time:

- per document, its packed links, its anchors (the very string the body index keeps) and its
  metadata;
- for every path (and wikilink file name) a link may lead to, which links may lead there: the
  backlinks of a document are the links listed under its path (and its file name) that resolve
  to it for this reader.

So an update touches only the document itself: no other document's entry changes when one
appears or goes, which is what makes the index equal to one rebuilt from scratch after any
sequence of writes (tests/server/search/test_links.py).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

from markproto.protocol import linkkinds as kinds
from markproto.protocol import paths
from markproto.protocol.chars import has_control
from markproto.protocol.linkkinds import (
    EXTERNAL,
    RELATION,
    Link,
    relations,
)
from markproto.server.search import intmap

if TYPE_CHECKING:
    from markproto.server.search.analysis import Analysis, Outline

__all__ = [
    "Edge",
    "LinkIndex",
    "SavedLinks",
    "links_of",
    "pack",
    "pack_tails",
    "tail",
    "unpack",
]


_FIELD, _RECORD = "\x1f", "\x1e"
_RECORD_BYTE, _FIELD_BYTE = _RECORD.encode(), _FIELD.encode()
_LINE_FIELD = b"%d" + _FIELD_BYTE
"""A record's line and the mark after it, for ``%``."""
_SYNTAX = (kinds.INLINE, kinds.REFERENCE, kinds.AUTOLINK, kinds.HTML, kinds.WIKI)
_CODE = {syntax: str(number) for number, syntax in enumerate(_SYNTAX)}
_INFLATE = 32 << 10
"""Bytes of records inflated, and of the packed record fed, at a time (``links_of``)."""
_LINK_SHIFT = 17
_LINK_MASK = (1 << 16) - 1
"""An entry of the backlink lists is ``document << 17 | link << 1 | first``: ``LINKS_MAX``
links and the relations after them fit in 16 bits; ``first`` says the path it is listed under
is the link's first candidate and the link names no server (``mark://``), so that it leads
there whenever the path is a document the reader may read, without reading the link."""


def pack(found: Iterable[Link]) -> tuple[bytes, int]:
    """A document's links as one compressed record (what the index keeps), and how many.
    A link whose target or section holds a control character is left out: no request could
    name it."""
    return pack_tails(
        (link.line, link.section, rest) for link in found if (rest := tail(link)) is not None
    )


def tail(link: Link) -> bytes | None:
    """What ``pack`` keeps of a link but its line and section, in UTF-8 (None: it is left
    out), so a caller that learns the sections later holds a few bytes a link meanwhile. A
    printable string holds no control character: most are judged by that one C loop."""
    target, label = link.target, link.label
    if not target.isprintable() and has_control(target, tab_ok=True):
        return None
    if not label.isprintable() and has_control(label):
        label = " ".join(label.split())
    return f"{_CODE[link.syntax]}{_FIELD}{target}{_FIELD}{label}".encode("utf-8", "surrogatepass")


_WINDOW_BITS, _MEMORY_LEVEL = 13, 4
"""The compressor's window (8 KiB) and hash table: its state is 80 KB, not zlib's default 300
KB, which every analysis of a body with links held; the FastAPI corpus's records come out 1%
larger (bodies of links alone, smaller). ``zlib.decompress`` reads any window."""


_BATCH = 64
"""Records compressed at a time: the compressor's output is the same however its input is cut,
and one call a record cost more than the compressing."""


def pack_tails(found: Iterable[tuple[int, str, bytes | bytearray]]) -> tuple[bytes, int]:
    """``pack`` of links given as line, section and ``tail``, in the order of the body,
    compressed as they come (the record is never held whole)."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, _WINDOW_BITS, _MEMORY_LEVEL)
    out: list[bytes] = []
    batch: list[bytes] = []
    count = 0
    named, marked = "", _FIELD_BYTE * 2
    """The last section seen, in UTF-8 between field marks (``b""``: it holds a control
    character): what goes in for the tail's first mark, the one after its code digit."""
    for line, section, rest in found:
        if section != named:
            named = section
            marked = (
                b""
                if has_control(section)
                else _FIELD_BYTE + section.encode("utf-8", "surrogatepass") + _FIELD_BYTE
            )
        if not marked:
            continue
        # line, code, section, target and label: the tail is code, target and label
        batch.append(_LINE_FIELD % line + rest.replace(_FIELD_BYTE, marked, 1))
        count += 1
        if len(batch) == _BATCH:
            _compress(compressor, batch, count, out)
    if not count:
        return b"", 0
    if batch:
        _compress(compressor, batch, count, out)
    out.append(compressor.flush())
    return b"".join(out), count


def _compress(compressor: zlib._Compress, batch: list[bytes], count: int, out: list[bytes]) -> None:
    """``batch``'s records into ``out`` (``count`` records so far, the batch's among them), and
    let go."""
    piece = _RECORD_BYTE.join(batch)
    chunk = compressor.compress(_RECORD_BYTE + piece if count > len(batch) else piece)
    if chunk:  # most batches add nothing yet: no empty chunk held for each
        out.append(chunk)
    batch.clear()


def unpack(data: bytes, start: int = 0, stop: int | None = None) -> list[Link]:
    """The links ``pack`` packed (those from ``start`` to ``stop``)."""
    return list(islice(links_of(data), start, stop))


def links_of(data: bytes) -> Iterator[Link]:
    """The links ``pack`` packed, one at a time (``_records``)."""
    return map(_link, _records(data))


def _records(data: bytes) -> Iterator[bytes]:
    """The records ``pack`` packed, one at a time, each decoded on its own: a document's
    thousands are never all objects, nor one string, at once (the release notes' 7,203 links
    decoded whole are a 2 MB string: one emoji makes every character of it four bytes). The
    record is inflated ``_INFLATE`` bytes at a time: ``zlib.decompress`` of the release notes'
    500 KB of records peaked at 1.9 MB (its growing output blocks, then their join), at the
    moment a live publish of them peaked."""
    if not data:
        return
    inflater = zlib.decompressobj()
    view, at = memoryview(data), 0
    carry = tail = b""
    while not inflater.eof:
        if not tail and at < len(view):  # fed a piece at a time too: each call copies its tail
            tail, at = view[at : at + _INFLATE].tobytes(), at + _INFLATE
        chunk = inflater.decompress(tail, _INFLATE)
        tail = inflater.unconsumed_tail
        if not chunk and not tail and at >= len(view):
            break  # truncated: what was whole is given
        *records, carry = (carry + chunk).split(_RECORD_BYTE)
        yield from records
    yield carry


def _link(record: bytes) -> Link:
    line, code, section, target, label = record.decode("utf-8", "surrogatepass").split(_FIELD)
    return Link(int(line), section, target, label, _SYNTAX[int(code)])


@dataclass(frozen=True, slots=True)
class Edge:
    """One link as a reader sees it. ``target`` is the document it leads to for this reader
    (or, when none, the path it names, cleaned), or the URL of an external one; ``raw`` is the
    target as written."""

    source: str
    section: str
    line: int
    target: str
    anchor: str
    raw: str
    label: str
    kind: str
    predicate: str
    state: str
    syntax: str
    number: int
    """The link's place among its source's links (relations last): with ``source``, its key."""

    @property
    def internal(self) -> bool:
        return self.kind != EXTERNAL and self.state != EXTERNAL


@dataclass(slots=True, eq=False)
class _Doc:
    number: int
    path: str
    links: bytes
    count: int
    """Body links in ``links`` (relations are numbered after them)."""
    meta: Mapping[str, str]
    outline: Outline
    """The body index's sections (``Analysis.outline``), shared, not copied."""
    ids: str
    """Anchors HTML elements set, newline-joined (``Analysis.ids``)."""

    def headings(self) -> tuple[list[str], list[str]]:
        """Each section's anchor and heading text."""
        outline = self.outline
        texts = list(map(outline.heading, range(len(outline))))
        return list(map(outline.anchor, range(len(outline)), texts)), texts

    def link(self, number: int) -> Link:
        if number < self.count:
            return unpack(self.links, number, number + 1)[0]
        predicate, target = list(relations(self.meta))[number - self.count]
        return Link(0, "", target, "", RELATION, predicate)

    def targets(self) -> Iterator[tuple[str, str]]:
        """Each link's target and syntax, in the links' order (relations last)."""
        for record in _records(self.links):
            code, target = record.split(_FIELD_BYTE, 4)[1:4:2]
            yield target.decode("utf-8", "surrogatepass"), _SYNTAX[int(code)]
        for _, relation in relations(self.meta):
            yield relation, RELATION

    def chosen(self, wanted: frozenset[str] | None) -> tuple[int, list[tuple[int, Link]]]:
        """The links ``wanted`` keeps (predicates, ``""`` for body links; None: all): how many
        body links, and the relations with their numbers."""
        body = self.count if wanted is None or "" in wanted else 0
        kept = [
            (self.count + number, Link(0, "", target, "", RELATION, predicate))
            for number, (predicate, target) in enumerate(relations(self.meta))
            if wanted is None or predicate in wanted
        ]
        return body, kept


Readable = Callable[[str], bool]
SavedLinks = tuple[bytes, int, str]
"""A document's packed links, how many, and its HTML ids (``LinkIndex.saved``)."""


def _everyone(path: str) -> bool:
    return True


class LinkIndex:
    """The links of the live documents. One writer (the event loop)."""

    def __init__(self, authorities: Iterable[str] = ()) -> None:
        self.authorities = frozenset(authorities)
        """``host:port`` names of this server: a ``mark://`` URL to one of them is internal."""
        self._docs: dict[str, _Doc] = {}
        self._numbers: dict[int, _Doc] = {}
        self._next = 0
        self._wants: intmap.IntMap = {}
        """A path (or a lower-cased file name) -> the links that may lead there."""
        self._named: intmap.IntMap = {}
        """A lower-cased file name -> the documents of that name."""

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, path: object) -> bool:
        return path in self._docs

    # -- keeping current ----------------------------------------------------------------------

    def apply(self, path: str, analysis: Analysis, meta: Mapping[str, str]) -> None:
        """Make ``path``'s links those of ``analysis`` and ``meta`` (replacing any before)."""
        self.put(path, (analysis.links, analysis.link_count, analysis.ids), analysis.outline, meta)

    def put(self, path: str, record: SavedLinks, outline: Outline, meta: Mapping[str, str]) -> None:
        """Make ``path``'s links those of ``record`` (``saved``) and ``meta``."""
        self.remove(path)
        packed, count, ids = record
        doc = _Doc(self._next, path, packed, count, meta, outline, ids)
        self._next += 1
        self._docs[path] = doc
        self._numbers[doc.number] = doc
        intmap.add(self._named, paths.base(path).lower(), doc.number)
        for key, entry in self._keys(doc):
            intmap.add(self._wants, key, entry)

    def saved(self, path: str) -> SavedLinks | None:
        """What ``put`` makes ``path``'s links again from (a saved index), if it is indexed."""
        doc = self._docs.get(path)
        return None if doc is None else (doc.links, doc.count, doc.ids)

    def remove(self, path: str) -> None:
        doc = self._docs.pop(path, None)
        if doc is None:
            return
        del self._numbers[doc.number]
        intmap.discard(self._named, paths.base(path).lower(), doc.number)
        for key, entry in self._keys(doc):
            intmap.discard(self._wants, key, entry)

    def _keys(self, doc: _Doc) -> Iterator[tuple[str, int]]:
        # The link rules are imported with the first document: their patterns compile at
        # import, and a server with no documents never needs them.
        from markproto.protocol.links import offsite, parse_target

        base = doc.number << _LINK_SHIFT
        for number, (raw, syntax) in enumerate(doc.targets()):
            if offsite(raw, syntax):
                continue  # most links: no path they may lead to
            target = parse_target(raw, doc.path, syntax)
            keys = target.keys
            if target.name and len(target.candidates) > 1:
                # a wikilink's later candidates end in its file name, which is a key of its
                # own: ``inbound`` finds it there (and checks where it lands) without them
                keys = keys[:1] + keys[len(target.candidates) :]
            for rank, key in enumerate(keys):
                first = rank == 0 and bool(target.candidates) and not target.authority
                yield key, base | number << 1 | first

    # -- queries ------------------------------------------------------------------------------

    def paths(self) -> Iterator[str]:
        return iter(self._docs)

    def outbound(
        self,
        path: str,
        readable: Readable = _everyone,
        *,
        wanted: frozenset[str] | None = None,
        start: int = 0,
        stop: int | None = None,
    ) -> list[Edge]:
        """The links of document ``path`` (none when it is not live) as ``readable`` sees them:
        those ``wanted`` keeps (``LinksQuery.relations``), from ``start`` to ``stop`` of them
        (only those are resolved: a page of a long document costs its page)."""
        doc = self._docs.get(path)
        if doc is None:
            return []
        view = _View(self, readable)
        body, kept = doc.chosen(wanted)
        stop = body + len(kept) if stop is None else min(stop, body + len(kept))
        edges = []
        if start < body:
            for number, link in enumerate(unpack(doc.links, start, min(stop, body)), start):
                edges.append(view.edge(doc, number, link))
        for number, link in kept[max(start - body, 0) : max(stop - body, 0)]:
            edges.append(view.edge(doc, number, link))
        return edges

    def outbound_count(self, path: str, wanted: frozenset[str] | None = None) -> int:
        """How many links ``outbound`` lists for ``path`` (read auth does not change it)."""
        doc = self._docs.get(path)
        if doc is None:
            return 0
        body, kept = doc.chosen(wanted)
        return body + len(kept)

    def inbound(self, path: str, readable: Readable = _everyone) -> list[Edge]:
        """The links from other documents ``readable`` may read that lead to ``path`` for it,
        by source path, then place."""
        return self.inbound_page(path, readable)[0]

    def inbound_page(
        self,
        path: str,
        readable: Readable = _everyone,
        *,
        wanted: frozenset[str] | None = None,
        start: int = 0,
        stop: int | None = None,
    ) -> tuple[list[Edge], int]:
        """``inbound``'s links that ``wanted`` keeps, from ``start`` to ``stop`` of them, and how
        many there are: each is only found to lead here (``links.lands``); only those on the
        page are followed in full (their anchors checked), so a page of a hub's thousands of
        backlinks costs little more than counting them."""
        from markproto.protocol.links import lands  # loaded by the documents' keys already

        view = _View(self, readable)
        if not view.exists(path):
            return [], 0
        found: dict[tuple[int, int], int] = {}
        for key in (path, paths.base(path).lower()):
            for entry in intmap.values(self._wants, key):
                place = (entry >> _LINK_SHIFT, entry >> 1 & _LINK_MASK)
                found[place] = found.get(place, 0) | entry & 1
        numbers = self._numbers
        candidates = [(numbers[doc], number, first) for (doc, number), first in found.items()]
        candidates.sort(key=lambda item: (item[0].path, item[1]))
        edges: list[Edge] = []
        total = 0
        for doc, number, first in candidates:
            if doc.path == path or not readable(doc.path):
                continue
            link = None if first else doc.link(number)
            if wanted is not None:
                if number < doc.count:
                    predicate = ""
                else:
                    link = link or doc.link(number)
                    predicate = link.predicate
                if predicate not in wanted:
                    continue
            if link is not None and lands(link, doc.path, view) != path:
                continue
            if start <= total and (stop is None or total < stop):
                edges.append(view.edge(doc, number, link or doc.link(number)))
            total += 1
        return edges, total

    def memory(self) -> int:
        """Bytes the index holds of its own (what it shares with the body index and the
        snapshot aside): the size of every object it made."""
        size = sys.getsizeof
        total = size(self._docs) + size(self._numbers) + size(self._wants) + size(self._named)
        for doc in self._docs.values():
            total += size(doc) + size(doc.links) + size(doc.number) + size(doc.ids)
        for table in (self._wants, self._named):
            for key, entries in table.items():
                total += size(key) + size(entries)
        return total


class _View:
    """The index as one reader sees it (a ``links.World``): only documents it may read exist."""

    def __init__(self, index: LinkIndex, readable: Readable) -> None:
        self._index = index
        self._readable = readable

    def exists(self, path: str) -> bool:
        return path in self._index._docs and self._readable(path)

    def named(self, name: str) -> Iterator[str]:
        numbers = self._index._numbers
        for number in intmap.values(self._index._named, name):
            path = numbers[number].path
            if self._readable(path):
                yield path

    def anchors(self, path: str) -> tuple[list[str], list[str], list[str]]:
        doc = self._index._docs[path]
        anchors, texts = doc.headings()
        return anchors, texts, doc.ids.split("\n") if doc.ids else []

    def ours(self, authority: str) -> bool:
        return authority in self._index.authorities

    def edge(self, doc: _Doc, number: int, link: Link) -> Edge:
        from markproto.protocol.links import follow  # loaded by the documents' keys already

        to = follow(link, doc.path, self)
        return Edge(
            doc.path,
            link.section,
            link.line,
            to.target,
            to.anchor,
            link.target,
            link.label,
            to.kind,
            link.predicate,
            to.state,
            link.syntax,
            number,
        )
