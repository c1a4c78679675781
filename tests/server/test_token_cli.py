"""``mark-server token generate | list | revoke`` through click, and once as a real process."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from markproto.protocol.grants import Decision, hash_token
from markproto.server import tokens
from markproto.server.cli import main

NOW = datetime.now(UTC)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only the test's own settings: no MARK_*, XDG or systemd variables from the outer shell."""
    for name in list(os.environ):
        if name.startswith(("MARK_", "XDG_")) or name == "STATE_DIRECTORY":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["token", *args], env=env)


def test_generate_prints_the_raw_token_alone_on_stdout(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    result = run("generate", "--label", "ci", "--tokens", str(path))
    assert result.exit_code == 0, result.output
    raw = result.stdout.removesuffix("\n")
    assert len(raw) == 64
    assert result.stdout == raw + "\n"
    assert result.stderr == (
        f'Token "ci" appended to {path}\nRaw token (give to client, shown once):\n'
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (grant,) = tokens.entries(path)
    assert (grant.paths, grant.operations, grant.expires) == (
        ("/**",),
        frozenset({"publish"}),
        None,
    )
    grants = tokens.load(path)
    assert grants.authorize(raw, "/any/doc.md", "publish", NOW) is Decision.ALLOW
    assert grants.authorize(raw, "/any/doc.md", "read", NOW) is Decision.NOT_PERMITTED


def test_generate_with_paths_ops_and_expiry(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    args = ["--paths", " /docs/** , /notes/*", "--ops", "read,publish", "--tokens", str(path)]
    result = run("generate", "--label", "team", *args, "--expires", "2031-05-06T07:08:09+02:00")
    assert result.exit_code == 0, result.output
    (grant,) = tokens.entries(path)
    assert grant.paths == ("/docs/**", "/notes/*")
    assert grant.operations == frozenset({"read", "publish"})
    assert grant.expires == datetime(2031, 5, 6, 5, 8, 9, tzinfo=UTC)
    assert 'expires = "2031-05-06T05:08:09Z"' in path.read_text()


def test_expiry_as_a_duration(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    before = datetime.now(UTC).replace(microsecond=0)
    assert run("generate", "--label", "q", "--expires", "90d", "--tokens", str(path)).exit_code == 0
    after = datetime.now(UTC)
    (grant,) = tokens.entries(path)
    assert grant.expires is not None
    assert before + timedelta(days=90) <= grant.expires <= after + timedelta(days=90)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("soon", "give an RFC 3339 time"),
        ("2020-01-01T00:00:00Z", "is in the past"),
        ("2031-01-01T00:00:00", "add a time zone"),
    ],
)
def test_bad_expiry_is_a_usage_error(tmp_path: Path, value: str, problem: str) -> None:
    path = tmp_path / "tokens.toml"
    result = run("generate", "--label", "x", "--expires", value, "--tokens", str(path))
    assert result.exit_code == 2
    assert problem in result.stderr
    assert result.stdout == ""
    assert not path.exists()


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run("generate", "--tokens", str(tmp_path / "t.toml")).exit_code == 2
    assert run("revoke", "--tokens", str(tmp_path / "t.toml")).exit_code == 2
    assert run("explode").exit_code == 2


def test_failures_exit_1_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    run("generate", "--label", "ci", "--tokens", str(path))
    before = path.read_text()
    for args in (
        ["generate", "--label", "ci"],
        ["generate", "--label", "x", "--ops", "write"],
        ["revoke", "--label", "nope"],
    ):
        result = run(*args, "--tokens", str(path))
        assert result.exit_code == 1, args
        assert result.stdout == ""
        assert result.stderr.startswith("mark-server: ")
        assert result.stderr.count("\n") == 1
    assert path.read_text() == before


def test_list_shows_tokens_but_never_hashes(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    run("generate", "--label", "zed", "--paths", "/a/**,/b/*", "--tokens", str(path))
    expires = ["--expires", "2099-01-01T00:00:00Z"]
    alpha = run("generate", "--label", "alpha", "--ops", "read", *expires, "--tokens", str(path))
    raw = alpha.stdout.strip()
    path.write_text(
        path.read_text() + f'\n[tokens.old]\nhash = "{hash_token("x" * 64)}"\n'
        'paths = ["/**"]\noperations = ["publish"]\nexpires = "2020-01-01T00:00:00Z"\n'
    )
    result = run("list", "--tokens", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "alpha                 paths: /**                   ops: read  expires: "
        "2099-01-01T00:00:00Z",
        "old                   paths: /**                   ops: publish  expires: "
        "2020-01-01T00:00:00Z (expired)",
        "zed                   paths: /a/**,/b/*            ops: publish",
    ]
    assert "sha256" not in result.output
    assert raw not in result.output


def test_list_without_a_file(tmp_path: Path) -> None:
    result = run("list", "--tokens", str(tmp_path / "absent.toml"))
    assert result.exit_code == 0
    assert result.stdout == "No tokens found.\n"


def test_list_of_a_broken_file_fails(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text("[tokens.x]\nhash = 'nope'\n")
    result = run("list", "--tokens", str(path))
    assert result.exit_code == 1
    assert f"{path}: token 'x': hash must be" in result.stderr


def test_revoke(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    keep = run("generate", "--label", "keep", "--tokens", str(path)).stdout.strip()
    gone = run("generate", "--label", "gone", "--tokens", str(path)).stdout.strip()
    result = run("revoke", "--label", "gone", "--tokens", str(path))
    assert result.exit_code == 0
    assert result.stderr == f'Token "gone" revoked from {path}\n'
    grants = tokens.load(path)
    assert grants.authorize(gone, "/a.md", "publish", NOW) is Decision.INVALID_TOKEN
    assert grants.authorize(keep, "/a.md", "publish", NOW) is Decision.ALLOW
    again = run("revoke", "--label", "gone", "--if-present", "--tokens", str(path))
    assert again.exit_code == 0
    assert again.stderr == f'No token "gone" in {path}\n'
    absent = tmp_path / "absent.toml"
    assert run("revoke", "--label", "x", "--if-present", "--tokens", str(absent)).exit_code == 0
    assert run("revoke", "--label", "x", "--tokens", str(absent)).exit_code == 1


def test_file_from_mark_tokens(tmp_path: Path) -> None:
    path = tmp_path / "env.toml"
    result = run("generate", "--label", "ci", env={"MARK_TOKENS": str(path)})
    assert result.exit_code == 0
    assert [g.label for g in tokens.entries(path)] == ["ci"]
    flag = tmp_path / "flag.toml"
    run("generate", "--label", "ci", "--tokens", str(flag), env={"MARK_TOKENS": str(path)})
    assert flag.exists()


def test_default_file_is_the_servers(tmp_path: Path) -> None:
    result = run("generate", "--label", "me")
    assert result.exit_code == 0, result.output
    default = tmp_path / "home/.local/state/markproto/tokens.toml"
    assert [g.label for g in tokens.entries(default)] == ["me"]
    assert stat.S_IMODE(default.parent.stat().st_mode) == 0o700
    config = tmp_path / "conf/server.toml"
    config.parent.mkdir()
    config.write_text('tokens = "t.toml"\n')
    run("generate", "--label", "me", env={"MARK_CONFIG": str(config)})
    assert [g.label for g in tokens.entries(config.parent / "t.toml")] == ["me"]


def test_real_process_generates_a_working_token(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("mark-server")
    if not script.exists():
        pytest.skip("the mark-server console script is not installed beside this interpreter")
    path = tmp_path / "tokens.toml"
    env = {**os.environ, "MARK_TOKENS": str(path)}
    args = [str(script), "token", "generate", "--label", "proc", "--paths", "/team/**"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    raw = done.stdout.splitlines()[-1]  # what `| tail -1` gives
    assert done.stdout == raw + "\n"
    assert 'Token "proc" appended to' in done.stderr
    assert raw not in done.stderr
    assert raw not in path.read_text()
    grants = tokens.load(path)
    assert grants.authorize(raw, "/team/notes.md", "publish", NOW) is Decision.ALLOW
    assert grants.authorize(raw, "/other.md", "publish", NOW) is Decision.NOT_PERMITTED
