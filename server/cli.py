"""``mark-server``: the server's command line.

Every failure ends in one ``mark-server: ...`` line on stderr, never a traceback: exit status 1
when the server cannot start (a setting, the address, the TLS pair) or a token edit fails, 2 for
a command line that cannot be run, 130 after Ctrl-C; ``serve`` exits 0 after SIGTERM.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import click

from markproto.protocol import times
from markproto.server import logsetup, memory
from markproto.server import tokens as tokenfile
from markproto.server.config import (
    ConfigError,
    check_paths,
    load_config,
    parse_duration,
    serve_options,
)
from markproto.server.logsetup import sanitize


class MarkServer(click.Group):
    """The ``mark-server`` group, with every ending rendered as one line and its exit status."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> NoReturn:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(
                argv, prog_name or "mark-server", complete_var, standalone_mode=False, **extra
            )
            sys.exit(code if isinstance(code, int) else 0)
        except click.UsageError as exc:
            message = " ".join(exc.format_message().split())
            where = exc.ctx.command_path if exc.ctx is not None else "mark-server"
            _fail(f"{message} (see '{where} --help')", 2)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo(err=True)
            _fail("interrupted", 130)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"mark-server: {message}", err=True)
    sys.exit(code)


@click.group(cls=MarkServer, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="markproto", prog_name="mark-server")
def main() -> None:
    """Serve versioned markdown over QUIC (the Mark Protocol)."""


@main.command()
@serve_options
def serve(config: Path | None, **flags: object) -> None:
    """Serve a content root over QUIC (with no flags: a default root in your data directory)."""
    memory.exec_tuned()
    try:
        settings = load_config(flags, os.environ, config)
        check_paths(settings)
        logsetup.configure(settings.log_format, settings.log_level)
    except (ConfigError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    # Imported here, not at the top: the body index's worker processes re-import this module
    # (multiprocessing's spawn), and they need none of the server's transport or TLS stack;
    # nor does the run ``exec_tuned`` replaces.
    import asyncio

    from markproto.server import app

    try:
        code = asyncio.run(app.run(settings))
    except (app.StartError, tokenfile.TokensError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(code)


@main.command("import")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Content root to import into. [env: MARK_ROOT; default: the server's]",
)
@click.option("--prefix", default="/", show_default=True, help="Folder the documents go under.")
@click.option(
    "--archive-missing", is_flag=True, help="Archive documents under the prefix whose file is gone."
)
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def import_(
    folder: Path,
    root: Path | None,
    prefix: str,
    archive_missing: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Import a folder of markdown into a content root, offline.

    Each .md file becomes a document (its bytes the body, its frontmatter the metadata); an
    unchanged file writes nothing, a changed one a new version. Safe while a server runs on the
    same root: it picks the documents up at its next change scan. Exit status 1 if any document
    was refused.
    """
    import json

    from markproto.server import importer
    from markproto.tree.source import prefix_of

    try:
        under = prefix_of(prefix)
        target = root if root is not None else load_config({}, os.environ, None).root
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--prefix") from None
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        target.mkdir(parents=True, exist_ok=True)
        report = importer.run(
            target, folder, under, archive_missing=archive_missing, dry_run=dry_run
        )
    except OSError as exc:
        raise click.ClickException(f"{exc.filename or target}: {exc.strerror or exc}") from None
    if as_json:
        click.echo(json.dumps({"root": str(target), **report.as_json()}, ensure_ascii=False))
    else:
        click.echo("\n".join(sanitize(line) for line in report.lines()))
    if report.refused:
        sys.exit(1)


# ---------------------------------------------------------------------------------------------
# mark-server token generate | list | revoke: edits of the tokens file (server/tokens.py)


def _tokens_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--tokens",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Tokens file. [env: MARK_TOKENS; default: the server's, <state dir>/tokens.toml]",
    )(command)


def _tokens_file(flag: Path | None) -> Path:
    """The file ``serve`` would use, resolved from the same sources (flag, env, config file)."""
    try:
        resolved = load_config({"tokens": flag}, os.environ, None).tokens
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    assert resolved is not None  # load_config always resolves the tokens file
    return resolved


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _expiry(text: str | None) -> datetime | None:
    """An RFC 3339 time (read as the tokens file will be), or a duration from now such as
    ``90d``, ``12h`` or ``2w``."""
    if text is None:
        return None
    now = datetime.now(UTC)
    moment = times.parse_time(text.strip())
    if moment is None:
        if times.parse_time(text.strip() + "Z") is not None:
            raise click.BadParameter(
                f"{text!r}: add a time zone (such as Z)", param_hint="--expires"
            )
        try:
            moment = now + timedelta(seconds=parse_duration(text))
        except ValueError:
            raise click.BadParameter(
                f"{text!r}: give an RFC 3339 time (2026-12-31T23:59:59Z) or a duration (90d, 12h)",
                param_hint="--expires",
            ) from None
    if moment <= now:
        raise click.BadParameter(f"{text!r} is in the past", param_hint="--expires")
    return moment


@main.group()
def token() -> None:
    """Manage the server's auth tokens (a running server reloads the file by itself)."""


@token.command()
@click.option("--label", required=True, help="Name of the token (letters, digits, - and _).")
@click.option("--paths", default="/**", show_default=True, help="Comma-separated path patterns.")
@click.option("--ops", default="publish", show_default=True, help="Comma-separated: read, publish.")
@click.option("--expires", default=None, help="RFC 3339 time, or a duration from now (90d, 12h).")
@_tokens_option
def generate(label: str, paths: str, ops: str, expires: str | None, tokens: Path | None) -> None:
    """Add a token; the raw token is printed once, alone on stdout."""
    path = _tokens_file(tokens)
    try:
        raw = tokenfile.generate(path, label, _split(paths), _split(ops), _expiry(expires))
    except (tokenfile.TokensError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f'Token "{label}" appended to {path}', err=True)
    click.echo("Raw token (give to client, shown once):", err=True)
    click.echo(raw)


@token.command("list")
@_tokens_option
def list_tokens(tokens: Path | None) -> None:
    """Show each token's label, paths, operations and expiry (never hashes)."""
    path = _tokens_file(tokens)
    try:
        grants = tokenfile.entries(path)
    except (tokenfile.TokensError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if not grants:
        click.echo("No tokens found.")
    now = datetime.now(UTC)
    for grant in grants:
        label, paths = sanitize(grant.label), sanitize(",".join(grant.paths))
        line = f"{label:<20}  paths: {paths:<20}  ops: {','.join(sorted(grant.operations))}"
        if grant.expires is not None:
            stamp = times.format_time(grant.expires)
            line += f"  expires: {stamp}" + (" (expired)" if now > grant.expires else "")
        click.echo(line)


@token.command()
@click.option("--label", required=True, help="Name of the token to remove.")
@click.option("--if-present", is_flag=True, help="Succeed when the token or file is absent.")
@_tokens_option
def revoke(label: str, if_present: bool, tokens: Path | None) -> None:
    """Remove a token; clients holding it are refused once the server reloads."""
    path = _tokens_file(tokens)
    try:
        removed = tokenfile.revoke(path, label, if_present=if_present)
    except (tokenfile.TokensError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    note = f'Token "{label}" revoked from {path}' if removed else f'No token "{label}" in {path}'
    click.echo(note, err=True)


if __name__ == "__main__":  # python -m markproto.server.cli
    main()
