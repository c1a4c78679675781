"""``mark watch``: one line per change to a document or folder, as it happens (WATCH)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from markproto.client.cli.options import Options, resolve, server_options, url_argument
from markproto.client.cli.output import note
from markproto.client.cli.session import run

if TYPE_CHECKING:
    from markproto.client import Client, MarkError, Resync, WatchEvent

INTERRUPTED = 130
"""Exit status after Ctrl-C, the shell's convention for SIGINT."""


@click.command()
@url_argument
@click.option(
    "-since", "--since", metavar="CURSOR", help="Resume after CURSOR (the first field of a line)."
)
@server_options
def watch(opts: Options, url: str | None, since: str | None) -> None:
    """Print a line for each change under a folder, or to one document, as it happens.

    Each line is cursor, op, path, version, hash and agent, separated by tabs (-json: one
    JSON object per line). A resync line (cursor, then "resync") says changes were missed
    and cannot be replayed: rebuild from list and fetch. It reconnects and resumes on its
    own; Ctrl-C stops it.
    """
    from markproto.client import Cursor
    from markproto.protocol.watch import InvalidWatchCursor

    target = resolve(url)
    try:
        start = Cursor.parse(since) if since else None
    except InvalidWatchCursor:
        message = f"{since!r} is not a cursor (<epoch>:<seq>)"
        raise click.BadParameter(message, param_hint="-since") from None

    async def follow(client: Client) -> None:
        async with client.watch(target, since=start, on_reconnect=reconnecting) as changes:
            async for notice in changes:
                line(notice, opts.as_json)

    try:
        run(opts, target, follow)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(INTERRUPTED) from None


def reconnecting(exc: MarkError) -> None:
    note(f"reconnecting ({exc})")


def line(notice: WatchEvent | Resync, as_json: bool) -> None:
    """One change as the reference prints it (``cursor op path version hash agent``), or as a
    JSON object with the same fields."""
    from markproto.client import WatchEvent

    fields: dict[str, Any] = {"cursor": None if notice.cursor is None else str(notice.cursor)}
    if isinstance(notice, WatchEvent):
        fields.update(
            op=notice.op,
            path=notice.path,
            version=notice.version,
            hash=notice.hash,
            agent=notice.agent,
        )
    else:
        fields.update(op="resync", path=None, version=None, hash=None, agent=None)
    if as_json:
        text = json.dumps(fields, ensure_ascii=False)
    else:
        text = "\t".join("" if value is None else str(value) for value in fields.values())
    out = sys.stdout
    out.write(text + "\n")
    out.flush()


COMMANDS = (watch,)
