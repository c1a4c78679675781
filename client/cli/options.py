"""What a ``mark`` command line says: the options every server command shares, and the URL, body
and metadata arguments read and checked before anything is sent (a bad one exits 2)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from markproto.protocol.url import MarkURL

TIMEOUT = click.option(
    "-timeout",
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Dial and response timeout in seconds.",
)
INSECURE = click.option(
    "-insecure", "--insecure", is_flag=True, help="Skip certificate verification."
)
TRUST_NEW = click.option(
    "-trust-new",
    "--trust-new",
    is_flag=True,
    help="Pin a certificate no CA vouches for on first contact (ssh's accept-new).",
)
NO_CACHE = click.option(
    "-no-cache", "--no-cache", is_flag=True, help="Neither use nor fill the cache."
)
YES = click.option(
    "-yes",
    "--yes",
    is_flag=True,
    help="Confirm a write that deletes old versions (-meta retention=N) without asking.",
)


@dataclass(frozen=True, slots=True)
class Options:
    """The options every command that talks to a server takes."""

    auth: str | None
    insecure: bool
    trust_new: bool
    timeout: float
    as_json: bool
    verbose: bool


_COMMON = (
    click.option(
        "-auth",
        "--auth",
        metavar="TOKEN",
        help="Token for this host (else MARK_AUTH or tokens.toml).",
    ),
    INSECURE,
    TRUST_NEW,
    TIMEOUT,
    click.option(
        "-json",
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON object (status, metadata, body).",
    ),
    click.option("-v", "--verbose", is_flag=True, help="Print the status and metadata on stderr."),
)


def server_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the common options and hand them to ``command`` as one ``Options`` value."""

    @functools.wraps(command)
    def run(**kwargs: Any) -> None:
        opts = Options(**{name: kwargs.pop(name) for name in Options.__slots__})
        command(opts, **kwargs)

    for option in reversed(_COMMON):
        run = option(run)
    return run


def url_argument(command: Callable[..., None]) -> Callable[..., None]:
    return click.argument("url", required=False)(command)


def body_options(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(
        (
            click.option("-body", "--body", "text", metavar="TEXT", help="The text to send."),
            click.option(
                "-file", "--file", type=click.File("rb"), help="Read the text from FILE (- stdin)."
            ),
            click.option(
                "-meta",
                "--meta",
                "pairs",
                metavar="KEY=VALUE",
                multiple=True,
                help="Publisher metadata, repeatable (tags=a,b  importance=0.8  type=Note).",
            ),
        )
    ):
        command = option(command)
    return command


def resolve(text: str | None) -> MarkURL:
    """The URL argument, bare paths resolved against ``MARK_HOST``; bad ones are usage errors."""
    from markproto.client import environment
    from markproto.protocol.errors import InvalidURL
    from markproto.protocol.url import parse_url

    host = environment.variable(environment.HOST)
    if text is None:
        if host is None:
            raise click.UsageError("no URL given (write mark://host[:port]/path or set MARK_HOST)")
        text = "/"
    try:
        return parse_url(text, default_host=host)
    except InvalidURL as exc:
        source = "MARK_HOST" if host and text.startswith("/") else "URL"
        raise click.BadParameter(str(exc), param_hint=source) from None


def read_body(text: str | None, file: IO[bytes] | None) -> bytes:
    """The text to send, from ``-body``, ``-file`` or piped stdin, within the protocol's limit."""
    from markproto.protocol.limits import MAX_BODY

    if text is not None and file is not None:
        raise click.UsageError("give the body with -body or with -file, not both")
    if text is not None:
        data = text.encode()
    elif file is not None:
        data = file.read()
    else:
        stdin = sys.stdin.buffer
        if stdin.isatty():
            raise click.UsageError("no body: give -body TEXT or -file F, or pipe it on stdin")
        data = stdin.read()
    if len(data) > MAX_BODY:
        raise click.UsageError(f"the body is {len(data)} bytes; the limit is {MAX_BODY}")
    return data


def read_meta(pairs: tuple[str, ...]) -> dict[str, str]:
    """``-meta key=value`` options as publisher metadata, checked by the server's own rules, and
    the values it interprets by how it would read them (``importance=2`` would silently be 0.5)."""
    from markproto.protocol.errors import InvalidMetadata
    from markproto.protocol.metadata import CONTROL_KEYS, validate, validate_interpreted

    given: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="-meta")
        if key in given:
            raise click.BadParameter(f"{key!r} is given twice", param_hint="-meta")
        if key in CONTROL_KEYS:
            raise click.BadParameter(f"{key!r} has its own option", param_hint="-meta")
        given[key] = value
    try:
        validate(given)
        validate_interpreted(given)
    except InvalidMetadata as exc:
        raise click.BadParameter(str(exc), param_hint="-meta") from None
    return given


def confirm_pruning(target: MarkURL, meta: dict[str, str], yes: bool) -> None:
    """A write carrying ``retention`` deletes old versions for good: it needs ``-yes``, or a yes
    on the terminal; without a terminal it is refused."""
    keep = meta.get("retention")
    if keep is None or yes:
        return
    what = f"-meta retention={keep} deletes every version of {target} but the newest {keep}"
    if not sys.stdin.isatty():
        raise click.UsageError(f"{what}; add -yes to confirm")
    from markproto.client.cli.output import Failed
    from markproto.client.cli.session import ask

    if not ask(f"{what}. Go on?"):
        raise Failed("not confirmed, nothing written", kind="not-confirmed")
