"""How a ``mark`` command reaches a server: a fresh ``Client`` set up from the environment
(``Client.from_environment``, the same as the MCP bridge's) for one job, whose every failure to
get an answer becomes one ``mark:`` line and exit status 1."""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from markproto.client.cli.output import Failed, note

if TYPE_CHECKING:
    from markproto.client import Client, MarkError, TokenStore
    from markproto.client.cli.options import Options
    from markproto.protocol.url import MarkURL

T = TypeVar("T")


def client_for(opts: Options, target: MarkURL, *, cache: bool) -> Client:
    """The client for a command on ``target``: ``-auth`` (else ``MARK_AUTH``) goes to its server
    only; a terminal may be asked to pin a certificate no CA vouches for."""
    from markproto.client import Client, UsageError

    try:
        return Client.from_environment(
            target,
            token=opts.auth or None,
            insecure=opts.insecure,
            trust_new=opts.trust_new,
            timeout=opts.timeout,
            cache=cache,
            confirm=confirm if sys.stdin.isatty() else None,
            note=note,
        )
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="-auth/MARK_AUTH") from None


def run(
    opts: Options, target: MarkURL, job: Callable[[Client], Awaitable[T]], *, cache: bool = False
) -> T:
    """Run one job on a fresh client; every failure to get an answer becomes ``Failed``."""
    import asyncio

    from markproto.client import AnchorNotFound, MarkError, UsageError

    client = client_for(opts, target, cache=cache)

    async def session() -> T:
        async with client:
            return await job(client)

    try:
        return asyncio.run(session())
    except UsageError as exc:
        raise click.UsageError(str(exc)) from None
    except AnchorNotFound as exc:
        raise Failed(str(exc), kind=kind(exc), extra={"anchors": exc.anchors}) from None
    except MarkError as exc:
        raise Failed(str(exc), kind=kind(exc)) from None


def kind(exc: MarkError) -> str:
    """The failure's name in JSON: the exception's class in kebab case (``request-timeout``)."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", type(exc).__name__).lower()


def confirm(authority: str, fingerprint: str) -> bool:
    return ask(
        f"{authority} presents a certificate no CA vouches for:\n  {fingerprint}\n"
        "Pin it and connect?"
    )


def ask(question: str) -> bool:
    """A yes/no question on the terminal; no answer (end of input) is no. Ctrl-C interrupts the
    read itself: inside a request the event loop is blocked while it waits, and asyncio's own
    handler would act only after the next Enter."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        click.echo(f"{question} [y/N]: ", nl=False, err=True)
        answer = sys.stdin.readline()
    finally:
        signal.signal(signal.SIGINT, previous)
    return answer.strip().lower() in ("y", "yes")


def token_store() -> TokenStore:
    from markproto.client import TokenStore, environment

    return TokenStore(environment.home() / "tokens.toml", warn=note)
