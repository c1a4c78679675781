"""Publishing without losing anything by accident: metadata carried over or its loss named, and
a conflict merged three ways instead of thrown back.

PUBLISH replaces the document's publisher metadata with the request's. A writer who sends only
a new body (the usual case for an agent fixing a paragraph) would silently drop the tags,
importance and ``rel-*`` relations the catalog and the link graph rank by, so ``publish`` here
reads the current version first: with ``meta=None`` its metadata carries over (all but
``retention``, which prunes history and must be asked for each time); with ``meta`` given, the
keys it leaves out are named in ``Published.dropped``.

With ``on_conflict="merge"`` a conflict is merged (``client.merge``): base = the version the
writer started from (``expected_version``), ours = the body sent, theirs = the current version.
A clean merge is published over the current version at once; an overlapping one comes back, not
published, with git-style markers for the writer to resolve and publish at ``server_version``.
The ``mark publish -on-conflict merge`` command and the MCP bridge both call this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from markproto.client.client import Client
from markproto.client.errors import UsageError
from markproto.client.merge import merge_meta, merge_text
from markproto.client.results import Result
from markproto.protocol.metadata import with_type_default
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL

OnConflict = Literal["fail", "merge"]
NOT_CARRIED = frozenset({"retention"})
"""Keys never carried over: ``retention`` prunes old versions on every write that carries it."""
MERGE_ATTEMPTS = 3
"""Clean merges published in a row before giving up, when other writers keep winning the race."""


@dataclass(frozen=True, slots=True)
class Merge:
    """What a conflict merge did. ``published`` when it was clean and went out; otherwise
    ``text`` (with markers) and ``meta`` are the candidate to resolve and publish at
    ``server_version``."""

    base_version: int
    server_version: int
    conflicts: int
    clashes: tuple[str, ...]
    """Metadata keys both sides changed differently (the candidate keeps yours)."""
    text: str
    meta: dict[str, str]
    published: bool


@dataclass(frozen=True, slots=True)
class Published:
    """The server's answer to the last write, and what happened to the metadata on the way."""

    result: Result
    kept: tuple[str, ...] = ()
    """Metadata keys carried over from the current version (``meta=None``)."""
    dropped: tuple[str, ...] = ()
    """Keys the current version has that the new one will not."""
    merge: Merge | None = None
    unmerged: str = ""
    """Why a conflict asked to be merged was not (the base or current version unreadable)."""


async def publish(
    client: Client,
    target: MarkURL | str,
    body: bytes,
    *,
    expected_version: int,
    meta: Mapping[str, str] | None = None,
    on_conflict: OnConflict = "fail",
) -> Published:
    """Publish ``body`` over version ``expected_version`` (0 creates); ``meta=None`` keeps the
    current metadata. An empty body unarchives, as PUBLISH does, and touches no metadata."""
    url = client.url(target)
    if url.anchor:
        raise UsageError(f"{url}: a publish replaces the whole document; leave out #{url.anchor}")
    send = dict(meta or {})
    kept: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    if expected_version >= 1 and body:
        current = await client.fetch(url)
        if current.status == Status.OK and current.version == expected_version:
            existing = current.publisher_meta
            if meta is None:
                send = {k: v for k, v in existing.items() if k not in NOT_CARRIED}
                kept = tuple(sorted(send))
            after = with_type_default(url.path, send)  # the server adds the type default again
            dropped = tuple(sorted(set(existing) - set(after)))
    result = await client.publish(url, body, expected_version=expected_version, meta=send)
    published = Published(result, kept, dropped)
    if result.status != Status.CONFLICT or on_conflict != "merge":
        return published
    return await _merge(client, url, body, expected_version, meta, published)


async def _merge(
    client: Client,
    url: MarkURL,
    body: bytes,
    expected_version: int,
    meta: Mapping[str, str] | None,
    refused: Published,
) -> Published:
    """Merge after a conflict; ``refused`` comes back, with the reason, when there is nothing
    to merge (the base or the current version cannot be read as text)."""
    if expected_version == 0:
        base: str | None = ""
        base_meta: dict[str, str] = {}
    else:
        old = await client.fetch(url.with_path(f"{url.path}/v{expected_version}"))
        base = _decode(old.body) if old.status == Status.OK else None
        base_meta = old.publisher_meta
        if base is None:
            why = old.status if old.status != Status.OK else "not UTF-8"
            reason = f"v{expected_version}, the version you started from, cannot be read ({why})"
            return replace(refused, unmerged=reason)
    ours = _decode(body)
    if base is None or ours is None:
        return replace(refused, unmerged="your body is not UTF-8 text")
    if meta is None:  # the writer left the metadata alone: ours is the base's, as carried over
        meta = {k: v for k, v in base_meta.items() if k not in NOT_CARRIED}
    result = refused.result
    for _ in range(MERGE_ATTEMPTS):
        current = await client.fetch(url)
        theirs = _decode(current.body) if current.status == Status.OK else None
        if theirs is None or current.version is None:
            why = current.status if current.status != Status.OK else "not UTF-8"
            return replace(refused, unmerged=f"the current version cannot be read ({why})")
        text = merge_text(
            base,
            ours,
            theirs,
            ours_label=f"yours (v{expected_version} + your edit)",
            theirs_label=f"server v{current.version}",
        )
        merged_meta = merge_meta(base_meta, meta, current.publisher_meta)
        clean = text.conflicts == 0 and not merged_meta.clashes
        if clean:
            result = await client.publish(
                url, text.text.encode(), expected_version=current.version, meta=merged_meta.meta
            )
        outcome = Merge(
            expected_version,
            current.version,
            text.conflicts,
            merged_meta.clashes,
            text.text,
            merged_meta.meta,
            clean and result.status != Status.CONFLICT,
        )
        if not clean or result.status != Status.CONFLICT:
            break  # published, refused for another reason, or left to the writer to resolve
    return Published(result, refused.kept, refused.dropped, outcome)


def _decode(data: bytes) -> str | None:
    """A document's text; None when it is not UTF-8 (nothing a line merge can read)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
