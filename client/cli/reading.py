"""The reading commands: fetch, list, versions, lookup, info and ping."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from markproto.client.cli.options import NO_CACHE, Options, resolve, server_options, url_argument
from markproto.client.cli.output import Failed, as_json, emit, print_json, status_line
from markproto.client.cli.session import run

if TYPE_CHECKING:
    from markproto.client import Client, LookupResult, Result


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
    result = run(
        opts,
        target,
        lambda client: client.list(
            target, cursor=cursor, page_size=page_size, include_archived=include_archived
        ),
        cache=not no_cache,
    )
    more = result.next_cursor
    emit(opts, result, notes=[f"more entries: continue with -cursor {more}"] if more else [])


@click.command()
@url_argument
@server_options
def versions(opts: Options, url: str | None) -> None:
    """List a document's versions, newest first.

    The metadata (-v) says whether the hash chain over the versions is intact.
    """
    target = resolve(url)
    emit(opts, run(opts, target, lambda client: client.versions(target)))


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
    result: LookupResult = run(
        opts,
        target,
        lambda client: client.lookup(target, query, filter=filter_, limit=limit, match=match),
    )
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
        }
        for row in result.rows
    ]
    emit(
        opts,
        result,
        notes=notes,
        extra={"rows": rows, "catalog_fallback": result.answered_from_catalog},
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
        print_json({**as_json(result, result.body), "elapsed_ms": elapsed})
    else:
        click.echo(f"{target.identity}: {result.status} in {elapsed} ms")


COMMANDS = (fetch, list_, versions, lookup, info, ping)
