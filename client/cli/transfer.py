"""The folder commands: ``mark import`` and ``mark export`` (``markproto.client.transfer``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from markproto.client.cli.options import Options, resolve, server_options
from markproto.client.cli.output import Failed, print_json
from markproto.client.cli.session import run

if TYPE_CHECKING:
    from markproto.client.transfer import Render
    from markproto.tree.plan import Report

FOLDER = click.Path(exists=True, file_okay=False, path_type=Path)
ARCHIVE_MISSING = click.option(
    "-archive-missing",
    "--archive-missing",
    is_flag=True,
    help="Archive documents under the prefix whose file is gone.",
)
DRY_RUN = click.option(
    "-dry-run", "--dry-run", is_flag=True, help="Say what would be written; write nothing."
)


def import_arguments(command: Callable[..., None]) -> Callable[..., None]:
    """``DIR URL [-archive-missing] [-dry-run]`` and the server options (both import commands)."""
    for decorator in reversed(
        (
            click.argument("folder", type=FOLDER),
            click.argument("url"),
            ARCHIVE_MISSING,
            DRY_RUN,
            server_options,
        )
    ):
        command = decorator(command)
    return command


def progress_bar(opts: Options, label: str) -> Callable[[int, int], None] | None:
    """A one-line bar on stderr when it is a terminal (and no JSON was asked for)."""
    if opts.as_json or not sys.stderr.isatty():
        return None

    def draw(done: int, total: int) -> None:
        filled = 30 * done // max(total, 1)
        bar = "#" * filled + "." * (30 - filled)
        click.echo(f"\r{label} [{bar}] {done}/{total}", err=True, nl=done == total)

    return draw


def import_into(
    opts: Options,
    folder: Path,
    url: str,
    *,
    archive_missing: bool,
    dry_run: bool,
    report_extra: Callable[[Report], None] | None = None,
) -> None:
    """Run an import and print its report (shared by ``mark import`` and ``mark okf import``)."""
    from markproto.client.transfer import import_folder
    from markproto.tree.source import prefix_of

    target = resolve(url)
    try:
        prefix_of(target.path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="URL") from None
    report = run(
        opts,
        target,
        lambda client: import_folder(
            client,
            folder,
            target,
            archive_missing=archive_missing,
            dry_run=dry_run,
            progress=progress_bar(opts, "importing"),
        ),
    )
    if report_extra is not None:
        report_extra(report)
    if opts.as_json:
        print_json({"url": str(target), **report.as_json()})
    else:
        click.echo("\n".join(report.lines()))
    if report.refused:
        raise Failed(f"{_documents(len(report.refused))} refused", shown=opts.as_json)


@click.command("import")
@import_arguments
def import_(opts: Options, folder: Path, url: str, archive_missing: bool, dry_run: bool) -> None:
    """Import a folder of markdown under a prefix: mark import DIR mark://host/prefix/

    Each .md file becomes a document: its bytes the body, its frontmatter the metadata. A file
    the server already holds unchanged sends no write; a changed one replaces the version
    fetched, never a newer one. Other files are skipped, each with its reason.
    """
    import_into(opts, folder, url, archive_missing=archive_missing, dry_run=dry_run)


def export_from(
    opts: Options, url: str, folder: Path, *, versions: bool, render: Render | None = None
) -> None:
    """Run an export and print its report (shared by ``mark export`` and ``mark okf export``)."""
    from markproto.client.transfer import export_folder

    target = resolve(url)
    report = run(
        opts,
        target,
        lambda client: export_folder(
            client,
            target,
            folder,
            versions=versions,
            progress=progress_bar(opts, "exporting"),
            render=render,
        ),
    )
    if opts.as_json:
        print_json({"url": str(target), "folder": str(folder), **report.as_json()})
    else:
        click.echo("\n".join(report.lines()))
    if report.skipped:
        raise Failed(f"{_documents(len(report.skipped))} not exported", shown=opts.as_json)


@click.command()
@click.argument("url")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("-versions", "--versions", is_flag=True, help="Every version too, as name.vN.md.")
@server_options
def export(opts: Options, url: str, folder: Path, versions: bool) -> None:
    """Write the documents under a prefix into a folder: mark export mark://host/prefix/ DIR

    Each current version's body is written byte for byte (the inverse of import), with the
    version's modified time.
    """
    export_from(opts, url, folder, versions=versions)


def _documents(count: int) -> str:
    return f"{count} document" + "s" * (count != 1)


COMMANDS = (import_, export)
