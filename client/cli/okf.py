"""``mark okf validate | import | export``: the reference's names for the folder commands, with
the Open Knowledge Format's conventions (``markproto.tree.okf``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from markproto.client.cli.options import Options, server_options
from markproto.client.cli.output import Failed, print_json
from markproto.client.cli.transfer import FOLDER, export_from, import_arguments, import_into

if TYPE_CHECKING:
    from markproto.tree.plan import Report


@click.group()
def okf() -> None:
    """Open Knowledge Format bundles: validate, import, export."""


@okf.command()
@click.argument("folder", type=FOLDER)
@click.option("-strict", "--strict", is_flag=True, help="Fail on warnings too.")
@click.option("-quiet", "--quiet", is_flag=True, help="Print errors only, not warnings.")
@click.option("-json", "--json", "as_json", is_flag=True, help="Print one JSON object.")
def validate(folder: Path, strict: bool, quiet: bool, as_json: bool) -> None:
    """Check a folder against OKF v0.1.

    Concept documents need frontmatter with a non-empty type (a timestamp in RFC 3339);
    index.md, a folder's summary, has no frontmatter (the root one may say okf_version); log.md's
    dated headings are YYYY-MM-DD; markdown an import would skip is reported. Exit status 1 on
    errors, or on warnings with --strict.
    """
    from markproto.tree import okf as rules

    result = rules.validate(rules.Bundle.read(folder))
    if as_json:
        print_json({"folder": str(folder), **result.as_json()})
    else:
        for finding in result.findings:
            if not (quiet and finding.severity == rules.WARNING):
                click.echo(finding.line())
        click.echo(result.summary())
    if result.errors or (strict and result.warnings):
        raise Failed("the folder is not a conforming OKF bundle", shown=as_json)


@okf.command("import")
@import_arguments
def import_(opts: Options, folder: Path, url: str, archive_missing: bool, dry_run: bool) -> None:
    """Import an OKF bundle: mark import, with the bundle's findings as notes.

    Bodies are imported byte for byte (frontmatter included, so an export gives the bundle
    back); the frontmatter is the metadata, and a concept document without a type is typed
    Document by the server. index.md and log.md get no type.
    """
    from markproto.tree import okf as rules

    findings = rules.validate(rules.Bundle.read(folder), (rules.concepts, rules.reserved))

    def add(report: Report) -> None:
        report.notes += [(f.rel, f"{f.severity}: {f.message}") for f in findings.findings]

    import_into(
        opts, folder, url, archive_missing=archive_missing, dry_run=dry_run, report_extra=add
    )


@okf.command()
@click.argument("url")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@server_options
def export(opts: Options, url: str, folder: Path) -> None:
    """Export a prefix as an OKF bundle: mark export, plus frontmatter where a concept document
    has none (type, title, description, resource, tags, timestamp from its metadata, then the
    rest), so the bundle validates."""
    from markproto.tree.okf import with_frontmatter

    export_from(opts, url, folder, versions=False, render=with_frontmatter)
