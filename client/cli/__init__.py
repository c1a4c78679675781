"""``mark``: the client's command line, a thin face over ``markproto.client.Client``.

Conventions: long options work with one dash or two (``-match body``, ``--match body``) and may
come before or after the URL; the URL may be a bare path, or left out, when ``MARK_HOST`` names a
server. The body goes to stdout; ``-v`` adds the status line on stderr; ``-json`` prints one JSON
object instead, failures included. Every failure ends in one ``mark: ...`` line on stderr. Exit
status: 0 for ok, created and not-modified; 1 for any other status or a failure to get an answer;
2 for a command line that cannot be run; 130 after Ctrl-C.

One module per job: ``options`` reads the command line, ``output`` prints, ``session`` reaches the
server (``Client.from_environment``), ``failures`` turns every way a command can end into its line
and exit status, and ``reading``, ``graphs``, ``checking``, ``writing``, ``transfer`` (import,
export), ``okf``, ``watching``, ``agents`` and ``tokens`` hold the commands. A command's module is
imported only when that command runs, and the network stack and the markdown parser only inside the
commands that use them, so ``mark --help`` and typos answer at once. Client state lives in
``MARK_HOME``, else ``~/.mark`` where it exists, else the XDG directories (see
``markproto.client.environment``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import click

_COMMANDS = {
    "fetch": "reading:fetch",
    "list": "reading:list_",
    "versions": "reading:versions",
    "lookup": "reading:lookup",
    "links": "graphs:links",
    "backlinks": "graphs:backlinks",
    "graph": "graphs:graph",
    "check": "checking:check",
    "info": "reading:info",
    "ping": "reading:ping",
    "publish": "writing:publish",
    "append": "writing:append",
    "archive": "writing:archive",
    "edit": "writing:edit",
    "import": "transfer:import_",
    "export": "transfer:export",
    "okf": "okf:okf",
    "watch": "watching:watch",
    "mcp": "agents:mcp",
    "token": "tokens:token",
}
"""Each command and where it lives, imported on first use."""


class Mark(click.Group):
    """The ``mark`` group: commands loaded on demand, and every ending rendered by ``failures``
    (one line, the documented exit status, JSON under ``-json``) instead of click's own."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        home = _COMMANDS.get(cmd_name)
        if home is None:
            return None
        module, _, name = home.partition(":")
        command: click.Command = getattr(
            importlib.import_module(f"markproto.client.cli.{module}"), name
        )
        return command

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        from markproto.client.cli import failures

        return failures.run(self, args, "mark", complete_var, **extra)


@click.group(cls=Mark, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="markproto", prog_name="mark")
def main() -> None:
    """Read and write versioned markdown on Mark Protocol servers.

    URLs look like mark://host[:port]/path (port 6309 by default). With MARK_HOST set
    (e.g. mark://localhost) a bare /path will do, and no URL at all means /.
    """
