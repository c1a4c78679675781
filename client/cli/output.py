"""What ``mark`` prints: the body on stdout byte for byte, or one JSON object; the status line and
``mark: ...`` notes and failures on stderr. A status other than ok, created or not-modified exits
1 after the body is printed."""

from __future__ import annotations

import json
import sys
from typing import IO, TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from markproto.client import Result
    from markproto.client.cli.options import Options


class Failed(click.ClickException):
    """The command ran but did not succeed: one ``mark: <reason>`` line, exit status 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        note(self.format_message())


def note(message: str) -> None:
    click.echo(f"mark: {message}", err=True)


def status_line(result: Result) -> None:
    """``[status] key=value ...`` with keys sorted, as the reference prints it."""
    pairs = "".join(f" {key}={result.meta[key]}" for key in sorted(result.meta))
    click.echo(f"[{result.status}]{pairs}{' (cached)' if result.from_cache else ''}", err=True)


def as_json(result: Result, body: bytes) -> dict[str, Any]:
    return {
        "status": result.status,
        "metadata": result.meta,
        "body": body.decode("utf-8", "replace"),
    }


def print_json(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def emit(
    opts: Options,
    result: Result,
    body: bytes | None = None,
    *,
    notes: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Print a result as asked; a status other than ok, created or not-modified fails."""
    body = result.body if body is None else body
    if opts.verbose:
        status_line(result)
    if opts.as_json:
        print_json({**as_json(result, body), **(extra or {})})
    else:
        out = sys.stdout.buffer
        out.write(body)
        out.flush()
    for line in notes or []:
        note(line)
    if not result.ok:
        raise Failed(result.status)
