"""The LOOKUP catalog (protocol.md §10.1, §10.2, §10.5): one entry per live document, filters, and
catalog-mode ranking.

An entry is derived from the publisher's persisted metadata and the body. Real markdown (Obsidian
vaults, Hugo sites, OKF repositories) keeps its own metadata in a leading YAML block, so where the
publisher set no ``tags``, ``title``, ``importance`` or ``type``, the document's own frontmatter
fills them in: every value read as a string (YAML lists of tags joined ``a,b``), nested maps
ignored, malformed YAML ignored. ``type`` counts as unset when it is ``Document``: the server
writes that default at publish time, so the stored metadata cannot tell it from an explicit one,
and a document that declares its own type means it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import yaml
from frontmatter.default_handlers import YAMLHandler

from markproto.protocol import mdoutline, metadata
from markproto.protocol.gotext import SPACE, fold, lower, trim_space
from markproto.protocol.limits import LOOKUP_MAX
from markproto.protocol.paths import base, in_scope
from markproto.server.search.text import catalog_terms, word_set

log = logging.getLogger("markproto.server.search.catalog")

__all__ = [
    "Catalog",
    "Clause",
    "Entry",
    "FilterError",
    "OwnFacts",
    "own_facts",
    "parse_filter",
]

_LOADER: Any = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
"""A loader that keeps every scalar a string: python-frontmatter's default would coerce."""
_HANDLER = YAMLHandler()
_FALLBACK_KEYS = ("tags", "title", "importance", "type")
_JOURNAL_DEMOTE = 0.5
_H1 = re.compile(f"^[{re.escape(SPACE.replace(chr(10), ''))}]*# ", re.MULTILINE)


# --- entries -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnFacts:
    """What the catalog reads from a body: its frontmatter's fallback keys and its first
    ``# `` line. Computed apart from the entry so bulk indexing can do it in a worker."""

    frontmatter: dict[str, str]
    h1: str


def own_facts(body: str | bytes) -> OwnFacts:
    """The facts of a body; UTF-8 bytes are read a piece at a time, never decoded whole."""
    block, content = mdoutline.split_frontmatter(body)
    fallbacks = _frontmatter(block) if block is not None else {}
    if isinstance(body, str):
        return OwnFacts(fallbacks, _first_h1(body, content))
    return OwnFacts(fallbacks, _first_h1_of_bytes(body, content))


def _frontmatter(block: str) -> dict[str, str]:
    """The fallback keys of a document's own frontmatter. ``mdoutline`` decides where the block
    is (one rule with the section splitter); python-frontmatter's YAML handler reads it."""
    try:
        data = _HANDLER.load(block, Loader=_LOADER)
    except (yaml.YAMLError, RecursionError) as exc:
        log.debug("ignoring a document's malformed frontmatter: %s", exc)
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for key in _FALLBACK_KEYS:
        value = data.get(key)
        if key == "tags" and isinstance(value, list):
            value = ",".join(item for item in value if isinstance(item, str))
        if isinstance(value, str):
            if key == "tags":
                value = metadata.normalize_tags(value)
            if trim_space(value):
                out[key] = value
    return out


def _first_h1(body: str, start: int) -> str:
    """The reference's title fallback: the first line that, trimmed, starts with ``# `` (a naive
    scan: a ``# x`` in a code fence counts). The document's own frontmatter is not scanned."""
    match = _H1.search(body, start)
    if match is None:
        return ""
    end = body.find("\n", match.end())
    return trim_space(body[match.end() : end if end >= 0 else len(body)])


_PIECE = 1 << 16


def _first_h1_of_bytes(body: bytes, content: int) -> str:
    """``_first_h1`` of the decoded body, decoding line-aligned pieces until one holds it."""
    start = 0
    while start < len(body):
        stop = body.find(b"\n", start + _PIECE) + 1 or len(body)
        piece = body[start:stop].decode("utf-8", "replace")
        # the first piece includes what comes before the content (a BOM is not a line start)
        offset = len(body[:content].decode("utf-8", "replace")) if start == 0 else 0
        if _H1.search(piece, offset) is not None:
            return _first_h1(piece, offset)
        start = max(stop, content)
    return ""


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
    terms: frozenset[str]
    """Body-match words of the tags and the title (§10.1)."""
    demote: float
    """0.5 under a ``journal`` path segment, else 1."""
    title_key: str
    """The title lower-cased per rune, for substring matching."""
    tag_keys: frozenset[str]
    """The tags case-folded, for ``EqualFold`` matching."""

    @classmethod
    def build(
        cls, path: str, meta: Mapping[str, str], modified: datetime, facts: OwnFacts
    ) -> Entry:
        """The entry of one version: its publisher metadata completed by its own frontmatter
        where the publisher left ``tags``, ``title``, ``importance`` or ``type`` unset."""
        effective = dict(meta)
        for key, value in facts.frontmatter.items():
            current = trim_space(effective.get(key, ""))
            if not current or (key == "type" and current == metadata.DEFAULT_TYPE):
                effective[key] = value
        tags = tuple(metadata.split_tags(effective.get("tags", "")))
        title = trim_space(effective.get("title", "")) or facts.h1 or base(path)
        return cls(
            path=path,
            title=title,
            tags=tags,
            importance=metadata.parse_importance(effective.get("importance")),
            modified=modified,
            meta=effective,
            terms=frozenset(word_set((*tags, title))),
            demote=_JOURNAL_DEMOTE if "journal" in path.split("/") else 1.0,
            title_key=lower(title),
            tag_keys=frozenset(fold(tag) for tag in tags),
        )

    def score(self, terms: Sequence[str]) -> int:
        """Catalog-mode score: terms equal to a tag (case-folded) or inside the lower title."""
        return sum(1 for t in terms if fold(t) in self.tag_keys or t in self.title_key)


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


_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,]([0-9]+))?"
    r"(?:Z|([+-])([0-9]{2}):([0-9]{2}))"
)
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")


def parse_filter(text: str) -> tuple[Clause, ...]:
    """Parse a ``filter`` value (§10.5), raising ``FilterError`` with the reference's message."""
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
            moment = _parse_time(value)
            if moment is None:
                raise FilterError(
                    f"filter {key}: invalid date {metadata.go_quote(value)} "
                    "(want RFC 3339 or YYYY-MM-DD)"
                )
        clauses.append(Clause(key, value, moment))
    return tuple(clauses)


def _parse_time(value: str) -> datetime | None:
    """Go ``time.Parse`` with ``time.RFC3339`` (fractions beyond microseconds truncated), then
    ``2006-01-02`` as UTC midnight."""
    try:
        if stamp := _RFC3339.fullmatch(value):
            year, month, day, hour, minute, second, fraction, sign, oh, om = stamp.groups()
            zone = UTC
            if sign is not None:
                if int(oh) > 23 or int(om) > 59:
                    return None
                offset = timedelta(hours=int(oh), minutes=int(om))
                zone = timezone(-offset if sign == "-" else offset)
            micro = int((fraction or "0")[:6].ljust(6, "0"))
            return datetime(
                int(year), int(month), int(day), int(hour), int(minute), int(second), micro, zone
            )
        if date := _DATE.fullmatch(value):
            year, month, day = map(int, date.groups())
            return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return None


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
        """Catalog mode (§10.2): up to ``LOOKUP_MAX`` entries in scope passing every clause,
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
