"""The link graph as the faces show it (``mark links``, ``mark backlinks``, ``mark graph``, the
MCP bridge's ``mark_explore``, ``mark_backlinks`` and ``mark_graph``): every page of a
``match: links`` answer gathered, and its nodes and edges drawn as JSON, Graphviz ``dot`` or
Mermaid.

A node is a document (with its title and how far from the start the walk reached it), an external
URL, or a path no document answers to (a broken link's target); an edge is one link.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from markproto.client.results import LinksResult
from markproto.protocol.bodies import LinkDocument, LinkRow
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL

if TYPE_CHECKING:
    from markproto.client.client import Client

ROWS_MAX = 10_000
"""Links one gathering reads at most (ten pages of 1000): a face shows a bounded graph."""
PAGE = 1000
DOCUMENT, EXTERNAL, MISSING = "document", "external", "missing"


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    """The path of a document or of a missing target, or an external URL."""
    kind: str
    title: str = ""
    depth: int | None = None


@dataclass(frozen=True, slots=True)
class Graph:
    """Links around ``start``: what the server answered (the last page's status and metadata)
    and every row of every page gathered."""

    start: MarkURL
    result: LinksResult
    rows: tuple[LinkRow, ...] = ()
    documents: tuple[LinkDocument, ...] = ()
    cut: bool = False
    """More rows than ``ROWS_MAX``: the rest were not gathered."""
    titles: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.result.total

    def url(self, path: str, anchor: str = "") -> str:
        """The ``mark://`` URL of a document of the start's server."""
        return str(replace(self.start.with_path(path), anchor=anchor))

    def link_url(self, row: LinkRow) -> str:
        return row.target if row.external else self.url(row.target, row.anchor)

    def title(self, path: str) -> str:
        return self.titles.get(path, "")

    def nodes(self) -> list[Node]:
        found: dict[str, Node] = {
            d.path: Node(d.path, DOCUMENT, d.title, d.depth) for d in self.documents
        }
        for row in self.rows:
            if row.external:
                found.setdefault(row.target, Node(row.target, EXTERNAL))
            elif row.state == "missing":
                found.setdefault(row.target, Node(row.target, MISSING))
        return list(found.values())

    def as_json(self) -> dict[str, Any]:
        """``nodes`` and ``edges``, with ``url`` on each document and link."""
        nodes = [
            {
                "id": node.id,
                "kind": node.kind,
                "title": node.title,
                "depth": node.depth,
                "url": node.id if node.kind == EXTERNAL else self.url(node.id),
            }
            for node in self.nodes()
        ]
        edges = [
            {
                "source": row.source,
                "section": row.section,
                "line": row.line,
                "target": row.target,
                "anchor": row.anchor,
                "raw": row.raw,
                "kind": row.kind,
                "relation": row.predicate,
                "state": row.state,
                "label": row.label,
                "url": self.link_url(row),
            }
            for row in self.rows
        ]
        return {"nodes": nodes, "edges": edges, "total": self.total, "cut": self.cut}

    def dot(self) -> str:
        """Graphviz: documents as boxes, external URLs dashed, missing targets red; each link an
        edge labelled with its relation (or nothing), broken ones red."""
        ids = {node.id: f"n{i}" for i, node in enumerate(self.nodes())}
        lines = ["digraph links {", "  rankdir=LR;", "  node [shape=box];"]
        for node in self.nodes():
            style = {EXTERNAL: ", style=dashed", MISSING: ", color=red, fontcolor=red"}
            label = node.title or node.id
            lines.append(f"  {ids[node.id]} [label={_dot(label)}{style.get(node.kind, '')}];")
        for row in self.rows:
            attrs = []
            if row.predicate:
                attrs.append(f"label={_dot(row.predicate)}")
            if row.broken:
                attrs.append("color=red")
            tail = f" [{', '.join(attrs)}]" if attrs else ""
            lines.append(f"  {ids[row.source]} -> {ids[row.target]}{tail};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def mermaid(self) -> str:
        """Mermaid ``graph LR``: documents as boxes, external URLs rounded, missing targets
        marked; relation links labelled, broken ones dotted."""
        ids = {node.id: f"n{i}" for i, node in enumerate(self.nodes())}
        lines = ["graph LR"]
        for node in self.nodes():
            label = _mermaid(node.title or node.id)
            if node.kind == EXTERNAL:
                shape = f'("{label}")'
            elif node.kind == MISSING:
                shape = f'["{label} (missing)"]'
            else:
                shape = f'["{label}"]'
            lines.append(f"  {ids[node.id]}{shape}")
        for row in self.rows:
            arrow = "-.->" if row.broken else "-->"
            label = f"|{_mermaid(row.predicate)}|" if row.predicate else ""
            lines.append(f"  {ids[row.source]} {arrow}{label} {ids[row.target]}")
        return "\n".join(lines) + "\n"


def _dot(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _mermaid(text: str) -> str:
    """Text inside a Mermaid label: quotes and the characters its parser reads as syntax
    written as entity codes."""
    for char, code in (('"', "#quot;"), ("|", "#124;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(char, code)
    return text


async def gather(
    client: Client,
    target: MarkURL,
    *,
    direction: str | None = None,
    relations: Sequence[str] | None = None,
    depth: int | None = None,
    rows_max: int = ROWS_MAX,
) -> Graph:
    """Every page of the links around ``target`` (at most ``rows_max`` rows). A refusal comes
    back as the graph's ``result`` with no rows."""
    rows: list[LinkRow] = []
    documents: dict[str, LinkDocument] = {}
    cursor: str | None = None
    while True:
        result = await client.links(
            target,
            direction=direction,
            relations=relations,
            depth=depth,
            limit=min(PAGE, rows_max - len(rows)),
            cursor=cursor,
        )
        if result.status != Status.OK:
            return Graph(target, result)
        rows += result.rows
        for document in result.documents:
            documents.setdefault(document.path, document)
        cursor = result.next_cursor
        if cursor is None or len(rows) >= rows_max:
            break
    titles = {path: document.title for path, document in documents.items()}
    return Graph(
        target,
        result,
        tuple(rows),
        tuple(documents.values()),
        cut=cursor is not None,
        titles=titles,
    )
