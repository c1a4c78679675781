"""What a document says about itself, and its title (SPEC §5.7, the catalog entry).

The LOOKUP catalog and the client's views (the MCP bridge's fetch) both name a document, and a
name that differs between a lookup row and the fetched page confuses whoever reads both. So the
rule is here once:

* **own facts**: where the publisher set no ``tags``, ``title``, ``importance`` or ``type``, the
  document's own leading frontmatter (§9.1, found by ``mdoutline``) fills them in. Every value
  is read as a string (a YAML list of tags is joined ``a,b``); nested maps, other types and
  malformed YAML are ignored. And the first ``# `` line of the content: the first line after
  any frontmatter that, trimmed of Go whitespace, starts with ``# `` (a plain line scan: a
  ``# x`` in a code fence counts, and a bare ``#`` line does not).
* **title**: the publisher's trimmed ``title``; else the frontmatter's; else that first ``# ``
  line, trimmed; else the last segment of the path.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from markproto.protocol import mdoutline, metadata
from markproto.protocol.gotext import SPACE, trim_space
from markproto.protocol.paths import base

__all__ = ["FALLBACK_KEYS", "OwnFacts", "own_facts", "title"]

log = logging.getLogger("markproto.protocol.document")

FALLBACK_KEYS = ("tags", "title", "importance", "type")
"""The keys a document's own frontmatter may supply."""
_LINE_SPACE = re.escape(SPACE.replace("\n", ""))
_H1_HERE = re.compile(f"[{_LINE_SPACE}]*# ")
_H1 = re.compile(f"^[{_LINE_SPACE}]*# ", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class OwnFacts:
    """A body's frontmatter fallback keys and its first ``# `` line. Computed apart from any
    metadata, so bulk indexing can do it in a worker process."""

    frontmatter: dict[str, str]
    h1: str


def own_facts(body: str | bytes) -> OwnFacts:
    """The facts of a body; UTF-8 bytes are read a piece at a time, never decoded whole (a large
    body's transient memory stays a few times its size)."""
    block, content = mdoutline.split_frontmatter(body)
    fallbacks = _fallbacks(block) if block is not None else {}
    if isinstance(body, str):
        return OwnFacts(fallbacks, _first_h1(body, content))
    return OwnFacts(fallbacks, _first_h1_of_bytes(body, content))


def title(path: str, meta: Mapping[str, str], facts: OwnFacts) -> str:
    """The document's title, from its publisher metadata ``meta`` and its own facts."""
    return (
        trim_space(meta.get("title", ""))
        or trim_space(facts.frontmatter.get("title", ""))
        or facts.h1
        or base(path)
    )


def _fallbacks(block: str) -> dict[str, str]:
    """The fallback keys of a frontmatter block, read with a loader that keeps every scalar a
    string, as protocol metadata is (PyYAML is imported by the first block read)."""
    import yaml

    try:
        data = yaml.load(block, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    except (yaml.YAMLError, RecursionError) as exc:
        log.debug("ignoring a document's malformed frontmatter: %s", exc)
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for key in FALLBACK_KEYS:
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
    """The rest of the first content line that, trimmed, starts with ``# ``, trimmed."""
    match = _H1_HERE.match(body, start)  # the content's first line, also right after a BOM
    while True:
        if match is None:
            match = _H1.search(body, start)
            if match is None:
                return ""
        end = body.find("\n", match.end())
        end = len(body) if end < 0 else end
        text = trim_space(body[match.end() : end])
        if text:
            return text
        start, match = end, None


_PIECE = 1 << 16


def _first_h1_of_bytes(body: bytes, content: int) -> str:
    """``_first_h1`` of the decoded body, decoding line-aligned pieces until one holds it."""
    start = 0
    while start < len(body):
        stop = body.find(b"\n", start + _PIECE) + 1 or len(body)
        piece = body[start:stop].decode("utf-8", "replace")
        # the first piece includes what comes before the content (a BOM is not a line start)
        offset = len(body[:content].decode("utf-8", "replace")) if start == 0 else 0
        found = _first_h1(piece, offset)
        if found:
            return found
        start = max(stop, content)
    return ""
