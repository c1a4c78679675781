"""LIST (SPEC §5.2), and the page builder the directory FETCH shares with it.

One page rule for both: entries in byte order of name, hidden names and the store's ``versions``
folder never shown, unreadable entries silently dropped (not counted, never hinted at), and a page
that stops at its size or at 1 MiB says so with the truncation note.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from markproto.protocol import bodies, cursor, paths, status, wire
from markproto.protocol.errors import InvalidCursor
from markproto.protocol.grants import Decision
from markproto.protocol.limits import LIST_PAGE_MAX, MAX_BODY
from markproto.server.handlers import Context, bad_request, denied, not_found


@dataclass(frozen=True, slots=True)
class Page:
    """One rendered page of a folder listing."""

    body: bytes
    entries: int
    last: str | None
    """The name of the last entry shown: where the next page starts (strictly after)."""
    more: bool
    """Another readable entry follows this page."""


def dir_decision(ctx: Context, path: str, token: str) -> Decision:
    """Read auth for a folder: its own path, then ``<dir>/``, so a pattern like ``/team/**``
    (which only matches below ``/team``) also guards the listing of ``/team`` itself."""
    decision = ctx.read_decision(path, token)
    if decision is Decision.ALLOW and path != "/":
        decision = ctx.read_decision(path + "/", token)
    return decision


def build_page(
    ctx: Context, path: str, token: str, *, include_archived: bool, after: str | None, limit: int
) -> Page:
    """Render up to ``limit`` readable entries of folder ``path`` that sort after ``after``."""
    children = ctx.content.children(path, include_archived)
    start = 0
    if after is not None:
        # A cursor may name any bytes (surrogate escapes of a name that is not UTF-8).
        start = bisect.bisect_right(
            children, after.encode("utf-8", "surrogateescape"), key=lambda c: c.name.encode()
        )
    heading = bodies.index_heading(path)
    parts = [heading]
    budget = MAX_BODY - len(bodies.TRUNCATED_NOTE) - len(heading)
    prefix = "/" if path == "/" else path + "/"  # path.Join(dir, name) for a one-segment name
    count, last, more = 0, None, False
    for child in children[start:]:
        name = child.name
        if name.startswith(".") or name == paths.VERSIONS_DIR:
            continue
        if not ctx.can_read(prefix + name + ("/" if child.is_dir else ""), token):
            continue
        line = bodies.index_line(bodies.IndexEntry(name, child.is_dir))
        if count == limit or len(line) > budget:
            more = True
            break
        parts.append(line)
        budget -= len(line)
        count, last = count + 1, name
    if more:
        parts.append(bodies.TRUNCATED_NOTE)
    return Page(b"".join(parts), count, last, more)


def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    # The reference's order: read auth, hash path, include-archived, page-size, cursor, existence.
    meta = request.meta
    token = meta.get("auth", "")
    decision = dir_decision(ctx, path, token)
    if decision is not Decision.ALLOW:
        return denied(decision)
    if paths.is_hash_path(path):
        return not_found(path)
    include_archived = _flag(meta.get("include-archived", ""))
    if include_archived is None:
        return bad_request(status.INCLUDE_ARCHIVED_FLAG)
    limit = _page_size(meta.get("page-size", ""))
    if limit is None:
        return bad_request(status.PAGE_SIZE_RANGE)
    try:
        after = cursor.decode_cursor(meta.get("cursor", ""), path, include_archived) or None
    except InvalidCursor as exc:
        return bad_request(str(exc))
    if not ctx.content.is_dir(path):
        return not_found(path)
    page = build_page(ctx, path, token, include_archived=include_archived, after=after, limit=limit)
    out = {"entries": str(page.entries), "complete": "false" if page.more else "true"}
    if page.more and page.last is not None:
        out["next-cursor"] = cursor.encode_cursor(path, include_archived, page.last)
    return wire.Response(status.Status.OK, out, page.body)


def _page_size(value: str) -> int | None:
    if not value:
        return LIST_PAGE_MAX
    number = paths.atoi(value)
    return number if number is not None and 1 <= number <= LIST_PAGE_MAX else None


def _flag(value: str) -> bool | None:
    if value in ("", "false"):
        return False
    return True if value == "true" else None
