"""Finding: ``mark_lookup`` on one server and, with several ``-host`` servers, ``mark_lookup_all``
across them (the reference gateway's tool).

``mark_lookup_all`` sends one LOOKUP per server, at most ``FANOUT`` at a time, and merges the rows
as ``mark://host/path#anchor``: catalog rows by importance (each server already ranks by it),
body rows by rank, one from each server in turn (scores are not comparable across servers). A
server that fails is reported in a table under ``status: partial``; when every one fails the
call is a tool error. ``budget`` works on both (see ``expand``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
from collections.abc import Sequence

from mcp.server.mcpserver.exceptions import ToolError

from markproto.client import LookupResult, MarkError, Result
from markproto.client.mcp import expand
from markproto.client.mcp.bridge import Bridge
from markproto.client.mcp.envelope import (
    FAILURES,
    TAGS_SHOWN,
    capped_tags,
    check,
    envelope,
    error_body,
    guard,
    one_line,
)
from markproto.client.mcp.params import Budget, Filter, Limit, Match, Offset, Query, Scope, Verbose
from markproto.client.results import CATALOG_FALLBACK_NOTE
from markproto.protocol import bodies, paths
from markproto.protocol.escape import escape_cell
from markproto.protocol.limits import LOOKUP_DEFAULT_LIMIT
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL

FANOUT = 4
"""LOOKUPs in flight at once in ``mark_lookup_all``."""
LEAN = ("matches", "match")
LEAN_ALL = ("servers", "succeeded", "failed", "matches", "match")


def register(bridge: Bridge) -> None:
    client = bridge.client

    @bridge.tool(read_only=True)
    async def mark_lookup(
        url: Scope,
        query: Query,
        filter: Filter = None,
        limit: Limit = None,
        match: Match = None,
        budget: Budget = None,
        verbose: Verbose = False,
        offset: Offset = 0,
    ) -> str:
        """Find documents by tags and titles (match catalog, the default) or sections by their
        text (match body: rows are path#anchor with a snippet), ranked. With budget, the
        matched sections follow the table, framed by >>> path/vN#anchor lines, within about
        that many tokens. A long table: narrow the scope or lower the limit, or use offset."""
        scope = bridge.folder(url, "mark_lookup")
        if budget and offset:
            raise ToolError("offset: leave it out with budget (a budgeted result is never cut)")
        result = await guard(client.lookup(scope, query, filter=filter, limit=limit, match=match))
        check(result)
        extra = {"note": CATALOG_FALLBACK_NOTE} if result.answered_from_catalog else {}
        rows = [
            (dataclasses.replace(scope.with_path(r.path), anchor=r.anchor), r) for r in result.rows
        ]
        table = Table(
            query,
            paths.normalize_scope(scope.path),
            rows,
            result.meta.get("match") == "body",
            verbose,
            qualified=False,
        )
        if result.status != Status.OK:
            text = error_body(result)
        elif budget:
            text = await _budgeted(result, LEAN, extra, budget, table, bridge)
        elif verbose or all(len(r.tags) <= TAGS_SHOWN for r in result.rows):
            text = error_body(result)  # the server's table as sent
        else:
            text = table.render()
        return envelope(
            result,
            LEAN,
            verbose,
            text,
            offset=offset,
            resume=lambda end: (
                "narrow the scope or lower the limit, or call mark_lookup with the same "
                f"arguments and offset={end}"
            ),
            extra=extra,
        )

    if len(bridge.hosts) < 2:
        return

    @bridge.tool(read_only=True)
    async def mark_lookup_all(
        query: Query,
        scope: Scope = "/",
        filter: Filter = None,
        limit: Limit = None,
        match: Match = None,
        budget: Budget = None,
        verbose: Verbose = False,
    ) -> str:
        """mark_lookup on every -host server at once; rows are mark://host/path#anchor, limit
        counts them all. Servers that fail are listed (status partial)."""
        if not scope.startswith("/"):
            raise ToolError(f"scope: {scope!r} is not a folder path such as / or /docs/")
        lookups = [
            bridge.folder(host.identity + scope, "mark_lookup_all", argument="scope")
            for host in bridge.hosts
        ]
        gate = asyncio.Semaphore(FANOUT)

        async def one(target: MarkURL) -> LookupResult | str:
            async with gate:
                try:
                    found = await client.lookup(
                        target, query, filter=filter, limit=limit, match=match
                    )
                except MarkError as exc:
                    return one_line(exc)
            if found.status in FAILURES:
                return f"{found.status}: {found.message}"
            return found

        answers = await asyncio.gather(*(one(target) for target in lookups))
        failures = [(t, a) for t, a in zip(lookups, answers, strict=True) if isinstance(a, str)]
        found = [(t, a) for t, a in zip(lookups, answers, strict=True) if not isinstance(a, str)]
        if not found:
            raise ToolError(
                "every server failed: "
                + "; ".join(f"{t.identity}: {reason}" for t, reason in failures)
            )
        body_mode = any(a.meta.get("match") == "body" for _, a in found)
        rows = _merge(found, body_mode)[: limit or LOOKUP_DEFAULT_LIMIT]
        meta = {
            "servers": str(len(lookups)),
            "succeeded": str(len(found)),
            "failed": str(len(failures)),
            "matches": str(len(rows)),
            "match": "body" if body_mode else "catalog",
        }
        summary = Result(Status.OK if not failures else "partial", meta, b"")
        fallback = [t.identity for t, a in found if a.answered_from_catalog]
        extra = {"note": f"{', '.join(fallback)}: {CATALOG_FALLBACK_NOTE}"} if fallback else {}
        table = Table(query, scope, rows, body_mode, verbose, qualified=True)
        failed = "".join(f"| {t.identity} | {escape_cell(why)} |\n" for t, why in failures)
        if failed:
            table.after = f"\n| Server | Failure |\n|--------|---------|\n{failed}"
        if budget:
            text = await _budgeted(summary, LEAN_ALL, extra, budget, table, bridge)
        else:
            text = table.render()
        return envelope(
            summary,
            LEAN_ALL,
            verbose,
            text,
            resume=lambda end: "narrow the scope or lower the limit",
            extra=extra,
        )


@dataclasses.dataclass
class Table:
    """A lookup table as the bridge shows it: lean tags, rows qualified as ``mark://host/path``
    when they come from several servers, no snippet on a row whose section follows in full."""

    query: str
    scope: str
    rows: Sequence[tuple[MarkURL, bodies.LookupRow]]
    body_mode: bool
    verbose: bool
    qualified: bool
    after: str = ""
    """Text after the table (``mark_lookup_all``'s failures)."""

    def render(self, expanded: frozenset[MarkURL] = frozenset()) -> str:
        shown = [
            dataclasses.replace(
                row,
                path=str(dataclasses.replace(url, anchor="")) if self.qualified else row.path,
                tags=row.tags if self.verbose else _capped(row.tags),
                snippet="" if url in expanded and row.snippet is not None else row.snippet,
            )
            for url, row in self.rows
        ]
        table = bodies.render_lookup(self.query, self.scope, shown, body_mode=self.body_mode)
        return table.decode().lstrip("\n") + self.after


async def _budgeted(
    result: Result,
    lean: Sequence[str],
    extra: dict[str, str],
    budget: int,
    table: Table,
    bridge: Bridge,
) -> str:
    """The table and the budgeted sections after it, in the bytes the budget leaves after the
    envelope and the table; rows whose section follows lose their snippet."""
    head = envelope(result, lean, table.verbose, table.render(), extra=extra)
    room = budget * expand.BYTES_PER_TOKEN - len(head.encode()) - 1
    urls = [url for url, _ in table.rows]
    label = (lambda url: str(dataclasses.replace(url, anchor=""))) if table.qualified else _path
    expanded = await expand.expand(urls, table.query, bridge.client.fetch, room, label)
    return table.render(expanded.rows) + "\n" + expanded.text


def _path(url: MarkURL) -> str:
    return url.path


def _capped(tags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(capped_tags(",".join(tags)).split(",")) if len(tags) > TAGS_SHOWN else tags


def _merge(
    found: Sequence[tuple[MarkURL, LookupResult]], body_mode: bool
) -> list[tuple[MarkURL, bodies.LookupRow]]:
    """One ranking from several servers' rows, each server's order kept; the URLs carry the
    row's anchor."""
    ranked = [
        [
            (dataclasses.replace(url.with_path(row.path), anchor=row.anchor), row)
            for row in answer.rows
        ]
        for url, answer in found
    ]
    if not body_mode:
        return list(heapq.merge(*ranked, key=lambda pair: -pair[1].importance))
    turns = itertools.zip_longest(*ranked)
    return [pair for turn in turns for pair in turn if pair is not None]
