"""How a ``mark`` command ends: every way out becomes one ``mark: ...`` line on stderr and its
documented exit status, never a traceback, and under ``-json`` one JSON object on stdout too.

0   success (and ``--help``, ``--version``)
1   the server refused, or no usable answer came back (``Failed``)
2   a command line that cannot be run: click's parse errors and our own usage errors, each with
    what to do (a close option name for a typo, ``--help`` for the rest)
130 Ctrl-C, wherever it comes: during a request, at a prompt, in the editor
141 stdout closed early (``mark fetch ... | head``): nothing more is said
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from markproto.client.cli.output import Failed, failure, note, print_json

USAGE = 2
INTERRUPTED = 130
BROKEN_PIPE = 141
_JSON_FLAGS = frozenset({"-json", "--json"})
_CLICK_OWN = (
    click.NoSuchOption,
    click.BadOptionUsage,
    click.BadArgumentUsage,
    click.MissingParameter,
)
"""Parse errors click raises on its own, whose message says what is wrong but not what to do."""


def run(
    group: click.Group,
    args: Sequence[str] | None,
    prog_name: str,
    complete_var: str | None,
    **extra: Any,
) -> NoReturn:
    """Run the ``mark`` group on ``args`` (else ``sys.argv``) and exit with its status."""
    argv = list(sys.argv[1:] if args is None else args)
    as_json = wants_json(argv)
    try:
        code = click.Group.main(
            group, argv, prog_name, complete_var, standalone_mode=False, **extra
        )
        sys.exit(code if isinstance(code, int) else 0)
    except Failed as exc:
        end(exc.format_message(), exc.exit_code, exc.kind, as_json and not exc.shown, exc.extra)
    except click.UsageError as exc:
        end(usage_line(exc, argv), USAGE, "usage", as_json)
    except click.ClickException as exc:
        end(exc.format_message(), exc.exit_code, "error", as_json)
    except click.Abort as exc:
        if isinstance(exc.__cause__ or exc.__context__, EOFError):
            end("no answer: the input ended", 1, "aborted", as_json)
        interrupted(as_json)
    except KeyboardInterrupt:
        interrupted(as_json)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        # Nobody reads stdout any more: say nothing, and keep the exit flush from failing too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(BROKEN_PIPE)


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for JSON (read before parsing, so that a command line
    click refuses still answers in JSON)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    return any(word in _JSON_FLAGS for word in words)


def end(
    message: str,
    code: int,
    kind: str,
    as_json: bool,
    extra: dict[str, Any] | None = None,
) -> NoReturn:
    if as_json:
        print_json(failure(kind, message, code, **(extra or {})))
    note(message)
    sys.exit(code)


def interrupted(as_json: bool) -> NoReturn:
    click.echo(err=True)  # ends the terminal's ^C echo
    end("interrupted", INTERRUPTED, "interrupted", as_json)


def usage_line(exc: click.UsageError, argv: Sequence[str] = ()) -> str:
    """One line: click's message, then what to do about it."""
    message = " ".join(exc.format_message().split())
    where = exc.ctx.command_path if exc.ctx is not None else "mark"
    if isinstance(exc, click.NoSuchOption) and exc.ctx is not None:
        typed = _typed(exc.option_name, argv, exc.ctx)
        close = similar_options(typed, exc.ctx)
        message = f"no such option {typed}"
        if close:
            return f"{message}; did you mean {' or '.join(close)}? (see '{where} --help')"
        return f"{message} (see '{where} --help')"
    unknown = re.fullmatch(r"No such command '(.*)'\.", message)
    if unknown and isinstance(exc.ctx and exc.ctx.command, click.Group):
        import difflib

        assert exc.ctx is not None
        group = exc.ctx.command
        assert isinstance(group, click.Group)
        close = difflib.get_close_matches(unknown[1], group.list_commands(exc.ctx), n=2)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        return f"no such command {unknown[1]!r}{hint} (see '{where} --help')"
    if isinstance(exc, _CLICK_OWN) or "extra argument" in message:
        return f"{message} (see '{where} --help')"
    return message


def _typed(name: str, argv: Sequence[str], ctx: click.Context) -> str:
    """The word the user typed: click names only the first letter of ``-jsno`` (read as the
    short options ``-j -s -n -o``)."""
    known = {opt for param in ctx.command.get_params(ctx) for opt in param.opts}
    for word in argv:
        option = word.partition("=")[0]
        if option.startswith(name) and option not in known:
            return option
    return name


def similar_options(typed: str, ctx: click.Context) -> list[str]:
    """The options ``typed`` may have meant: those it abbreviates, else those it nearly spells.
    Shown with one dash, this CLI's own spelling."""
    names: dict[str, str] = {}
    for param in ctx.command.get_params(ctx):
        if isinstance(param, click.Option):
            for opt in (*param.opts, *param.secondary_opts):
                names.setdefault(opt.lstrip("-"), param.opts[0])
    import difflib

    word = typed.lstrip("-").partition("=")[0]
    if not word:
        return []
    spelled = [names[name] for name in sorted(names) if name.startswith(word)]
    if not spelled:
        spelled = [names[name] for name in difflib.get_close_matches(word, list(names), n=3)]
    return list(dict.fromkeys(spelled))
