"""The link graph: ``mark_explore`` (orient around one document: its outline, its links, what
links to it, its siblings), ``mark_backlinks`` and ``mark_graph``, named and shaped as the
reference's tools so agent prompts carry over.

The reference's bridge crawls FETCHes for these and keeps a graph store; here the server answers
from its link index (LOOKUP ``match: links``, SPEC §5.9), so backlinks are complete and current
and a depth-2 graph is one request per page. Results are bounded: ``mark_explore`` shows
``page_size`` links each way with a ``next-cursor``, the others are cut by the envelope with an
``offset`` to continue.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Literal

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from markproto.client.graph import Graph, gather
from markproto.client.mcp.bridge import Bridge
from markproto.client.mcp.envelope import check, envelope, error_body, guard
from markproto.client.mcp.params import Offset, Url, Verbose
from markproto.client.results import LINKS_UNSUPPORTED, LinksResult
from markproto.protocol import bodies, document, mdoutline, paths
from markproto.protocol.bodies import LinkRow
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL

Direction = Literal["incoming", "outgoing", "both"]
Relations = Annotated[
    list[str] | None,
    Field(
        max_length=32,
        description='exact predicates (rel-<p> metadata); "" = body links; groups by document',
    ),
]
ExplorePage = Annotated[int, Field(ge=1, le=100, description="links shown each way")]
Depth = Annotated[int, Field(ge=1, le=5, description="steps out (default 2)")]
LEAN = ("version", "title")


def register(bridge: Bridge) -> None:
    client = bridge.client
    reader = bridge.tool(read_only=True)

    @reader
    async def mark_explore(
        url: Url,
        direction: Direction = "both",
        relations: Relations = None,
        page_size: ExplorePage = 10,
        cursor: str | None = None,
        verbose: Verbose = False,
    ) -> str:
        """Orient around one document: its outline, outbound links, backlinks and siblings
        (page_size each, next-cursor continues). relations lists those relations grouped by
        document."""
        target = bridge.document(url, "mark_explore")
        target = dataclasses.replace(target, anchor="")
        if relations is not None and len(set(relations)) != len(relations):
            raise ToolError("relations: each predicate once")
        outgoing_at, incoming_at = _cursor(cursor)
        wanted = [d for d in ("outgoing", "incoming") if direction in (d, "both")]
        at = {"outgoing": outgoing_at, "incoming": incoming_at}
        pages = asyncio.gather(
            *(
                guard(
                    client.links(
                        target,
                        direction=d,
                        relations=relations,
                        limit=page_size,
                        cursor=str(at[d]) if at[d] else None,
                    )
                )
                for d in wanted
            )
        )
        fetched, found = await asyncio.gather(guard(client.fetch(target)), pages)
        links = dict(zip(wanted, found, strict=True))
        check(fetched)
        if fetched.status != Status.OK:
            return envelope(fetched, (), verbose, error_body(fetched))
        for page in links.values():
            _check_links(page)
        text = fetched.body.decode("utf-8", "replace")
        title = document.title(target.path, fetched.meta, document.own_facts(text))
        parts = [f"## Outline\n\n{mdoutline.outline(text) or '(no headings)'}"]
        view = _View(bridge, target)
        if relations is not None:
            parts.append(view.relations(links))
        else:
            for key, heading in (("outgoing", "Outbound links"), ("incoming", "Backlinks")):
                if key in links:
                    page = links[key]
                    view.learn(page)
                    out = key == "outgoing"
                    parts.append(view.section(heading, page.total, page.rows, out=out))
            parts.append(await _siblings(bridge, target, page_size, view))
        following = _next(links, at)
        if following:
            parts.append(f"next-cursor: {following}")
        extra = {"title": title}
        for name, key in (("outbound", "outgoing"), ("backlinks", "incoming")):
            if key in links:
                extra[name] = str(links[key].total)
        body = "\n\n".join(part.rstrip("\n") for part in parts) + "\n"
        return envelope(fetched, LEAN, verbose, body, extra=extra)

    @reader
    async def mark_backlinks(url: Url, verbose: Verbose = False, offset: Offset = 0) -> str:
        """Documents linking to a document, from the server's link index: complete and current,
        filtered by what the token may read."""
        target = dataclasses.replace(bridge.document(url, "mark_backlinks"), anchor="")
        found = await guard(gather(client, target, direction="incoming"))
        _check_links(found.result)
        if found.result.status != Status.OK:
            return envelope(found.result, (), verbose, error_body(found.result))
        view = _View(bridge, target, dict(found.titles))
        body = view.section("Backlinks", found.total, found.rows, out=False) + "\n"
        return _paged("mark_backlinks", found, verbose, body, offset)

    @reader
    async def mark_graph(
        url: Url, depth: Depth = 2, verbose: Verbose = False, offset: Offset = 0
    ) -> str:
        """Documents and links reachable by outbound links, depth steps out (max 5). Edges carry
        section, relation and state; external links are listed, not followed."""
        target = dataclasses.replace(bridge.resolve(url), anchor="")
        found = await guard(gather(client, target, direction="outgoing", depth=depth))
        _check_links(found.result)
        if found.result.status != Status.OK:
            return envelope(found.result, (), verbose, error_body(found.result))
        return _paged("mark_graph", found, verbose, _View(bridge, target).graph(found), offset)


def _paged(tool: str, found: Graph, verbose: bool, body: str, offset: int) -> str:
    extra = {"total": str(found.total)}
    if found.cut:
        extra["note"] = f"the first {len(found.rows):,} of {found.total:,} links"
    return envelope(
        found.result,
        (),
        verbose,
        body,
        offset=offset,
        resume=lambda end: f"call {tool} with the same arguments and offset={end}",
        extra=extra,
    )


def _check_links(result: LinksResult) -> None:
    if result.unsupported:
        raise ToolError(LINKS_UNSUPPORTED)
    check(result)


def _cursor(cursor: str | None) -> tuple[int, int]:
    """``mark_explore``'s cursor: where the outbound and the backlink pages start."""
    if not cursor:
        return 0, 0
    out, _, back = cursor.partition(",")
    if not (out.isdigit() and back.isdigit()):
        raise ToolError(f"cursor: {cursor!r} is not a next-cursor this tool gave")
    return int(out), int(back)


def _next(links: dict[str, LinksResult], at: dict[str, int]) -> str:
    """The cursor past these pages, "" when both are complete."""
    if all(page.next_cursor is None for page in links.values()):
        return ""
    ends = {
        d: int(page.next_cursor) if page.next_cursor else at[d] + len(page.rows)
        for d, page in links.items()
    }
    return f"{ends.get('outgoing', 0)},{ends.get('incoming', 0)}"


async def _siblings(bridge: Bridge, target: MarkURL, page_size: int, view: _View) -> str:
    folder = target.with_path(paths.parent(target.path))
    listed = await guard(bridge.client.list(folder, page_size=page_size + 1))
    if listed.status != Status.OK:
        return "## Siblings\n\n(the folder cannot be listed)"
    entries = [e for e in bodies.parse_index(listed.body) if not e.is_dir]
    names = [e.name for e in entries if paths.join(folder.path, e.name) != target.path]
    shown = [f"- {view.name(paths.join(folder.path, name))}" for name in names[:page_size]]
    if listed.next_cursor or len(names) > page_size:
        shown.append("- ... (mark_list the folder for all)")
    return "## Siblings\n\n" + ("\n".join(shown) or "(none)")


@dataclasses.dataclass
class _View:
    """How links read to the agent: bare paths on the -host server, full URLs elsewhere, a
    document as ``[Title](path#anchor)`` when its title is known."""

    bridge: Bridge
    target: MarkURL
    titles: dict[str, str] = dataclasses.field(default_factory=dict)

    def learn(self, page: LinksResult) -> _View:
        self.titles |= {d.path: d.title for d in page.documents}
        return self

    def name(self, path: str, anchor: str = "") -> str:
        default = self.bridge.default
        here = default is not None and default.identity == self.target.identity
        shown = path if here else self.target.identity + path
        return shown + (f"#{anchor}" if anchor else "")

    def link(self, path: str, anchor: str = "") -> str:
        title = self.titles.get(path)
        where = self.name(path, anchor)
        return f"[{_label(title)}]({where})" if title else where

    def section(self, heading: str, total: int, rows: Sequence[LinkRow], *, out: bool) -> str:
        lines = [f"## {heading} ({total})", ""]
        lines += [f"- {self.outbound(row) if out else self.inbound(row)}" for row in rows]
        return "\n".join(lines if rows else [*lines, "(none)"])

    def inbound(self, row: LinkRow) -> str:
        rel = f" [{row.predicate}]" if row.predicate else ""
        label = f' "{row.label}"' if row.label else ""
        return self.link(row.source, row.section) + rel + label

    def outbound(self, row: LinkRow, *, origin: bool = True) -> str:
        if row.external:
            where = f"{row.target} (external)"
        elif row.state == "missing":
            where = f"{self.name(row.target, row.anchor)} (missing)"
        else:
            where = self.link(row.target, row.anchor)
            if row.state == "missing-anchor":
                where += " (no such section)"
        rel = f" [{row.predicate}]" if row.predicate else ""
        label = f' "{row.label}"' if row.label and row.label != row.raw else ""
        at = f" from #{row.section}" if row.section and origin else ""
        return where + rel + label + at

    def relations(self, links: dict[str, LinksResult]) -> str:
        """Edges grouped by the document at their other end: direction, relation, where the
        link sits, its label, and how many such."""
        groups: dict[str, Counter[str]] = {}
        for direction, page in links.items():
            self.learn(page)
            for row in page.rows:
                out = direction == "outgoing"
                other = row.target if out else row.source
                rel = f"[{row.predicate}]" if row.predicate else "[link]"
                label = f' "{row.label}"' if row.label else ""
                edge = f"{'out' if out else 'in'} {rel} {self.name(row.source, row.section)}"
                groups.setdefault(other, Counter())[edge + label] += 1
        lines = [f"## Relations ({len(groups)} documents)", ""]
        for other, edges in groups.items():
            lines.append(f"- {other if not other.startswith('/') else self.link(other)}")
            lines += [f"  - {edge} x{count}" for edge, count in edges.items()]
        return "\n".join(lines if groups else [*lines, "(none)"])

    def graph(self, found: Graph) -> str:
        self.titles |= found.titles
        nodes = [node for node in found.nodes() if node.kind == "document"]
        lines = [f"## Documents ({len(nodes)})", ""]
        lines += [f"- {self.link(node.id)} (depth {node.depth})" for node in nodes]
        lines += ["", f"## Links ({found.total})", ""]
        lines += [
            f"- {self.name(row.source, row.section)} -> {self.outbound(row, origin=False)}"
            for row in found.rows
        ]
        return "\n".join(lines) + "\n"


def _label(text: str) -> str:
    return text.replace("[", "\\[").replace("]", "\\]")
