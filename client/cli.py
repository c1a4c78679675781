"""``mark``: the client's command line."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="markproto", prog_name="mark")
def main() -> None:
    """Read and write versioned markdown on Mark Protocol servers."""
