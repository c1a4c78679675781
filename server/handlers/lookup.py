"""LOOKUP (docs/SPEC.md §5.7): validate, rank, filter by read auth, render the table.

Validation runs in the reference's order with its messages; there is no read-auth check on the
scope itself, only on each row, and a row the reader may not read is dropped without a trace
(not counted, never shown).
"""

from __future__ import annotations

from collections.abc import Awaitable

from markproto.protocol import bodies, status, wire
from markproto.protocol.gotext import trim_space
from markproto.protocol.limits import (
    LOOKUP_DEFAULT_LIMIT,
    LOOKUP_MAX,
    LOOKUP_MAX_TERMS,
    LOOKUP_MIN_QUERY_RUNES,
)
from markproto.protocol.metadata import go_quote
from markproto.protocol.paths import atoi, normalize_scope
from markproto.server.handlers import Context, bad_request, not_found
from markproto.server.search.catalog import FilterError, parse_filter
from markproto.server.search.text import catalog_terms
from markproto.server.storage.store import Version

_MODES = ("catalog", "body")


def handle(
    request: wire.Request, path: str, ctx: Context
) -> wire.Response | Awaitable[wire.Response]:
    meta = request.meta
    query = trim_space(meta.get("query", ""))
    if query != "*" and len(query) < LOOKUP_MIN_QUERY_RUNES:
        return bad_request(status.QUERY_TOO_SHORT)
    terms = min(len(catalog_terms(query)), LOOKUP_MAX_TERMS + 1)
    if terms > LOOKUP_MAX_TERMS:
        return bad_request(status.too_many_terms(terms))
    limit = _limit(meta.get("limit", ""))
    if limit is None:
        return bad_request(status.INVALID_LIMIT)
    try:
        clauses = parse_filter(meta.get("filter", ""))
    except FilterError as exc:
        return bad_request(str(exc))
    mode = meta.get("match", "") or "catalog"
    if mode not in _MODES:
        return bad_request(status.unknown_match(go_quote(mode)))
    scope = normalize_scope(path)
    if scope != "/" and not ctx.content.is_dir(scope):
        return not_found(scope)
    if ctx.lookup is None:
        return wire.error_response(status.Status.SERVER_ERROR, status.INTERNAL)
    token = meta.get("auth", "")
    lookup = ctx.lookup

    def load(doc_path: str) -> Version | None:
        current = ctx.content.current(doc_path)
        return ctx.content.read(current) if current is not None else None

    def answer() -> wire.Response:
        rows = lookup.search(
            query,
            scope,
            clauses,
            body=mode == "body",
            readable=lambda row_path: ctx.can_read(row_path, token),
            limit=limit,
            load=load,
        )
        out = {"matches": str(len(rows))}
        if "match" in meta:
            out["match"] = mode
        body = bodies.render_lookup(query, scope, rows, body_mode=mode == "body")
        return wire.Response(status.Status.OK, out, body)

    if not ctx.content.indexing:
        return answer()

    async def when_indexed() -> wire.Response:  # a burst of writes is still being indexed
        await ctx.content.indexed()
        return answer()

    return when_indexed()


def _limit(value: str) -> int | None:
    """Absent or empty: the default; else a Go ``Atoi`` integer >= 1, capped at 1000."""
    if not value:
        return LOOKUP_DEFAULT_LIMIT
    number = atoi(value)
    return min(number, LOOKUP_MAX) if number is not None and number >= 1 else None
