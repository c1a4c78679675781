"""``mark-server``: the server's command line."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="markproto", prog_name="mark-server")
def main() -> None:
    """Serve versioned markdown over QUIC (the Mark Protocol)."""
