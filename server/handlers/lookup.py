"""LOOKUP (docs/SPEC.md §5.7): validate, rank, filter by read auth, render the table.

Validation runs in the reference's order with its messages (the lookup service reads the request
keys; the scope, checked last, needs the snapshot); there is no read-auth check on the scope
itself, only on each row, and a row the reader may not read is dropped without a trace (not
counted, never shown). Every form, ``match: links`` too, first waits for index work a burst of
writes held back (``storage.backlog``), so it sees every write answered before it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from markproto.protocol import bodies, status, wire
from markproto.protocol.paths import normalize_scope
from markproto.server.handlers import Context, bad_request, links, not_found
from markproto.server.search.graph import LINKS
from markproto.server.search.service import BadQuery, Query, parse_query
from markproto.server.storage.store import Version

BUILD_WAIT = 5.0
"""Seconds a LOOKUP waits for the index being built at startup before it is refused."""


def handle(
    request: wire.Request, path: str, ctx: Context
) -> wire.Response | Awaitable[wire.Response]:
    meta = request.meta
    if meta.get("match") == LINKS:  # the extension (SPEC §5.9): no reference request says so
        return _indexed(ctx, lambda: links.handle(request, path, ctx))
    try:
        query = parse_query(meta)
    except BadQuery as exc:
        return bad_request(str(exc))
    return _indexed(ctx, lambda: _answer(query, request, path, ctx))


def _indexed(
    ctx: Context, answer: Callable[[], wire.Response]
) -> wire.Response | Awaitable[wire.Response]:
    """The answer now, or once the indexes are whole: the startup build done (never an answer
    from part of it; refused past ``BUILD_WAIT``) and the index work a burst of writes held
    back caught up."""
    lookup = ctx.lookup
    building = lookup is not None and not lookup.ready
    if not building and not ctx.content.indexing:
        return answer()

    async def when_indexed() -> wire.Response:
        if lookup is not None and not await lookup.wait_built(BUILD_WAIT):
            return wire.error_response(status.Status.SERVER_ERROR, status.INDEX_BUILDING)
        await ctx.content.indexed()
        return answer()

    return when_indexed()


def _answer(query: Query, request: wire.Request, path: str, ctx: Context) -> wire.Response:
    meta = request.meta
    scope = normalize_scope(path)
    if scope != "/" and not ctx.content.is_dir(scope):
        return not_found(scope)
    if ctx.lookup is None:
        return wire.error_response(status.Status.SERVER_ERROR, status.INTERNAL)
    lookup = ctx.lookup
    token = meta.get("auth", "")

    def load(doc_path: str) -> Version | None:
        current = ctx.content.current(doc_path)
        return ctx.content.read(current, keep=False) if current is not None else None

    rows = lookup.answer(
        query, scope, readable=lambda row_path: ctx.can_read(row_path, token), load=load
    )
    out = {"matches": str(len(rows))}
    if "match" in meta:
        out["match"] = query.mode
    body = bodies.render_lookup(query.text, scope, rows, body_mode=query.body)
    return wire.Response(status.Status.OK, out, body)
