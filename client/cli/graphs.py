"""The link commands: ``mark links`` (what a document links to), ``mark backlinks`` (what links
to it) and ``mark graph`` (the documents and links around it, as text, JSON, dot or Mermaid).

Each is one or a few LOOKUP ``match: links`` requests (SPEC §5.9), every page gathered: the
server knows every link at once, so nothing is crawled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from markproto.client.cli.options import Options, resolve, server_options, url_argument
from markproto.client.cli.output import emit
from markproto.client.cli.session import run

if TYPE_CHECKING:
    from markproto.client import Client
    from markproto.client.graph import Graph
    from markproto.protocol.bodies import LinkRow
    from markproto.protocol.url import MarkURL

RELATIONS = click.option(
    "-relations",
    "--relations",
    metavar="P,...",
    help="Only these relations (rel-P metadata); an empty item for links in bodies.",
)


@click.command()
@url_argument
@RELATIONS
@server_options
def links(opts: Options, url: str | None, relations: str | None) -> None:
    """List the links a document holds, broken and external ones marked.

    Each line is the link's line in the body, its section, its state (ok, missing,
    missing-anchor, external), where it leads and its label. A folder lists the links of
    every document in it.
    """
    target = resolve(url)
    graph = _gather(opts, target, "outgoing", relations, 1)
    table = [
        (str(row.line) if row.line else "-", _where(row), row.state, _to(row), row.label)
        for row in graph.rows
    ]
    broken = sum(row.broken for row in graph.rows)
    external = sum(row.external for row in graph.rows)
    head = f"{target.path}: {_count(graph.total, 'link')} ({broken} broken, {external} external)"
    _show(opts, graph, head, ("line", "section", "state", "target", "label"), table)


@click.command()
@url_argument
@RELATIONS
@server_options
def backlinks(opts: Options, url: str | None, relations: str | None) -> None:
    """List the links other documents hold that lead to a document.

    Each line is the linking document and section, the link's line there and its label.
    """
    target = resolve(url)
    graph = _gather(opts, target, "incoming", relations, 1)
    table = [
        (_place(row.source, row.section), str(row.line) if row.line else "-", _kind(row), row.label)
        for row in graph.rows
    ]
    head = f"{target.path}: {_count(graph.total, 'backlink')}"
    _show(opts, graph, head, ("source", "line", "kind", "label"), table)


@click.command()
@url_argument
@click.option(
    "-depth",
    "--depth",
    type=click.IntRange(1, 5),
    default=2,
    show_default=True,
    help="Steps to walk out.",
)
@click.option(
    "-direction",
    "--direction",
    type=click.Choice(["outgoing", "incoming", "both"]),
    default="outgoing",
    show_default=True,
    help="Follow the links a document holds, those that lead to it, or both.",
)
@click.option(
    "-format",
    "--format",
    "form",
    type=click.Choice(["text", "dot", "mermaid"]),
    default="text",
    show_default=True,
    help="dot (Graphviz) and mermaid draw the graph.",
)
@RELATIONS
@server_options
def graph(
    opts: Options,
    url: str | None,
    depth: int,
    direction: str,
    form: str,
    relations: str | None,
) -> None:
    """Show the documents and links around a document, up to -depth steps out (at most 5).

    One request per page: the server walks its own link index. External links are listed,
    never followed. -json gives the node and edge lists.
    """
    target = resolve(url)
    found = _gather(opts, target, direction, relations, depth)
    if form == "dot":
        text = found.dot()
    elif form == "mermaid":
        text = found.mermaid()
    else:
        text = _text_graph(found)
    emit(opts, found.result, text.encode(), extra=found.as_json(), notes=_notes(found))


def _gather(
    opts: Options, target: MarkURL, direction: str, relations: str | None, depth: int
) -> Graph:
    from markproto.client.graph import gather

    wanted = None if relations is None else [item.strip() for item in relations.split(",")]

    async def job(client: Client) -> Graph:
        return await gather(client, target, direction=direction, relations=wanted, depth=depth)

    found = run(opts, target, job)
    if found.result.unsupported:
        from markproto.client.results import LINKS_UNSUPPORTED

        emit(opts, found.result, problem=LINKS_UNSUPPORTED)
    if found.result.status != "ok":
        emit(opts, found.result)
    return found


def _show(
    opts: Options,
    found: Graph,
    head: str,
    columns: tuple[str, ...],
    table: Sequence[tuple[str, ...]],
) -> None:
    lines = [head, ""] if table else [head]
    if table:
        widths = [min(max(len(c), *(len(r[i]) for r in table)), 60) for i, c in enumerate(columns)]
        for cells in [columns, *table]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    text = "\n".join(lines) + "\n"
    data: dict[str, Any] = found.as_json()
    extra = {"links": data["edges"], "documents": data["nodes"], "total": found.total}
    emit(opts, found.result, text.encode(), extra={**extra, "cut": found.cut}, notes=_notes(found))


def _text_graph(found: Graph) -> str:
    """Per document reached, ``[depth] title (path, N links)`` and its links under it; then the
    totals."""
    out = []
    by_source: dict[str, list[LinkRow]] = {}
    for row in found.rows:
        by_source.setdefault(row.source, []).append(row)
    for node in found.nodes():
        if node.kind != "document":
            continue
        held = by_source.get(node.id, [])
        out.append(
            f"[{node.depth}] {node.title or node.id} ({node.id}, {_count(len(held), 'link')})"
        )
        out += [f"    {'!' if row.broken else '-'}> {_to(row)}  {row.state}" for row in held]
    documents = sum(node.kind == "document" for node in found.nodes())
    broken = sum(row.broken for row in found.rows)
    external = sum(row.external for row in found.rows)
    out.append(
        f"{_count(documents, 'document')}, {_count(found.total, 'link')} "
        f"({broken} broken, {external} external)"
    )
    return "\n".join(out) + "\n"


def _notes(found: Graph) -> list[str]:
    if found.cut:
        return [f"shown: the first {len(found.rows):,} of {found.total:,} links"]
    return []


def _place(path: str, anchor: str) -> str:
    return path + (f"#{anchor}" if anchor else "")


def _where(row: LinkRow) -> str:
    if row.kind == "relation":
        return f"rel-{row.predicate}"
    return f"#{row.section}" if row.section else "-"


def _kind(row: LinkRow) -> str:
    return f"rel-{row.predicate}" if row.kind == "relation" else row.kind


def _to(row: LinkRow) -> str:
    return row.target if row.external else _place(row.target, row.anchor)


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
