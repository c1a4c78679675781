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
from typing import Any

from markproto.protocol import mdoutline, metadata
from markproto.protocol.gotext import SPACE, trim_space
from markproto.protocol.limits import MAX_META_BYTES, MAX_META_KEYS
from markproto.protocol.paths import base

__all__ = ["FALLBACK_KEYS", "OwnFacts", "frontmatter", "own_facts", "publisher_meta", "title"]

log = logging.getLogger("markproto.protocol.document")

FALLBACK_KEYS = ("tags", "title", "importance", "type")
"""The keys a document's own frontmatter may supply."""
_LINE_SPACE = re.escape(SPACE.replace("\n", ""))
_H1_HERE = re.compile(f"[{_LINE_SPACE}]*# ")
_H1 = re.compile(f"^[{_LINE_SPACE}]*# ", re.MULTILINE)
_KEY_RUN = re.compile(r"[^a-z0-9-]+")
_KEPT_LONGEST = ("title", "tags", "type", "importance", "description", "resource", "timestamp")
"""Over the metadata limits an import keeps these longest, in this order: LOOKUP reads the first
four, and the rest are the OKF's own."""


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


def frontmatter(body: str) -> dict[str, str] | None:
    """A document's own frontmatter as flat strings: the one reader of it (no type coercion).

    Every scalar stays the string it is written as (``3``, ``true``, ``2026-01-01``); a list
    reads as its string items joined ``a,b``; nested maps are left out. None when there is no
    frontmatter, or it is not a YAML mapping (malformed YAML too).
    """
    data = _load(mdoutline.split_frontmatter(body)[0])
    if data is None:
        return None
    flat = ((key, _text(value)) for key, value in data.items() if isinstance(key, str))
    return {key: value for key, value in flat if value is not None}


def _load(block: str | None) -> dict[Any, Any] | None:
    if block is None:
        return None
    import yaml  # here: PyYAML is loaded by the first frontmatter block read

    try:
        data = yaml.load(block, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    except (yaml.YAMLError, RecursionError) as exc:
        log.debug("ignoring a document's malformed frontmatter: %s", exc)
        return None
    return data if isinstance(data, dict) else None


def _text(value: object) -> str | None:
    """A frontmatter value as one string: itself, or a list's string items joined ``a,b``."""
    if isinstance(value, list):
        items = [item for item in value if isinstance(item, str)]
        return ",".join(items) if items else None
    return value if isinstance(value, str) else None


def publisher_meta(body: str) -> tuple[dict[str, str], list[str]]:
    """The publisher metadata a document's own frontmatter makes on import, and a note for each
    key left out.

    Keys are lowered, and characters outside ``[a-z0-9-]`` become ``-`` (``sort_rank`` is
    ``sort-rank``); a value's line breaks become spaces; ``tags`` is normalized. Left out: keys
    a response sets or the store owns (``version``, ``status``), ``retention`` (a file must not
    prune history), a key two spellings collide on, and, past the limits, producer keys before
    the ones LOOKUP reads (``title``, ``tags``, ``type``, ``importance``).
    """
    own = _load(mdoutline.split_frontmatter(body)[0]) or {}
    meta: dict[str, str] = {}
    notes: list[str] = []
    for raw in sorted(str(key) for key in own):
        text = _text(own.get(raw))
        if text is None:
            if own.get(raw) is not None:
                notes.append(f"frontmatter key {raw!r} left out: not text")
            continue
        key = _KEY_RUN.sub("-", raw.lower()).strip("-")
        value = " ".join(text.splitlines())
        if key == "tags":
            value = metadata.normalize_tags(value)
        if not trim_space(value):
            continue
        why = None
        if key in meta:
            why = f"spelt like {key!r} by another key"
        elif key in metadata.STORE_RESERVED_KEYS or key == "retention":
            why = f"{key!r} is the store's to set"
        else:
            why = metadata.pair_refusal(key, value)
        if why:
            notes.append(f"frontmatter key {raw!r} left out: {why}")
            continue
        meta[key] = value
    while len(meta) > MAX_META_KEYS or metadata.size(meta) > MAX_META_BYTES:
        key = max(meta, key=_drop_order)
        del meta[key]
        notes.append(f"frontmatter key {key!r} left out: over the metadata limits")
    return meta, notes


def _drop_order(key: str) -> tuple[int, str]:
    """Past the limits the key sorting last goes first: producer keys, then the OKF ones."""
    rank = _KEPT_LONGEST.index(key) if key in _KEPT_LONGEST else len(_KEPT_LONGEST)
    return rank, key


def _fallbacks(block: str) -> dict[str, str]:
    own = _load(block) or {}
    out = {}
    for key in FALLBACK_KEYS:
        value = own.get(key)
        if key == "tags":
            value = _text(value)
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
