"""The LOOKUP catalog (docs/SPEC.md §5.7: the catalog entry, catalog mode, filters): one entry
per live document, filters, and catalog-mode ranking.

An entry is derived from the publisher's persisted metadata and the body. Real markdown (Obsidian
vaults, Hugo sites, OKF repositories) keeps its own metadata in a leading YAML block, so where the
publisher set no ``tags``, ``title``, ``importance`` or ``type``, the document's own frontmatter
fills them in (``protocol.document``, which also gives the title, so clients name a document
alike). ``type`` counts as unset when it is ``Document``: the server writes that default at
publish time, so the stored metadata cannot tell it from an explicit one, and a document that
declares its own type means it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from markproto.protocol import metadata, times
from markproto.protocol.gotext import fold, lower, trim_space
from markproto.protocol.limits import LOOKUP_MAX
from markproto.protocol.paths import in_scope
from markproto.server.search.text import catalog_terms, word_set

if TYPE_CHECKING:
    from markproto.protocol.document import OwnFacts

__all__ = [
    "Catalog",
    "Clause",
    "Entry",
    "FilterError",
    "SavedEntry",
    "parse_filter",
]

_JOURNAL_DEMOTE = 0.5

SavedEntry = tuple[str, str, tuple[str, ...], float, dict[str, str]]
"""What ``Entry.restored`` makes an entry from: path, title, tags, importance, metadata."""


# --- entries -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Entry:
    """A live document as LOOKUP sees it."""

    path: str
    title: str
    tags: tuple[str, ...]
    importance: float
    modified: datetime
    meta: dict[str, str]
    """Persisted publisher metadata plus the frontmatter fallbacks; filters compare against it."""
    demote: float
    """0.5 under a ``journal`` path segment, else 1."""
    title_key: str
    """The title lower-cased per rune, for substring matching."""
    tag_keys: tuple[str, ...]
    """The tags case-folded, for ``EqualFold`` matching: a tuple (a few tags, tested by
    ``in``), the very ``tags`` where folding changes none (a frozenset of two tags and their
    folded copies were 320 bytes an entry)."""

    @property
    def terms(self) -> frozenset[str]:
        """Body-match words of the tags and the title (SPEC §5.7). Made when asked (the body
        index asks as it adds and removes the entry): kept, a set and its words were about
        500 bytes an entry, a twentieth of a FastAPI page's bodies."""
        return frozenset(word_set((*self.tags, self.title)))

    @classmethod
    def build(
        cls, path: str, meta: Mapping[str, str], modified: datetime, facts: OwnFacts
    ) -> Entry:
        """The entry of one version: its publisher metadata completed by its own frontmatter
        where the publisher left ``tags``, ``title``, ``importance`` or ``type`` unset."""
        fills = {}
        for key, value in facts.frontmatter.items():
            current = trim_space(meta.get(key, ""))
            if not current or (key == "type" and current == metadata.DEFAULT_TYPE):
                fills[key] = value
        # the snapshot's own dict, unless a fallback fills a key (never changed once made)
        effective = (
            meta if not fills and isinstance(meta, dict) else metadata.shared({**meta, **fills})
        )
        tags = tuple(metadata.split_tags(effective.get("tags", "")))
        from markproto.protocol import document  # with the analysis that made ``facts``

        title = document.title(path, meta, facts)
        importance = metadata.parse_importance(effective.get("importance"))
        return cls.restored((path, title, tags, importance, effective), modified)

    def saved(self) -> SavedEntry:
        """What ``restored`` makes this entry again from (its modified time aside)."""
        return self.path, self.title, self.tags, self.importance, self.meta

    @classmethod
    def restored(cls, saved: SavedEntry, modified: datetime) -> Entry:
        """An entry from ``saved()`` (a saved index) and its version's modified time."""
        path, title, listed, importance, meta = saved
        # a vault's few tags recur in most of its notes: one string each, not one a note
        tags, title_key = tuple(map(sys.intern, listed)), lower(title)
        return cls(
            path=path,
            title=title,
            tags=tags,
            importance=importance,
            modified=modified,
            meta=meta,
            demote=_JOURNAL_DEMOTE if "journal" in path.split("/") else 1.0,
            title_key=title if title_key == title else title_key,
            tag_keys=_folded(tags),
        )

    def score(self, terms: Sequence[str]) -> int:
        """Catalog-mode score: terms equal to a tag (case-folded) or inside the lower title."""
        return sum(1 for t in terms if fold(t) in self.tag_keys or t in self.title_key)


def _folded(tags: tuple[str, ...]) -> tuple[str, ...]:
    folded = tuple(map(fold, tags))
    return tags if folded == tags else folded


# --- filters -----------------------------------------------------------------------------------


class FilterError(ValueError):
    """A ``filter`` value that does not parse; ``str()`` is the wire message."""


@dataclass(frozen=True, slots=True)
class Clause:
    """One ``key=value`` filter clause; every clause of a filter must hold."""

    key: str
    value: str
    moment: datetime | None = None

    def holds(self, entry: Entry) -> bool:
        if self.key == "tag":
            return fold(self.value) in entry.tag_keys
        if self.moment is not None:
            if self.key == "modified-after":
                return entry.modified > self.moment
            return entry.modified < self.moment
        return entry.meta.get(self.key) == self.value


def parse_filter(text: str) -> tuple[Clause, ...]:
    """Parse a ``filter`` value (SPEC §5.7), raising ``FilterError`` with the wire message."""
    clauses = []
    for raw in trim_space(text).split(","):
        clause = trim_space(raw)
        if not clause:
            continue
        key, eq, value = clause.partition("=")
        key, value = trim_space(key), trim_space(value)
        if not eq or not key or not value:
            raise FilterError(f"malformed filter clause {metadata.go_quote(clause)}")
        moment = None
        if key in ("modified-after", "modified-before"):
            moment = times.parse_time(value) or times.parse_date(value)
            if moment is None:
                raise FilterError(
                    f"filter {key}: invalid date {metadata.go_quote(value)} "
                    "(want RFC 3339 or YYYY-MM-DD)"
                )
        clauses.append(Clause(key, value, moment))
    return tuple(clauses)


# --- the catalog -------------------------------------------------------------------------------


class Catalog:
    """Entries by path. One writer (the event loop), so no locks."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, path: str) -> Entry | None:
        return self._entries.get(path)

    def put(self, entry: Entry) -> None:
        self._entries[entry.path] = entry

    def remove(self, path: str) -> Entry | None:
        return self._entries.pop(path, None)

    def entries(self) -> Iterable[Entry]:
        return self._entries.values()

    def match(self, query: str, scope: str, clauses: Sequence[Clause] = ()) -> list[Entry]:
        """Catalog mode (SPEC §5.7): up to ``LOOKUP_MAX`` entries in scope passing every clause,
        by score, importance, newest, path. ``*`` matches all with score 0."""
        match_all = trim_space(query) == "*"
        terms = catalog_terms(query)
        if not match_all and not terms:
            return []
        found = []
        for entry in self._entries.values():
            if not in_scope(entry.path, scope) or not all(c.holds(entry) for c in clauses):
                continue
            score = 0 if match_all else entry.score(terms)
            if match_all or score:
                found.append((-score, -entry.importance, -entry.modified.timestamp(), entry))
        found.sort(key=lambda row: (*row[:3], row[3].path))
        return [row[3] for row in found[:LOOKUP_MAX]]
