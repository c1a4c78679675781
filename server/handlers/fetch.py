"""FETCH (SPEC §5.1): a current document, an old version, a document by content-hash, or a folder.

Read auth is asked on the path that is actually served (the base of a version path, the resolved
document of a hash path, the folder and its ``index.md``), so no spelling of a path reaches a
document its token may not read. A hash path that resolves only to unreadable documents answers
exactly like a miss, so a hash never confirms that a hidden document exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from markproto.protocol import paths, status, storefmt, times, wire
from markproto.protocol.grants import Decision
from markproto.protocol.limits import LIST_PAGE_MAX
from markproto.server.handlers import Context, CurrentDocument, denied, not_found
from markproto.server.handlers.listing import build_page, dir_decision
from markproto.server.responses import document
from markproto.server.storage.snapshot import CurrentVersion


def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response | CurrentDocument:
    token = request.meta.get("auth", "")
    if paths.is_hash_path(path):
        return _by_hash(request, paths.hash_of(path), ctx, token)
    version = paths.split_version(path)
    if version is not None and not ctx.content.is_dir(version[0]):
        return _version(request, path, *version, ctx, token)
    decision = ctx.read_decision(path, token)
    if decision is not Decision.ALLOW:
        return denied(decision)
    current = ctx.content.current(path)
    if current is not None:
        return _serve(request, current, ctx)
    if ctx.content.is_dir(path):
        return _directory(request, path, ctx, token)
    return not_found(path)


def _by_hash(
    request: wire.Request, digest: str, ctx: Context, token: str
) -> wire.Response | CurrentDocument:
    for path in ctx.content.resolve_hash(digest):
        current = ctx.content.current(path)
        if current is not None and ctx.can_read(path, token):
            return _serve(request, current, ctx)
    return wire.error_response(status.Status.NOT_FOUND, status.hash_not_found(digest))


def _version(
    request: wire.Request, path: str, base: str, number: int, ctx: Context, token: str
) -> wire.Response:
    """An old (or the current) version; archiving hides a document, not its history. Conditional
    keys apply as to any document (a version never changes, so a cached one stays valid)."""
    decision = ctx.read_decision(base, token)
    if decision is not Decision.ALLOW:
        return denied(decision)
    current = ctx.content.current(base)
    old = None if current is None else ctx.content.read_version(base, number)
    if current is None or old is None:
        return not_found(path)
    if _not_modified(request.meta, old.etag, old.modified):
        return wire.Response(status.Status.NOT_MODIFIED, {}, b"")
    return document(old, {"current-version": str(current.number)})


def _serve(
    request: wire.Request, current: CurrentVersion, ctx: Context
) -> wire.Response | CurrentDocument:
    if current.archived:
        return wire.error_response(status.Status.ARCHIVED, status.is_archived(current.path))
    if _not_modified(request.meta, current.etag, current.modified):
        return wire.Response(status.Status.NOT_MODIFIED, {}, b"")
    version = ctx.content.read(current)
    return not_found(current.path) if version is None else CurrentDocument(version)


def _directory(
    request: wire.Request, path: str, ctx: Context, token: str
) -> wire.Response | CurrentDocument:
    """A folder's ``index.md`` when it is live, else the first page of its generated listing."""
    decision = dir_decision(ctx, path, token)
    if decision is not Decision.ALLOW:
        return denied(decision)
    index = ctx.content.current(paths.join(path, "index.md"))
    if index is not None and not index.archived:
        decision = ctx.read_decision(index.path, token)
        return _serve(request, index, ctx) if decision is Decision.ALLOW else denied(decision)
    include_archived = request.meta.get("include-archived") == "true"
    page = build_page(
        ctx, path, token, include_archived=include_archived, after=None, limit=LIST_PAGE_MAX
    )
    etag = storefmt.etag(page.body)
    if request.meta.get("if-none-match") == etag:
        return wire.Response(status.Status.NOT_MODIFIED, {}, b"")
    out = {
        "entries": str(page.entries),
        "etag": etag,
        "content-hash": storefmt.content_hash(page.body),
    }
    return wire.Response(status.Status.OK, out, page.body)


def _not_modified(meta: Mapping[str, str], etag: str, modified: datetime) -> bool:
    """``if-none-match`` decides when present and equal; else a parseable ``if-modified-since``."""
    if meta.get("if-none-match") == etag:
        return True
    since = times.parse_time(meta.get("if-modified-since", ""))
    return since is not None and modified <= since
