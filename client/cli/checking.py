"""``mark check``: broken links and anchors, frontmatter, duplicate headings, titles and orphans
of a server's folder or of a local folder before import (``markproto.client.check``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from markproto.client.cli.options import Options, resolve, server_options
from markproto.client.cli.output import Failed, print_json
from markproto.client.cli.session import run

if TYPE_CHECKING:
    from markproto.client import Client
    from markproto.client.check import Report


@click.command()
@click.argument("target", required=False)
@click.option("-strict", "--strict", is_flag=True, help="Fail on warnings too.")
@server_options
def check(opts: Options, target: str | None, strict: bool) -> None:
    """Check a collection: a server's folder (mark://host/docs/) or a local folder (./vault).

    Errors: bodies that are not UTF-8, malformed or oversized frontmatter, links to no document
    or to no section. Warnings: unclosed frontmatter, frontmatter over the metadata limits,
    duplicate headings, documents without a title, orphans (index.md aside). Findings are
    grouped by document; the exit status is 1 on errors (on warnings too with -strict).

    An existing local folder is checked as the documents an import would make of it, each link
    resolved among them; anything else is a URL (a bare /path with MARK_HOST).
    """
    from markproto.client import check as checks

    if target is not None and Path(target).is_dir():
        found = checks.check_folder(Path(target))
    else:
        if target is not None and not target.startswith(("mark://", "/")):
            raise click.BadParameter(
                f"{target} is neither a folder nor a mark:// URL", param_hint="TARGET"
            )
        url = resolve(target)

        async def job(client: Client) -> Report:
            from markproto.client import LinksResult, StatusError
            from markproto.client.results import LINKS_UNSUPPORTED

            try:
                return await checks.check_server(client, url)
            except StatusError as exc:
                if isinstance(exc.result, LinksResult) and exc.result.unsupported:
                    raise Failed(LINKS_UNSUPPORTED, kind="bad-request") from None
                raise Failed(f"{url}: {exc}", kind=exc.status) from None

        found = run(opts, url, job)
    code = found.exit_code(strict)
    if opts.as_json:
        summary = {"status": "ok", **found.as_json(), "message": found.summary()}
        print_json({**summary, "exit_code": code})
    else:
        click.echo(found.table(), nl=False)
    if code:
        raise Failed(found.summary(), kind="check", shown=opts.as_json)
