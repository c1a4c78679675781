"""The writing commands: publish, append, archive and edit."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING

import click

from markproto.client.cli.options import (
    YES,
    Options,
    body_options,
    confirm_pruning,
    read_body,
    read_meta,
    resolve,
    server_options,
    url_argument,
)
from markproto.client.cli.output import Failed, emit, note, print_json
from markproto.client.cli.session import run

UNCHANGED = "no changes, nothing published"
if TYPE_CHECKING:
    from markproto.client import Client, Result
    from markproto.protocol.url import MarkURL

_WAITING_EDITORS = frozenset({"code", "zed", "subl", "atom"})
"""GUI editors that return at once unless told to wait for the file to be closed."""


@click.command()
@url_argument
@body_options
@click.option(
    "-expected-version",
    "--expected-version",
    type=click.IntRange(min=0),
    help="Replace version N only; 0 creates a new document only.",
)
@click.option("-force", "--force", is_flag=True, help="Overwrite whatever is there, unchecked.")
@YES
@click.option(
    "-on-conflict",
    "--on-conflict",
    type=click.Choice(["fail", "merge"]),
    default="fail",
    show_default=True,
    help="merge: merge with the newer version three ways (base: -expected-version).",
)
@server_options
def publish(
    opts: Options,
    url: str | None,
    text: str | None,
    file: IO[bytes] | None,
    pairs: tuple[str, ...],
    expected_version: int | None,
    force: bool,
    yes: bool,
    on_conflict: str,
) -> None:
    """Publish a new version of a document.

    The text comes from -body, -file or stdin. An empty body unarchives the document. With
    -on-conflict merge, a conflict is merged with the current version: a clean merge is
    published, an overlap is printed with <<<<<<< markers to resolve (exit 1).
    """
    if on_conflict == "merge":
        if expected_version is None:
            raise click.UsageError(
                "-on-conflict merge needs -expected-version N (the version you started from)"
            )
        target = resolve(url)
        body, meta = read_body(text, file), read_meta(pairs)
        confirm_pruning(target, meta, yes)
        merge_published(opts, target, body, expected_version, meta)
        return
    if force and expected_version is not None:
        raise click.UsageError("-force and -expected-version exclude each other")
    if not force and expected_version is None:
        raise click.UsageError(
            "publish needs -expected-version N (0 creates the document, N replaces version N) "
            "or -force to overwrite whatever is there"
        )
    target = resolve(url)
    body, meta = read_body(text, file), read_meta(pairs)
    confirm_pruning(target, meta, yes)
    emit(
        opts,
        run(
            opts,
            target,
            lambda client: client.publish(
                target, body, expected_version=expected_version, meta=meta
            ),
        ),
    )


def merge_published(
    opts: Options, target: MarkURL, body: bytes, expected: int, meta: dict[str, str]
) -> None:
    """``publish -on-conflict merge``: ``client.publishing`` does the merge; this prints it."""
    from markproto.client import publishing

    outcome: list[publishing.Published] = []

    async def job(client: Client) -> Result:
        done = await publishing.publish(
            client, target, body, expected_version=expected, meta=meta, on_conflict="merge"
        )
        outcome.append(done)
        return done.result

    run(opts, target, job)
    done = outcome[0]
    merge = done.merge
    if merge is None:
        emit(opts, done.result)
        return
    between = f"your edit of v{merge.base_version} and v{merge.server_version}"
    report = {"merge": {"conflicts": merge.conflicts, "clashes": list(merge.clashes)}}
    if merge.published:
        emit(opts, done.result, notes=[f"merged {between}: clean, published"], extra=report)
        return
    clashes = f"; metadata both sides changed: {', '.join(merge.clashes)}" if merge.clashes else ""
    emit(
        opts,
        done.result,
        merge.text.encode(),
        notes=[
            f"{merge.conflicts} overlapping region(s) between {between}{clashes}; the merged "
            "text is on stdout: resolve the <<<<<<< markers and publish it with "
            f"-expected-version {merge.server_version}"
        ],
        extra=report,
    )


@click.command()
@url_argument
@body_options
@click.option(
    "-expected-version",
    "--expected-version",
    type=click.IntRange(min=1),
    help="Append to version N only (default: the current version, fetched first).",
)
@YES
@server_options
def append(
    opts: Options,
    url: str | None,
    text: str | None,
    file: IO[bytes] | None,
    pairs: tuple[str, ...],
    expected_version: int | None,
    yes: bool,
) -> None:
    """Add text to the end of a document.

    Without -expected-version the current version is fetched first and appended to.
    """
    target = resolve(url)
    body, meta = read_body(text, file), read_meta(pairs)
    if not body:
        raise click.UsageError("append needs a non-empty body")
    confirm_pruning(target, meta, yes)
    emit(
        opts,
        run(
            opts,
            target,
            lambda client: client.append(
                target, body, expected_version=expected_version, meta=meta
            ),
        ),
    )


@click.command()
@url_argument
@server_options
def archive(opts: Options, url: str | None) -> None:
    """Archive a document; its history stays.

    Publishing an empty body unarchives it.
    """
    target = resolve(url)
    emit(opts, run(opts, target, lambda client: client.archive(target)))


@click.command()
@url_argument
@YES
@server_options
def edit(opts: Options, url: str | None, yes: bool) -> None:
    """Edit a document in $EDITOR and publish it.

    The new version is published over the version you fetched. If that fails (someone else
    published meanwhile, say), your text is kept in a temporary file whose name is printed.
    """

    target = resolve(url)
    if target.anchor or not target.path.endswith(".md"):
        raise click.BadParameter(
            "edit takes a whole .md document, without #anchor", param_hint="URL"
        )
    current = run(opts, target, lambda client: client.fetch(target))
    if current.status == "not-found":
        before, expected, meta = b"", 0, {}
    elif current.status == "ok" and current.version is not None:
        from markproto.protocol.metadata import RESERVED_KEYS

        before, expected = current.body, current.version
        meta = {k: v for k, v in current.meta.items() if k not in RESERVED_KEYS}
    elif current.ok:
        raise Failed(f"{target} is not a document (the server sent no version)")
    else:
        emit(opts, current)
        return
    confirm_pruning(target, meta, yes)
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
        if opts.as_json:
            print_json({"status": "unchanged", "message": UNCHANGED, "exit_code": 0})
        note(UNCHANGED)
        return
    if not after.strip():
        os.unlink(name)
        raise Failed("the document is empty, nothing published")
    try:
        result = run(
            opts,
            target,
            lambda client: client.publish(target, after, expected_version=expected, meta=meta),
        )
    except Failed:
        note(kept)
        raise
    if result.ok:
        os.unlink(name)
    emit(opts, result, notes=[] if result.ok else [kept])


COMMANDS = (publish, append, archive, edit)
