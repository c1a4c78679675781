"""FETCH (SPEC §5.1): a current document, an old version, a document by content-hash, or a folder.

Read auth is asked on the path that is actually served (the base of a version path, the resolved
document of a hash path, the folder and its ``index.md``), so no spelling of a path reaches a
document its token may not read. A hash path that resolves only to unreadable documents answers
exactly like a miss, so a hash never confirms that a hidden document exists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from markproto.protocol import bodies, metadata, paths, status, storefmt, wire
from markproto.protocol.errors import InvalidMetadata
from markproto.protocol.grants import Decision
from markproto.protocol.limits import LIST_PAGE_MAX
from markproto.server.handlers import Context, denied, not_found
from markproto.server.handlers.listing import build_page, dir_decision
from markproto.server.storage.snapshot import Current
from markproto.server.storage.store import Loaded

_SERVED_CACHE = 4096
_served: dict[str, dict[str, str]] = {}
"""Publisher keys a response may carry, per etag (oldest dropped first)."""
_ENCODED_BYTES = 8 << 20
_ENCODED_MAX_BODY = 64 << 10
_current_responses: dict[tuple[str, datetime], wire.Response] = {}
_encoded: dict[int, tuple[wire.Response, bytes]] = {}
"""A current version's response, built and encoded once: by (etag, modified), which fix every byte
of it, and its bytes by the response's identity (the entry holds the response, so its id stays
unique while cached). Documents up to 64 KiB, 8 MiB of bytes in all, oldest dropped first."""
_encoded_size = 0
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:[0-9]{2})"
)


def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    token = request.meta.get("auth", "")
    if paths.is_hash_path(path):
        return _by_hash(request, paths.hash_of(path), ctx, token)
    version = paths.split_version(path)
    if version is not None and not ctx.content.snapshot.is_dir(version[0]):
        return _version(request, path, *version, ctx, token)
    decision = ctx.read_decision(path, token)
    if decision is not Decision.ALLOW:
        return denied(decision)
    current = ctx.content.current(path)
    if current is not None:
        return _serve(request, current, ctx)
    if ctx.content.snapshot.is_dir(path):
        return _directory(request, path, ctx, token)
    return not_found(path)


def document(doc: Loaded, extra: Mapping[str, str] | None = None) -> wire.Response:
    """A document response: the publisher's keys first, then the server's, which always win."""
    out = _publisher_keys(doc)
    out["modified"] = bodies.rfc3339(doc.modified)
    out["etag"] = doc.etag
    out["version"] = str(doc.number)
    out["content-hash"] = doc.content_hash
    if extra:
        out.update(extra)
    return wire.Response(status.Status.OK, out, doc.body)


def _by_hash(request: wire.Request, digest: str, ctx: Context, token: str) -> wire.Response:
    for path in ctx.content.snapshot.resolve_hash(digest):
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
    doc = None if current is None else ctx.content.read_version(base, number)
    if current is None or doc is None:
        return not_found(path)
    if _not_modified(request.meta, doc.etag, doc.modified):
        return wire.Response(status.Status.NOT_MODIFIED, {}, b"")
    return document(doc, {"current-version": str(current.number)})


def _serve(request: wire.Request, current: Current, ctx: Context) -> wire.Response:
    if current.archived:
        return wire.error_response(status.Status.ARCHIVED, status.is_archived(current.path))
    if _not_modified(request.meta, current.etag, current.modified):
        return wire.Response(status.Status.NOT_MODIFIED, {}, b"")
    doc = ctx.content.read(current)
    return not_found(current.path) if doc is None else _current(doc)


def _current(doc: Loaded) -> wire.Response:
    """`document`, reused: building and encoding a small FETCH response is half of its dispatch
    cost (5 of 10 µs, measured), and most requests are for documents asked for before."""
    global _encoded_size
    key = (doc.etag, doc.modified)
    response = _current_responses.get(key)
    if response is None:
        response = document(doc)
        if len(doc.body) <= _ENCODED_MAX_BODY:
            data = wire.emit_response(response)
            _encoded_size += len(data)
            while _encoded_size > _ENCODED_BYTES:
                old = _current_responses.pop(next(iter(_current_responses)))
                _encoded_size -= len(_encoded.pop(id(old))[1])
            _current_responses[key] = response
            _encoded[id(response)] = (response, data)
    return response


def encoded(response: wire.Response) -> bytes | None:
    """The bytes of a response `handle` reused, so the dispatcher need not encode it again."""
    hit = _encoded.get(id(response))
    return hit[1] if hit is not None and hit[0] is response else None


def _directory(request: wire.Request, path: str, ctx: Context, token: str) -> wire.Response:
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
    since = _parse_time(meta.get("if-modified-since", ""))
    return since is not None and modified <= since


def _parse_time(value: str) -> datetime | None:
    """Go ``time.Parse(time.RFC3339, …)``: anything else is ignored, as the reference does."""
    if not _RFC3339.fullmatch(value):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _publisher_keys(doc: Loaded) -> dict[str, str]:
    """The stored publisher keys a response may carry. A foreign or old store can hold keys the
    rules now refuse (reserved, control, malformed): those are skipped, never served. The verdict
    is cached by etag, which names the exact version bytes and so the metadata in them."""
    keys = _served.get(doc.etag)
    if keys is None:
        keys = {k: v for k, v in doc.meta.items() if _servable(k, v)}
        if len(_served) >= _SERVED_CACHE:
            del _served[next(iter(_served))]
        _served[doc.etag] = keys
    return dict(keys)


def _servable(key: str, value: str) -> bool:
    if key in metadata.CONTROL_KEYS:
        return False
    try:
        metadata.validate({key: value})
    except InvalidMetadata:
        return False
    return True
