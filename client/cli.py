"""``mark``: the client's command line, a thin face over ``client.Client``.

Conventions: long options work with one dash or two (``-match body``, ``--match body``) and may
come before or after the URL; the URL may be a bare path, or left out, when ``MARK_HOST`` names a
server. The body goes to stdout; ``-v`` adds the status line on stderr; ``-json`` prints one JSON
object instead. Exit status: 0 for ok, created and not-modified; 1 for any other status or a
failure to get an answer; 2 for a command line that cannot be run.

The network stack and the markdown parser are imported inside the commands that use them, so
``mark --help`` and typos answer at once. Client state lives in ``MARK_HOME`` (``~/.mark``):
``tokens.toml``, ``known_hosts`` and ``cache/``.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from markproto.client.client import Client, LookupResult, Result
    from markproto.client.tokenstore import TokenStore
    from markproto.protocol.url import MarkURL

R = TypeVar("R", bound="Result")
_WAITING_EDITORS = frozenset({"code", "zed", "subl", "atom"})
"""GUI editors that return at once unless told to wait for the file to be closed."""


class Failed(click.ClickException):
    """The command ran but did not succeed: one ``mark: <reason>`` line, exit status 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"mark: {self.format_message()}", err=True)


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
    click.option("-insecure", "--insecure", is_flag=True, help="Skip certificate verification."),
    click.option(
        "-trust-new",
        "--trust-new",
        is_flag=True,
        help="Pin a certificate no CA vouches for on first contact (ssh's accept-new).",
    ),
    click.option(
        "-timeout",
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=10.0,
        show_default=True,
        help="Dial and response timeout in seconds.",
    ),
    click.option(
        "-json",
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON object (status, metadata, body).",
    ),
    click.option("-v", "--verbose", is_flag=True, help="Print the status and metadata on stderr."),
)


def _server_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the common options and hand them to ``command`` as one ``Options`` value."""

    @functools.wraps(command)
    def run(**kwargs: Any) -> None:
        opts = Options(**{name: kwargs.pop(name) for name in Options.__slots__})
        command(opts, **kwargs)

    for option in reversed(_COMMON):
        run = option(run)
    return run


def _url_argument(command: Callable[..., None]) -> Callable[..., None]:
    return click.argument("url", required=False)(command)


def _body_options(command: Callable[..., None]) -> Callable[..., None]:
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="markproto", prog_name="mark")
def main() -> None:
    """Read and write versioned markdown on Mark Protocol servers.

    URLs look like mark://host[:port]/path (port 6309 by default). With MARK_HOST set
    (e.g. mark://localhost) a bare /path will do, and no URL at all means /.
    """


# --- reading ----------------------------------------------------------------------------------


@main.command()
@_url_argument
@click.option("-outline", "--outline", is_flag=True, help="Print the heading tree with anchors.")
@click.option("-no-cache", "--no-cache", is_flag=True, help="Neither use nor fill the cache.")
@_server_options
def fetch(opts: Options, url: str | None, outline: bool, no_cache: bool) -> None:
    """Print a document, or one section of it.

    URL#anchor prints only the section under that heading (its subheadings included);
    -outline prints the heading tree with each heading's anchor.
    """
    target = _target(url)
    result = _run(opts, target, lambda client: client.fetch(target), cache=not no_cache)
    body = result.body
    if outline and result.status == "ok":
        from markproto.protocol import mdoutline

        body = mdoutline.outline(body.decode("utf-8", "replace")).encode()
    _emit(opts, result, body)


@main.command(name="list")
@_url_argument
@click.option("-cursor", "--cursor", metavar="C", help="Continue after the page that gave C.")
@click.option("-page-size", "--page-size", type=click.IntRange(1, 1000), help="Entries per page.")
@click.option("-include-archived", "--include-archived", is_flag=True, help="Show archived too.")
@click.option("-no-cache", "--no-cache", is_flag=True, help="Neither use nor fill the cache.")
@_server_options
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
    target = _target(url)
    result = _run(
        opts,
        target,
        lambda client: client.list(
            target, cursor=cursor, page_size=page_size, include_archived=include_archived
        ),
        cache=not no_cache,
    )
    more = result.next_cursor
    _emit(opts, result, notes=[f"more entries: continue with -cursor {more}"] if more else [])


@main.command()
@_url_argument
@_server_options
def versions(opts: Options, url: str | None) -> None:
    """List a document's versions, newest first.

    The metadata (-v) says whether the hash chain over the versions is intact.
    """
    target = _target(url)
    _emit(opts, _run(opts, target, lambda client: client.versions(target)))


@main.command()
@_url_argument
@click.option("-query", "--query", required=True, help="Subject to match ('*' matches all).")
@click.option("-filter", "--filter", "filter_", metavar="K=V,...", help="tag=, modified-after=...")
@click.option("-limit", "--limit", type=click.IntRange(min=1), help="Most rows (default 10).")
@click.option(
    "-match",
    "--match",
    type=click.Choice(["catalog", "body"]),
    help="catalog: tags and titles (default); body: section text too.",
)
@_server_options
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
    target = _target(url)
    result: LookupResult = _run(
        opts,
        target,
        lambda client: client.lookup(target, query, filter=filter_, limit=limit, match=match),
    )
    notes = []
    if result.answered_from_catalog:
        from markproto.client.client import CATALOG_FALLBACK_NOTE

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
    _emit(
        opts,
        result,
        notes=notes,
        extra={"rows": rows, "catalog_fallback": result.answered_from_catalog},
    )


@main.command()
@_url_argument
@_server_options
def info(opts: Options, url: str | None) -> None:
    """Print the server's agent manifest."""
    target = _target(url)
    result = _run(opts, target, lambda client: client.manifest(target))
    if result.status == "not-found" and not opts.as_json:
        raise Failed(f"{target.identity} publishes no agent manifest")
    _emit(opts, result)


@main.command()
@_url_argument
@_server_options
def ping(opts: Options, url: str | None) -> None:
    """Check that a server answers.

    Any answer counts, even not-found: the exit status says whether the server is up.
    """
    target = _target(url)
    elapsed = 0.0

    async def timed(client: Client) -> Result:
        nonlocal elapsed
        start = time.perf_counter()
        result = await client.manifest(target)
        elapsed = round((time.perf_counter() - start) * 1000, 1)
        return result

    result = _run(opts, target, timed)
    if opts.verbose:
        _status_line(result)
    if opts.as_json:
        _print_json({**_json(result, result.body), "elapsed_ms": elapsed})
    else:
        click.echo(f"{target.identity}: {result.status} in {elapsed} ms")


# --- writing ----------------------------------------------------------------------------------


@main.command()
@_url_argument
@_body_options
@click.option(
    "-expected-version",
    "--expected-version",
    type=click.IntRange(min=0),
    help="Replace version N only; 0 creates a new document only.",
)
@click.option("-force", "--force", is_flag=True, help="Overwrite whatever is there, unchecked.")
@_server_options
def publish(
    opts: Options,
    url: str | None,
    text: str | None,
    file: IO[bytes] | None,
    pairs: tuple[str, ...],
    expected_version: int | None,
    force: bool,
) -> None:
    """Publish a new version of a document.

    The text comes from -body, -file or stdin. An empty body unarchives the document.
    """
    if force and expected_version is not None:
        raise click.UsageError("-force and -expected-version exclude each other")
    if not force and expected_version is None:
        raise click.UsageError(
            "publish needs -expected-version N (0 creates the document, N replaces version N) "
            "or -force to overwrite whatever is there"
        )
    target = _target(url)
    body, meta = _body(text, file), _meta(pairs)
    _emit(
        opts,
        _run(
            opts,
            target,
            lambda client: client.publish(
                target, body, expected_version=expected_version, meta=meta
            ),
        ),
    )


@main.command()
@_url_argument
@_body_options
@click.option(
    "-expected-version",
    "--expected-version",
    type=click.IntRange(min=1),
    help="Append to version N only (default: the current version, fetched first).",
)
@_server_options
def append(
    opts: Options,
    url: str | None,
    text: str | None,
    file: IO[bytes] | None,
    pairs: tuple[str, ...],
    expected_version: int | None,
) -> None:
    """Add text to the end of a document.

    Without -expected-version the current version is fetched first and appended to.
    """
    target = _target(url)
    body, meta = _body(text, file), _meta(pairs)
    if not body:
        raise click.UsageError("append needs a non-empty body")
    _emit(
        opts,
        _run(
            opts,
            target,
            lambda client: client.append(
                target, body, expected_version=expected_version, meta=meta
            ),
        ),
    )


@main.command()
@_url_argument
@_server_options
def archive(opts: Options, url: str | None) -> None:
    """Archive a document; its history stays.

    Publishing an empty body unarchives it.
    """
    target = _target(url)
    _emit(opts, _run(opts, target, lambda client: client.archive(target)))


@main.command()
@_url_argument
@_server_options
def edit(opts: Options, url: str | None) -> None:
    """Edit a document in $EDITOR and publish it.

    The new version is published over the version you fetched. If that fails (someone else
    published meanwhile, say), your text is kept in a temporary file whose name is printed.
    """
    target = _target(url)
    if target.anchor or not target.path.endswith(".md"):
        raise click.BadParameter(
            "edit takes a whole .md document, without #anchor", param_hint="URL"
        )
    current = _run(opts, target, lambda client: client.fetch(target))
    if current.status == "not-found":
        before, expected, meta = b"", 0, {}
    elif current.status == "ok" and current.version is not None:
        from markproto.protocol.metadata import RESERVED_KEYS

        before, expected = current.body, current.version
        meta = {k: v for k, v in current.meta.items() if k not in RESERVED_KEYS}
    elif current.ok:
        raise Failed(f"{target} is not a document (the server sent no version)")
    else:
        _emit(opts, current)
        return
    fd, name = tempfile.mkstemp(prefix=f"mark-edit-{Path(target.path).stem}-", suffix=".md")
    with os.fdopen(fd, "wb") as out:
        out.write(before)
    kept = f"your text is kept in {name}"
    try:
        command = shlex.split(os.environ.get("EDITOR", "")) or ["vi"]
    except ValueError as exc:
        os.unlink(name)
        raise Failed(f"EDITOR is not a command line ({exc})") from None
    if Path(command[0]).name in _WAITING_EDITORS:
        command.append("--wait")
    try:
        status = subprocess.call([*command, name])
    except OSError as exc:
        os.unlink(name)
        raise Failed(f"cannot run the editor {command[0]!r}: {exc.strerror or exc}") from None
    if status != 0:
        raise Failed(f"the editor exited with status {status}; {kept}")
    after = Path(name).read_bytes()
    if after == before:
        os.unlink(name)
        _note("no changes, nothing published")
        return
    if not after.strip():
        os.unlink(name)
        raise Failed("the document is empty, nothing published")
    try:
        result = _run(
            opts,
            target,
            lambda client: client.publish(target, after, expected_version=expected, meta=meta),
        )
    except Failed:
        _note(kept)
        raise
    if result.ok:
        os.unlink(name)
    _emit(opts, result, notes=[] if result.ok else [kept])


# --- agents -----------------------------------------------------------------------------------


@main.command()
@click.option(
    "-host",
    "--host",
    metavar="mark://HOST[:PORT]",
    help="Default server: tools take bare paths (else MARK_HOST).",
)
@click.option(
    "-token",
    "--token",
    metavar="TOKEN",
    help="Token for the -host server only (else MARK_AUTH or tokens.toml).",
)
@click.option("-insecure", "--insecure", is_flag=True, help="Skip certificate verification.")
@click.option(
    "-trust-new",
    "--trust-new",
    is_flag=True,
    help="Pin a certificate no CA vouches for on first contact (ssh's accept-new).",
)
@click.option(
    "-timeout",
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Dial and response timeout in seconds.",
)
def mcp(
    host: str | None, token: str | None, insecure: bool, trust_new: bool, timeout: float
) -> None:
    """Serve the MCP bridge for agents on stdin and stdout (see docs/MCP.md).

    One connection per server serves the whole session; stored tokens are reread on every
    call, so `mark token add` takes effect at once. Ends when stdin closes.
    """
    from markproto.protocol.errors import InvalidURL
    from markproto.protocol.url import parse_url

    text = host or os.environ.get("MARK_HOST") or None
    hint = "-host" if host else "MARK_HOST"
    try:
        target = parse_url(text) if text else None
    except InvalidURL as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None
    if target is not None and (target.path != "/" or target.anchor):
        raise click.BadParameter("give mark://host[:port] without a path", param_hint=hint)
    if target is None and (token or os.environ.get("MARK_AUTH")):
        _note("-token and MARK_AUTH go only to the -host server; without -host they are unused")
        token = None
    opts = Options(token, insecure, trust_new, timeout, as_json=False, verbose=False)
    client = _client(opts, target, cache=False)
    import asyncio

    from markproto.client.client import KEEPALIVE
    from markproto.client.mcp import serve

    client.pool.trust.confirm = None  # stdin carries the protocol: no one can answer a prompt
    client.pool.keepalive = KEEPALIVE  # one session outlives any server's idle timeout
    asyncio.run(serve(client, target))


# --- tokens -----------------------------------------------------------------------------------


@main.group()
def token() -> None:
    """Manage stored tokens.

    They live in MARK_HOME/tokens.toml (~/.mark by default), readable by you alone.
    """


@token.command(name="add")
@click.argument("url")
@click.argument("secret", metavar="[TOKEN]", required=False)
def token_add(url: str, secret: str | None) -> None:
    """Store TOKEN for URL's host (read from stdin, or asked for, when left out)."""
    target = _target(url)
    if secret is None:
        stdin = sys.stdin
        if stdin.isatty():
            secret = click.prompt("Token", hide_input=True, err=True)
        else:
            secret = stdin.readline()
        secret = secret.strip()
    from markproto.client.tokenstore import TokenStoreError

    store = _token_store()
    try:
        store.add(target.authority, secret)
    except TokenStoreError as exc:
        raise Failed(str(exc)) from None
    click.echo(f"mark: token stored for {target.authority} in {store.path}", err=True)


@token.command(name="remove")
@click.argument("url")
def token_remove(url: str) -> None:
    """Forget the token stored for URL's host."""
    target = _target(url)
    from markproto.client.tokenstore import TokenStoreError

    store = _token_store()
    try:
        removed = store.remove(target.authority)
    except TokenStoreError as exc:
        raise Failed(str(exc)) from None
    if not removed:
        raise Failed(f"no token stored for {target.authority}")
    click.echo(f"mark: token removed for {target.authority}", err=True)


@token.command(name="list")
@click.option("-json", "--json", "as_json", is_flag=True, help="Print one JSON object.")
def token_list(as_json: bool) -> None:
    """Print the hosts that have a stored token (never the tokens)."""
    authorities = sorted(_token_store().load())
    if as_json:
        _print_json({"tokens": authorities})
    elif authorities:
        click.echo("\n".join(authorities))
    else:
        click.echo("No stored tokens.", err=True)


# --- plumbing ---------------------------------------------------------------------------------


def _home() -> Path:
    return Path(os.environ.get("MARK_HOME") or "~/.mark").expanduser()


def _note(message: str) -> None:
    click.echo(f"mark: {message}", err=True)


def _token_store() -> TokenStore:
    from markproto.client.tokenstore import TokenStore

    return TokenStore(_home() / "tokens.toml", warn=_note)


def _target(text: str | None) -> MarkURL:
    """The URL argument, bare paths resolved against ``MARK_HOST``; bad ones are usage errors."""
    from markproto.protocol.errors import InvalidURL
    from markproto.protocol.url import parse_url

    host = os.environ.get("MARK_HOST") or None
    if text is None:
        if host is None:
            raise click.UsageError("no URL given (write mark://host[:port]/path or set MARK_HOST)")
        text = "/"
    try:
        return parse_url(text, default_host=host)
    except InvalidURL as exc:
        source = "MARK_HOST" if host and text.startswith("/") else "URL"
        raise click.BadParameter(str(exc), param_hint=source) from None


def _client(opts: Options, target: MarkURL | None, cache: bool) -> Client:
    from markproto.client.cache import Cache
    from markproto.client.client import Client
    from markproto.client.connection import Pool
    from markproto.client.tokenstore import Tokens, valid_token
    from markproto.client.trust import Trust

    explicit = opts.auth or os.environ.get("MARK_AUTH") or None
    if explicit is not None and not valid_token(explicit):
        raise click.BadParameter("a token is one word without spaces", param_hint="-auth/MARK_AUTH")
    overrides = {target.authority: explicit} if explicit and target is not None else {}
    home = _home()
    trust = Trust(
        insecure=opts.insecure,
        known_hosts=home / "known_hosts",
        trust_new=opts.trust_new,
        confirm=_confirm if sys.stdin.isatty() else None,
        note=_note,
    )
    pool = Pool(trust, dial_timeout=opts.timeout, request_timeout=opts.timeout)
    return Client(
        pool,
        tokens=Tokens(_token_store(), overrides),
        cache=Cache(home / "cache", warn=_note) if cache else None,
    )


def _confirm(authority: str, fingerprint: str) -> bool:
    return click.confirm(
        f"{authority} presents a certificate no CA vouches for:\n  {fingerprint}\n"
        "Pin it and connect?",
        err=True,
        default=False,
    )


def _run(
    opts: Options, target: MarkURL, job: Callable[[Client], Awaitable[R]], *, cache: bool = False
) -> R:
    """Run one job on a fresh client; every failure to get an answer becomes ``Failed``."""
    import asyncio

    from markproto.client.client import ClientError
    from markproto.client.connection import TransportError
    from markproto.protocol.errors import ProtocolError

    client = _client(opts, target, cache)

    async def session() -> R:
        async with client:
            return await job(client)

    try:
        return asyncio.run(session())
    except (TransportError, ClientError) as exc:
        raise Failed(str(exc)) from None
    except ProtocolError as exc:
        raise Failed(f"{target.authority}: unreadable response ({exc})") from None


def _body(text: str | None, file: IO[bytes] | None) -> bytes:
    from markproto.protocol.limits import MAX_BODY

    if text is not None and file is not None:
        raise click.UsageError("give the body with -body or with -file, not both")
    if text is not None:
        body = text.encode()
    elif file is not None:
        body = file.read()
    else:
        stdin = sys.stdin.buffer
        if stdin.isatty():
            raise click.UsageError("no body: give -body TEXT or -file F, or pipe it on stdin")
        body = stdin.read()
    if len(body) > MAX_BODY:
        raise click.UsageError(f"the body is {len(body)} bytes; the limit is {MAX_BODY}")
    return body


def _meta(pairs: tuple[str, ...]) -> dict[str, str]:
    """``-meta key=value`` options as publisher metadata, checked by the protocol's own rules."""
    from markproto.protocol.errors import InvalidMetadata
    from markproto.protocol.metadata import CONTROL_KEYS, validate

    meta: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="-meta")
        if key in meta:
            raise click.BadParameter(f"{key!r} is given twice", param_hint="-meta")
        if key in CONTROL_KEYS:
            raise click.BadParameter(f"{key!r} has its own option", param_hint="-meta")
        meta[key] = value
    try:
        validate(meta)
    except InvalidMetadata as exc:
        raise click.BadParameter(str(exc), param_hint="-meta") from None
    return meta


def _status_line(result: Result) -> None:
    """``[status] key=value ...`` with keys sorted, as the reference prints it."""
    pairs = "".join(f" {key}={result.meta[key]}" for key in sorted(result.meta))
    click.echo(f"[{result.status}]{pairs}{' (cached)' if result.from_cache else ''}", err=True)


def _json(result: Result, body: bytes) -> dict[str, Any]:
    return {
        "status": result.status,
        "metadata": result.meta,
        "body": body.decode("utf-8", "replace"),
    }


def _print_json(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def _emit(
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
        _status_line(result)
    if opts.as_json:
        click.echo(
            json.dumps({**_json(result, body), **(extra or {})}, indent=2, ensure_ascii=False)
        )
    else:
        out = sys.stdout.buffer
        out.write(body)
        out.flush()
    for note in notes or []:
        _note(note)
    if not result.ok:
        raise Failed(result.status)


if __name__ == "__main__":
    main()
