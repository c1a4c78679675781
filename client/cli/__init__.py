"""``mark``: the client's command line, a thin face over ``markproto.client.Client``.

Conventions: long options work with one dash or two (``-match body``, ``--match body``) and may
come before or after the URL; the URL may be a bare path, or left out, when ``MARK_HOST`` names a
server. The body goes to stdout; ``-v`` adds the status line on stderr; ``-json`` prints one JSON
object instead. Exit status: 0 for ok, created and not-modified; 1 for any other status or a
failure to get an answer; 2 for a command line that cannot be run.

One module per job: ``options`` reads the command line, ``output`` prints, ``session`` reaches
the server (``Client.from_environment``), and ``reading``, ``writing``, ``watching``, ``agents``
and ``tokens`` hold the commands. The network stack and the markdown parser are imported inside
the commands that use them, so ``mark --help`` and typos answer at once. Client state lives in
``MARK_HOME`` (``~/.mark``): ``tokens.toml``, ``known_hosts`` and ``cache/``.
"""

from __future__ import annotations

import click

from markproto.client.cli import agents, reading, tokens, watching, writing


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="markproto", prog_name="mark")
def main() -> None:
    """Read and write versioned markdown on Mark Protocol servers.

    URLs look like mark://host[:port]/path (port 6309 by default). With MARK_HOST set
    (e.g. mark://localhost) a bare /path will do, and no URL at all means /.
    """


for _command in (
    *reading.COMMANDS,
    *writing.COMMANDS,
    *watching.COMMANDS,
    agents.mcp,
    tokens.token,
):
    main.add_command(_command)
