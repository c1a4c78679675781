"""LOOKUP (docs/SPEC.md §5.7): validate, rank, filter by read auth, render the table.

Validation runs in the reference's order with its messages (the lookup service reads the request
keys; the scope, checked last, needs the snapshot); there is no read-auth check on the scope
itself, only on each row, and a row the reader may not read is dropped without a trace (not
counted, never shown).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from markproto.protocol import bodies, status, wire
from markproto.protocol.paths import normalize_scope
from markproto.server.handlers import Context, bad_request, links, not_found
from markproto.server.search.graph import LINKS
from markproto.server.search.service import BadQuery, Lookup, Query, parse_query
from markproto.server.storage.store import Version

BUILD_WAIT = 5.0
"""Seconds a LOOKUP waits for the index being built at startup before it is refused."""


def handle(
    request: wire.Request, path: str, ctx: Context
) -> wire.Response | Awaitable[wire.Response]:
    meta = request.meta
    if meta.get("match") == LINKS:  # the extension (SPEC §5.9): no reference request says so
        if ctx.lookup is not None and not ctx.lookup.ready:
            return _when_built(ctx.lookup, lambda: links.handle(request, path, ctx))
        return links.handle(request, path, ctx)
    try:
        query = parse_query(meta)
    except BadQuery as exc:
        return bad_request(str(exc))
    scope = normalize_scope(path)
    if scope != "/" and not ctx.content.is_dir(scope):
        return not_found(scope)
    if ctx.lookup is None:
        return wire.error_response(status.Status.SERVER_ERROR, status.INTERNAL)
    lookup = ctx.lookup
    if not lookup.ready:
        return _when_built(lookup, lambda: _answer(lookup, request, query, scope, ctx))
    return _answer(lookup, request, query, scope, ctx)


async def _when_built(lookup: Lookup, answer: Callable[[], wire.Response]) -> wire.Response:
    """A LOOKUP during the startup build: answered once the index is whole, never from part
    of it; refused if that takes longer than ``BUILD_WAIT``."""
    if not await lookup.wait_built(BUILD_WAIT):
        return wire.error_response(status.Status.SERVER_ERROR, status.INDEX_BUILDING)
    return answer()


def _answer(
    lookup: Lookup, request: wire.Request, query: Query, scope: str, ctx: Context
) -> wire.Response:
    meta = request.meta
    token = meta.get("auth", "")

    def load(doc_path: str) -> Version | None:
        current = ctx.content.current(doc_path)
        return ctx.content.read(current) if current is not None else None

    rows = lookup.answer(
        query, scope, readable=lambda row_path: ctx.can_read(row_path, token), load=load
    )
    out = {"matches": str(len(rows))}
    if "match" in meta:
        out["match"] = query.mode
    body = bodies.render_lookup(query.text, scope, rows, body_mode=query.body)
    return wire.Response(status.Status.OK, out, body)
