"""The words of links (how one is written, its kind, its state), their bounds, and ``Link``:
what the link index keeps and answers with, importable without the rules of ``links`` (whose
patterns compile at import), so a server with no documents yet never loads those."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

__all__ = [
    "AUTOLINK",
    "EXTERNAL",
    "HTML",
    "INLINE",
    "INTERNAL",
    "LABEL_MAX",
    "LINKS_MAX",
    "MISSING",
    "MISSING_ANCHOR",
    "OK",
    "REFERENCE",
    "RELATION",
    "RELATION_PREFIX",
    "TARGET_MAX",
    "WIKI",
    "Link",
    "relations",
]

INLINE, REFERENCE, AUTOLINK, HTML, WIKI, RELATION = (
    "inline",
    "reference",
    "autolink",
    "html",
    "wikilink",
    "relation",
)
"""How a link is written (``Link.syntax``)."""
RELATION_PREFIX = "rel-"
LINKS_MAX = 10_000
"""Links kept per document (the rest are not indexed): bounds what one body may cost."""
TARGET_MAX = 2048
"""Characters of a target; a longer one is not a link anyone follows."""
LABEL_MAX = 200
"""Characters of a label kept (cut on a character, with an ellipsis)."""


class Link(NamedTuple):
    """One link as written: where it is (a 1-based line of the body and the anchor of the
    section holding it, ``""`` before the first heading), its target as written, its label
    (plain text on one line), how it is written, and for a relation its predicate. A tuple:
    a body may hold thousands, made in the analysis of every document."""

    line: int
    section: str
    target: str
    label: str
    syntax: str
    predicate: str = ""


INTERNAL, EXTERNAL = "internal", "external"
"""A link's kind, with ``RELATION``."""
OK, MISSING, MISSING_ANCHOR = "ok", "missing", "missing-anchor"
"""A link's state: it leads to a document (and section) that exists, or to no document, or to a
section its document does not have; an external link's state is ``EXTERNAL`` (not checked)."""


def relations(meta: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """The typed relations of a document's metadata: ``(predicate, target)`` for each
    ``rel-<predicate>`` key (sorted) and each comma-separated target of its value."""
    for key in sorted(meta):
        if key.startswith(RELATION_PREFIX) and len(key) > len(RELATION_PREFIX):
            for target in meta[key].split(","):
                if target.strip():
                    yield key[len(RELATION_PREFIX) :], target.strip()
