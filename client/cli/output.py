"""What ``mark`` prints: the body on stdout byte for byte, or one JSON object; the status line and
``mark: ...`` notes and failures on stderr. A status other than ok, created or not-modified exits
1 after the body is printed.

Under ``-json`` stdout holds exactly one JSON object, whatever happens. An answer is ``status``,
``metadata``, ``body``, what the command parsed from it (``entries``, ``versions``, ``rows``),
``message`` and ``exit_code``; a command that got no answer prints ``status: "error"`` with the
kind of failure (``error``), its ``message`` and ``exit_code`` (``failures`` does that).
"""

from __future__ import annotations

import json
import sys
from typing import IO, TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from markproto.client import Result
    from markproto.client.cli.options import Options


class Failed(click.ClickException):
    """The command ran but did not succeed: one ``mark: <reason>`` line, exit status 1. ``kind``
    names the failure in JSON; ``shown`` says the JSON object was printed already (an answer's),
    so only the line remains; ``extra`` adds keys to the JSON object."""

    def __init__(
        self,
        message: str,
        *,
        kind: str = "error",
        shown: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.shown = shown
        self.extra = extra or {}

    def show(self, file: IO[Any] | None = None) -> None:
        note(self.format_message())


def note(message: str) -> None:
    click.echo(f"mark: {message}", err=True)


def status_line(result: Result) -> None:
    """``[status] key=value ...`` with keys sorted, as the reference prints it."""
    pairs = "".join(f" {key}={result.meta[key]}" for key in sorted(result.meta))
    click.echo(f"[{result.status}]{pairs}{' (cached)' if result.from_cache else ''}", err=True)


def answer(result: Result, body: bytes, **extra: Any) -> dict[str, Any]:
    """The JSON object of an answer, before its ``message`` and ``exit_code``."""
    return {
        "status": result.status,
        "metadata": result.meta,
        "body": body.decode("utf-8", "replace"),
        **extra,
    }


def failure(kind: str, message: str, exit_code: int, **extra: Any) -> dict[str, Any]:
    """The JSON object of a command that got no answer it could use."""
    return {"status": "error", "error": kind, "message": message, **extra, "exit_code": exit_code}


def print_json(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def emit(
    opts: Options,
    result: Result,
    body: bytes | None = None,
    *,
    notes: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    problem: str | None = None,
) -> None:
    """Print a result as asked; a status other than ok, created or not-modified fails with
    ``problem`` (what the client found out about it) or the status as its line."""
    body = result.body if body is None else body
    code = 0 if result.ok else 1
    if opts.verbose:
        status_line(result)
    if opts.as_json:
        message = problem or result.message
        print_json({**answer(result, body, **(extra or {})), "message": message, "exit_code": code})
    else:
        out = sys.stdout.buffer
        out.write(body)
        out.flush()
    for line in notes or []:
        note(line)
    if code:
        line = f"{result.status}: {problem}" if problem else result.status
        raise Failed(line, kind=result.status, shown=opts.as_json)
