"""deploy/Containerfile, read without a container engine: its instructions parse, the image runs as
a non-root user with the state directory as a volume and the UDP port exposed, its settings exist,
its health check uses options `mark ping` has, and its shell commands pass shellcheck."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from support import REPO

from markproto.protocol.limits import DEFAULT_PORT
from markproto.server import memory
from markproto.server.config import ServerConfig, env_name

CONTAINERFILE = REPO / "deploy" / "Containerfile"
KNOWN = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def parse(text: str) -> list[list[Instruction]]:
    """Instructions grouped by build stage; ``\\`` continues a line, ``#`` starts a comment."""
    stages: list[list[Instruction]] = []
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        logical += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        keyword, _, args = logical.partition(" ")
        logical = ""
        assert keyword.upper() == keyword, f"write instructions in capitals: {keyword}"
        assert keyword in KNOWN, f"unknown instruction {keyword}"
        if keyword == "FROM":
            stages.append([])
        assert stages, f"{keyword} before the first FROM"
        stages[-1].append(Instruction(keyword, args.strip()))
    assert not logical, "the file ends inside a continued line"
    return stages


@pytest.fixture(scope="module")
def stages() -> list[list[Instruction]]:
    return parse(CONTAINERFILE.read_text())


@pytest.fixture(scope="module")
def final(stages: list[list[Instruction]]) -> list[Instruction]:
    return stages[-1]


def args_of(stage: list[Instruction], keyword: str) -> list[str]:
    return [i.args for i in stage if i.keyword == keyword]


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in args_of(stage, "ENV"):
        for pair in shlex.split(args):
            key, sep, value = pair.partition("=")
            assert sep, f"ENV {pair}: use the KEY=value form"
            env[key] = value
    return env


def test_stages_use_a_slim_python_311_or_newer(stages: list[list[Instruction]]) -> None:
    assert len(stages) == 2
    for stage in stages:
        image = stage[0].args.split()[0]
        found = re.fullmatch(r"(?:docker\.io/library/)?python:3\.(\d+)-slim(?:-\w+)?", image)
        assert found, image
        assert int(found.group(1)) >= 11


def test_runs_as_a_created_non_root_user(final: list[Instruction]) -> None:
    (user,) = args_of(final, "USER")
    assert user not in ("root", "0")
    assert any("useradd" in run and run.rstrip().endswith(user) for run in args_of(final, "RUN"))


def test_udp_port_volume_and_state_directory(final: list[Instruction]) -> None:
    assert args_of(final, "EXPOSE") == [f"{DEFAULT_PORT}/udp"]
    env = env_of(final)
    (volume,) = args_of(final, "VOLUME")
    assert json.loads(volume) == [env["STATE_DIRECTORY"]]
    assert env["MARK_PORT"] == str(DEFAULT_PORT)
    assert env["PATH"].startswith("/opt/markproto/venv/bin:")


def test_settings_are_real(final: list[Instruction]) -> None:
    known = {env_name(f.name) for f in fields(ServerConfig) if f.name != "sources"}
    named = {key for key in env_of(final) if key.startswith("MARK_")}
    assert named
    assert named <= known, named - known
    # An explicit root would turn off first-run seeding; the default follows STATE_DIRECTORY.
    assert "MARK_ROOT" not in named


def test_image_starts_with_the_servers_allocator_setting(final: list[Instruction]) -> None:
    assert env_of(final)["GLIBC_TUNABLES"] == memory.TUNABLES


def test_entrypoint_serves_in_exec_form(final: list[Instruction]) -> None:
    assert [json.loads(a) for a in args_of(final, "ENTRYPOINT")] == [["mark-server"]]
    assert [json.loads(a) for a in args_of(final, "CMD")] == [["serve"]]
    assert args_of(final, "STOPSIGNAL") == ["SIGTERM"]


def test_healthcheck_uses_options_mark_ping_has(final: list[Instruction]) -> None:
    (health,) = args_of(final, "HEALTHCHECK")
    command = health.partition(" CMD ")[2]
    words = shlex.split(command)
    assert words[:2] == ["mark", "ping"]
    shown = subprocess.run(
        [sys.executable, "-m", "markproto.client.cli", "ping", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for option in (w for w in words[2:] if w.startswith("--")):
        assert option in shown, option


def test_copied_sources_exist(stages: list[list[Instruction]]) -> None:
    copies = [args for stage in stages for args in args_of(stage, "COPY")]
    local = [args.split()[:-1] for args in copies if not args.startswith("--from=")]
    assert local
    for sources in local:
        for source in sources:
            assert (REPO / source).exists(), source


def test_shell_commands_pass_shellcheck(stages: list[list[Instruction]], tmp_path: Path) -> None:
    tool = shutil.which("shellcheck")
    if tool is None:
        pytest.skip("shellcheck is absent (Debian package: shellcheck)")
    commands = [args for stage in stages for args in args_of(stage, "RUN")]
    commands += [h.partition(" CMD ")[2] for h in args_of(stages[-1], "HEALTHCHECK")]
    script = tmp_path / "commands.sh"
    script.write_text("#!/bin/sh\n" + "\n".join(commands) + "\n")
    result = subprocess.run([tool, "--severity=style", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
