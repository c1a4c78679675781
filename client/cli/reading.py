"""The reading commands: fetch, list, versions, lookup, info and ping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

from markproto.client.cli.options import NO_CACHE, Options, resolve, server_options, url_argument
from markproto.client.cli.output import Failed, answer, emit, print_json, status_line
from markproto.client.cli.session import run

if TYPE_CHECKING:
    from markproto.client import Client, LookupResult, Result
    from markproto.protocol.url import MarkURL

T = TypeVar("T")
FOLDER, DOCUMENT = "folder", "document"
_NEVER = "9999-12-31T23:59:59Z"
"""An ``if-modified-since`` no version can be newer than: a document answers it bodiless."""


@click.command()
@url_argument
@click.option("-outline", "--outline", is_flag=True, help="Print the heading tree with anchors.")
@NO_CACHE
@server_options
def fetch(opts: Options, url: str | None, outline: bool, no_cache: bool) -> None:
    """Print a document, or one section of it.

    URL#anchor prints only the section under that heading (its subheadings included);
    -outline prints the heading tree with each heading's anchor.
    """
    target = resolve(url)
    result = run(opts, target, lambda client: client.fetch(target), cache=not no_cache)
    body = result.body
    if outline and result.status == "ok":
        from markproto.protocol import mdoutline

        body = mdoutline.outline(body.decode("utf-8", "replace")).encode()
    emit(opts, result, body)


@click.command(name="list")
@url_argument
@click.option("-cursor", "--cursor", metavar="C", help="Continue after the page that gave C.")
@click.option("-page-size", "--page-size", type=click.IntRange(1, 1000), help="Entries per page.")
@click.option("-include-archived", "--include-archived", is_flag=True, help="Show archived too.")
@NO_CACHE
@server_options
def list_(
    opts: Options,
    url: str | None,
    cursor: str | None,
    page_size: int | None,
    include_archived: bool,
    no_cache: bool,
) -> None:
    """List a folder, one page at a time.

    When more entries follow, stderr says which -cursor continues the listing.
    """
    target = resolve(url)

    async def job(client: Client) -> tuple[Result, str | None]:
        result = await client.list(
            target, cursor=cursor, page_size=page_size, include_archived=include_archived
        )
        return result, await _unless_found(client, result, target, DOCUMENT)

    result, kind = run(opts, target, job, cache=not no_cache)
    more = result.next_cursor
    entries = None
    if result.status == "ok":
        from markproto.protocol import bodies, paths

        folder = target.with_path(paths.clean(target.path))
        entries = [
            {
                "name": entry.name,
                "type": FOLDER if entry.is_dir else DOCUMENT,
                "url": str(folder.with_path(paths.join(folder.path, entry.name)))
                + ("/" if entry.is_dir else ""),
            }
            for entry in _parsed(target, bodies.parse_index, result.body)
        ]
    problem = None
    if kind == DOCUMENT:
        parent = target.with_path(_parent(target.path))
        problem = (
            f"{target.path} is a document, not a folder: read it with mark fetch {target}, "
            f"or list its folder with mark list {parent}"
        )
    emit(
        opts,
        result,
        notes=[f"more entries: continue with -cursor {more}"] if more else [],
        extra={} if entries is None else {"entries": entries, "next_cursor": more},
        problem=problem,
    )


@click.command()
@url_argument
@server_options
def versions(opts: Options, url: str | None) -> None:
    """List a document's versions, newest first.

    The metadata (-v) says whether the hash chain over the versions is intact. Each line links
    the version as a URL that mark fetch takes.
    """
    target = resolve(url)

    async def job(client: Client) -> tuple[Result, str | None]:
        result = await client.versions(target)
        return result, await _unless_found(client, result, target, FOLDER)

    result, kind = run(opts, target, job)
    if result.status != "ok":
        problem = None
        if kind == FOLDER:
            problem = f"{target.path} is a folder, not a document: list it with mark list {target}"
        emit(opts, result, problem=problem)
        return
    from markproto.protocol import bodies, paths
    from markproto.protocol.escape import escape
    from markproto.protocol.times import format_time

    document = paths.clean(target.path)
    history = [
        (entry, str(target.with_path(f"{document}/v{entry.version}")))
        for entry in _parsed(target, bodies.parse_history, result.body)
    ]
    lines = [f"\n# Version History: {escape(document)}\n\n"]
    lines += (
        f"- [v{entry.version}]({link}) - {format_time(entry.modified)}\n" for entry, link in history
    )
    versions = [
        {"version": entry.version, "modified": format_time(entry.modified), "url": link}
        for entry, link in history
    ]
    emit(opts, result, "".join(lines).encode(), extra={"versions": versions})


@click.command()
@url_argument
@click.option("-query", "--query", required=True, help="Subject to match ('*' matches all).")
@click.option("-filter", "--filter", "filter_", metavar="K=V,...", help="tag=, modified-after=...")
@click.option("-limit", "--limit", type=click.IntRange(min=1), help="Most rows (default 10).")
@click.option(
    "-match",
    "--match",
    type=click.Choice(["catalog", "body"]),
    help="catalog: tags and titles (default); body: section text too.",
)
@server_options
def lookup(
    opts: Options,
    url: str | None,
    query: str,
    filter_: str | None,
    limit: int | None,
    match: str | None,
) -> None:
    """Find documents or sections under a scope.

    The catalog match looks at tags and titles; -match body also finds the sections whose
    text holds the query, as path#anchor rows with a snippet.
    """
    if not query.strip():
        raise click.BadParameter("must not be empty ('*' matches everything)", param_hint="-query")
    target = resolve(url)

    async def job(client: Client) -> tuple[LookupResult, str | None]:
        result = await client.lookup(target, query, filter=filter_, limit=limit, match=match)
        return result, await _unless_found(client, result, target, DOCUMENT)

    result, kind = run(opts, target, job)
    notes = []
    if result.answered_from_catalog:
        from markproto.client.results import CATALOG_FALLBACK_NOTE

        notes.append(f"note: {CATALOG_FALLBACK_NOTE}")
    rows = [
        {
            "path": row.path,
            "anchor": row.anchor,
            "importance": row.importance,
            "title": row.title,
            "tags": list(row.tags),
            "snippet": row.snippet,
            "url": str(target.with_path(row.path)) + (f"#{row.anchor}" if row.anchor else ""),
        }
        for row in result.rows
    ]
    problem = None
    if kind == DOCUMENT:
        parent = target.with_path(_parent(target.path))
        problem = (
            f"{target.path} is a document, not a folder: lookup searches a folder, such as {parent}"
        )
    emit(
        opts,
        result,
        notes=notes,
        extra={"rows": rows, "catalog_fallback": result.answered_from_catalog},
        problem=problem,
    )


@click.command()
@url_argument
@server_options
def info(opts: Options, url: str | None) -> None:
    """Print the server's agent manifest."""
    target = resolve(url)
    result = run(opts, target, lambda client: client.manifest(target))
    if result.status == "not-found" and not opts.as_json:
        raise Failed(f"{target.identity} publishes no agent manifest")
    emit(opts, result)


@click.command()
@url_argument
@server_options
def ping(opts: Options, url: str | None) -> None:
    """Check that a server answers.

    Any answer counts, even not-found: the exit status says whether the server is up.
    """
    target = resolve(url)
    elapsed = 0.0

    async def timed(client: Client) -> Result:
        nonlocal elapsed
        start = time.perf_counter()
        result = await client.manifest(target)
        elapsed = round((time.perf_counter() - start) * 1000, 1)
        return result

    result = run(opts, target, timed)
    if opts.verbose:
        status_line(result)
    if opts.as_json:
        print_json(
            {**answer(result, result.body), "elapsed_ms": elapsed, "message": "", "exit_code": 0}
        )
    else:
        click.echo(f"{target.identity}: {result.status} in {elapsed} ms")


async def _unless_found(client: Client, result: Result, target: MarkURL, kind: str) -> str | None:
    """``kind`` when the verb found nothing at ``target`` because something of that kind is there
    (the wire answer stays the reference's ``not-found``, SPEC §5.2): one cheap question on the
    same connection, LIST of one entry for a folder, a bodiless conditional FETCH for a
    document."""
    if result.status != "not-found":
        return None
    if kind == FOLDER:
        probe = await client.list(target.with_path(target.path), page_size=1)
        return kind if probe.status == "ok" else None
    probe = await client.fetch(target.with_path(target.path), if_modified_since=_NEVER)
    return kind if probe.status in ("not-modified", "ok", "archived") else None


def _parent(path: str) -> str:
    from markproto.protocol import paths

    parent = paths.clean(path).rpartition("/")[0]
    return parent + "/" if parent else "/"


def _parsed(target: MarkURL, parse: Callable[[bytes], list[T]], body: bytes) -> list[T]:
    from markproto.protocol.errors import ProtocolError

    try:
        return parse(body)
    except ProtocolError as exc:
        raise Failed(
            f"{target.authority}: unreadable response ({exc})", kind="unreadable-response"
        ) from None
