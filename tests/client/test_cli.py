"""The ``mark`` command line without a server: option spelling, usage errors (exit 2), URL
resolution, the token commands. Commands that must reach a server are pointed at a closed
loopback port, where they fail fast with exit 1: proof that the command line itself parsed."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from markproto.client import Client
from markproto.client.cli import main

CLOSED = "mark://127.0.0.1:1"
"""Nothing listens on UDP port 1: a request fails at once with 'connection refused'."""


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Retries of the refused requests below would only add their delays.
    monkeypatch.setitem(Client.__init__.__kwdefaults__, "retry_delay", 0.0)
    home = tmp_path / "home"
    monkeypatch.setenv("MARK_HOME", str(home))
    monkeypatch.delenv("MARK_HOST", raising=False)
    monkeypatch.delenv("MARK_AUTH", raising=False)
    return home


def mark(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def test_help_and_version() -> None:
    for flag in ("--help", "-h"):
        result = mark(flag)
        assert result.exit_code == 0
        for command in ("fetch", "list", "versions", "publish", "append", "archive", "lookup"):
            assert command in result.stdout
        for command in ("info", "ping", "token", "edit"):
            assert command in result.stdout
    version = mark("--version")
    assert (version.exit_code, version.stdout) == (
        0,
        f"mark, version {metadata.version('markproto')}\n",
    )


@pytest.mark.parametrize(
    "command",
    ["fetch", "list", "versions", "publish", "append", "archive", "lookup", "info", "ping", "edit"],
)
def test_every_server_command_takes_the_common_options(command: str) -> None:
    result = mark(command, "--help")
    assert result.exit_code == 0
    for option in ("-auth, --auth", "-insecure, --insecure", "-trust-new, --trust-new"):
        assert option in result.stdout
    for option in ("-json, --json", "-v, --verbose", "-timeout, --timeout"):
        assert option in result.stdout


def test_help_does_not_load_the_network_stack() -> None:
    code = (
        "import sys\nfrom markproto.client.cli import main\n"
        "try:\n    main(['fetch', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('aioquic', 'mistletoe', 'mcp'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    "args",
    [
        ["fetch", "-v", CLOSED + "/a.md"],
        ["fetch", CLOSED + "/a.md", "-v"],
        ["fetch", "--verbose", CLOSED + "/a.md", "-no-cache"],
        ["list", "-page-size", "5", CLOSED + "/", "--cursor", "AQ", "-include-archived"],
        ["list", CLOSED + "/", "--page-size=5"],
        ["lookup", CLOSED + "/", "-query", "x y", "-match", "body", "--limit", "3"],
        ["lookup", "--query=ab", "--match=catalog", "-filter", "tag=a", CLOSED + "/"],
        ["publish", "-v", "-body", "x", "-expected-version", "0", CLOSED + "/a.md"],
        ["publish", CLOSED + "/a.md", "--body", "x", "--force", "-meta", "tags=a,b"],
        ["append", CLOSED + "/a.md", "-body", "x", "--expected-version", "3", "-json"],
        ["archive", "-auth", "t0k", CLOSED + "/a.md", "-timeout", "5"],
        ["versions", CLOSED + "/a.md", "-insecure", "-trust-new"],
        ["info", CLOSED],
        ["ping", CLOSED],
    ],
)
def test_options_take_one_or_two_dashes_before_or_after_the_url(args: list[str]) -> None:
    result = mark(*args)
    assert result.exit_code == 1, result.output
    assert result.stderr.endswith("mark: 127.0.0.1:1: unreachable (connection refused)\n")
    if "-json" in args:
        assert json.loads(result.stdout) == {
            "status": "error",
            "error": "unreachable",
            "message": "127.0.0.1:1: unreachable (connection refused)",
            "exit_code": 1,
        }
    else:
        assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["publish", "-body", "x", CLOSED + "/a.md"], "publish needs -expected-version N"),
        (
            ["publish", "-body", "x", "-force", "-expected-version", "1", CLOSED + "/a.md"],
            "exclude",
        ),
        (["publish", "-body", "x", "-expected-version", "-1", CLOSED + "/a.md"], "-1"),
        (["append", "-body", "x", "-expected-version", "0", CLOSED + "/a.md"], "0"),
        (["append", "-body", "", CLOSED + "/a.md"], "append needs a non-empty body"),
        (["fetch", "http://example.com/a.md"], "only mark:// URLs are supported"),
        (["fetch", "mark://user:pw@example.com/"], "carry no user name or password"),
        (["fetch", "mark://example.com:99999/"], "port"),
        (["fetch", "/a.md"], "names no server"),
        (["fetch"], "no URL given"),
        (["list", "-page-size", "0", CLOSED], "0"),
        (["list", "-page-size", "1001", CLOSED], "1001"),
        (["lookup", CLOSED], "Missing option '-query'"),
        (["lookup", "-query", " ", CLOSED], "must not be empty"),
        (["lookup", "-query", "ab", "-match", "fuzzy", CLOSED], "fuzzy"),
        (["lookup", "-query", "ab", "-limit", "0", CLOSED], "0"),
        (["publish", "-force", "-meta", "novalue", CLOSED + "/a.md"], "is not KEY=VALUE"),
        (["publish", "-force", "-meta", "version=3", CLOSED + "/a.md"], "is reserved"),
        (["publish", "-force", "-meta", "Bad=1", CLOSED + "/a.md"], "invalid characters"),
        (["publish", "-force", "-meta", "auth=x", CLOSED + "/a.md"], "has its own option"),
        (["publish", "-force", "-meta", "a=1", "-meta", "a=2", CLOSED + "/a.md"], "given twice"),
        (["publish", "-force", "-body", "x", "-file", "-", CLOSED + "/a.md"], "not both"),
        (["publish", "-force", "-file", "/nonexistent/file", CLOSED + "/a.md"], "nonexistent"),
        (["fetch", "-auth", "two words", CLOSED + "/a.md"], "one word"),
        (["fetch", "-timeout", "0", CLOSED + "/a.md"], "0"),
        (["fetch", "-bogus", CLOSED + "/a.md"], "no such option -bogus"),
        (["fetch", "-o", CLOSED + "/a.md"], "no such option -o; did you mean -outline?"),
        (["publish", "-f", CLOSED + "/a.md"], "did you mean -file or -force?"),
        (["fetch", "-jsno", CLOSED + "/a.md"], "no such option -jsno; did you mean -json?"),
        (["fetch", "--outlin", CLOSED], "did you mean -outline? (see 'mark fetch --help')"),
        (["publish", "-force", "-meta", "importance=2", CLOSED + "/a.md"], 'got "2"'),
        (["publish", "-force", "-meta", "importance=x", CLOSED + "/a.md"], "from 0 to 1"),
        (["publish", "-force", "-meta", "retention=0", CLOSED + "/a.md"], "positive integer"),
        (["publish", "-force", "-body", "x", CLOSED + "/a.md#s"], "drop #s"),
        (["append", "-body", "x", CLOSED + "/a.md#s"], "APPEND writes the whole document"),
        (["archive", CLOSED + "/a.md#s"], "ARCHIVE writes the whole document"),
        (["edit", CLOSED + "/a.txt"], "whole .md document"),
        (["edit", CLOSED + "/a.md#part"], "whole .md document"),
        (["token", "add", "nonsense", "tok"], "not a mark:// URL"),
        (["nosuchcommand"], "no such command 'nosuchcommand' (see 'mark --help')"),
        (["fetc"], "no such command 'fetc'; did you mean fetch?"),
    ],
)
def test_usage_errors_exit_2_and_say_why(args: list[str], message: str) -> None:
    result = mark(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stderr.count("\n") == 1  # one line
    assert result.stdout == ""


def test_body_over_the_limit_is_a_usage_error() -> None:
    result = mark("publish", "-force", CLOSED + "/a.md", input="x" * ((1 << 20) + 1))
    assert result.exit_code == 2
    assert "the limit is 1048576" in result.stderr


def test_mark_host_resolves_bare_paths_and_no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARK_HOST", CLOSED)
    for args in (["fetch", "/a.md"], ["list"], ["lookup", "-query", "ab"], ["ping"]):
        result = mark(*args)
        assert result.exit_code == 1
        assert result.stderr.endswith("127.0.0.1:1: unreachable (connection refused)\n")
    other = mark("fetch", "mark://127.0.0.1:2/a.md")
    assert "127.0.0.1:2: unreachable" in other.stderr
    monkeypatch.setenv("MARK_HOST", "mark://host/with/path")
    bad = mark("fetch", "/a.md")
    assert bad.exit_code == 2
    assert "MARK_HOST" in bad.stderr


def test_token_commands(environment: Path) -> None:
    assert mark("token", "list").stderr == "No stored tokens.\n"
    added = mark("token", "add", "mark://LocalHost", "abc123")
    assert added.exit_code == 0
    tokens = environment / "tokens.toml"
    assert added.stderr == f"mark: token stored for localhost:6309 in {tokens}\n"
    assert mark("token", "add", "mark://[::1]:7000/any/path", input="fromstdin\n").exit_code == 0
    assert tokens.read_text() == (
        '["localhost:6309"]\ntoken = "abc123"\n\n["[::1]:7000"]\ntoken = "fromstdin"\n'
    )
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
    listed = mark("token", "list")
    assert listed.stdout == "[::1]:7000\nlocalhost:6309\n"
    assert "abc123" not in listed.output
    as_json = mark("token", "list", "--json")
    assert json.loads(as_json.stdout) == {"tokens": ["[::1]:7000", "localhost:6309"]}
    removed = mark("token", "remove", "mark://localhost:6309")
    assert (removed.exit_code, removed.stderr) == (0, "mark: token removed for localhost:6309\n")
    again = mark("token", "remove", "mark://localhost")
    assert (again.exit_code, again.stderr) == (1, "mark: no token stored for localhost:6309\n")
    bad = mark("token", "add", "mark://localhost", "two words")
    assert bad.exit_code == 1
    assert "one word" in bad.stderr


def test_token_commands_never_rewrite_a_broken_file(environment: Path) -> None:
    environment.mkdir()
    (environment / "tokens.toml").write_text("[broken\n")
    result = mark("token", "add", "mark://localhost", "abc")
    assert result.exit_code == 1
    assert str(environment / "tokens.toml") in result.stderr
    assert (environment / "tokens.toml").read_text() == "[broken\n"


def test_failed_is_one_mark_line() -> None:
    from markproto.client.cli.output import Failed

    runner = CliRunner()

    @click.command()
    def boom() -> None:
        raise Failed("it broke")

    result = runner.invoke(boom)
    assert (result.exit_code, result.stderr) == (1, "mark: it broke\n")
