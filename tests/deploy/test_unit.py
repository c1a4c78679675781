"""The systemd unit and its environment file: the sandbox the issue asks for, paths that match
what install.sh lays down, settings that exist, and systemd's own verdict where it is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from support import REPO

from markproto.protocol.limits import DEFAULT_PORT
from markproto.server import memory
from markproto.server.config import ServerConfig, env_name

DEPLOY = REPO / "deploy"
UNIT = DEPLOY / "markproto.service"
ENV_FILE = DEPLOY / "markproto.env"
MAX_EXPOSURE = 2.0


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections of key -> values, with systemd's rules: keys repeat, an empty value resets."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        values = current.setdefault(key.strip(), [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return sections


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    return parse_unit(UNIT.read_text())["Service"]


def one(service: dict[str, list[str]], key: str) -> str:
    (value,) = service[key]
    return value


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("User", "markproto"),
        ("Group", "markproto"),
        ("StateDirectory", "markproto"),
        ("Restart", "on-failure"),
        ("ExecStart", "/opt/markproto/venv/bin/mark-server serve"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("EnvironmentFile", "-/etc/markproto/markproto.env"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("NoNewPrivileges", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("SystemCallArchitectures", "native"),
    ],
)
def test_unit_sets(service: dict[str, list[str]], key: str, value: str) -> None:
    assert one(service, key) == value


def test_no_capabilities_and_no_extra_writable_paths(service: dict[str, list[str]]) -> None:
    # Present and empty: an empty bounding set, not systemd's default of every capability.
    assert "CapabilityBoundingSet" in service
    assert service["CapabilityBoundingSet"] == []
    assert service.get("AmbientCapabilities", []) == []
    assert "ReadWritePaths" not in service


def test_syscall_filter_allows_system_service_only(service: dict[str, list[str]]) -> None:
    assert service["SystemCallFilter"][0] == "@system-service"
    assert all(value.startswith("~") for value in service["SystemCallFilter"][1:])


def test_memory_is_capped_for_a_1gb_board(service: dict[str, list[str]]) -> None:
    def mib(value: str) -> int:
        found = re.fullmatch(r"(\d+)([MG])", value)
        assert found, value
        return int(found.group(1)) * (1024 if found.group(2) == "G" else 1)

    high, top = mib(one(service, "MemoryHigh")), mib(one(service, "MemoryMax"))
    assert high < top <= 512


def test_unit_starts_with_the_servers_allocator_setting(service: dict[str, list[str]]) -> None:
    """Set by the unit, the server needs no restart of its own to get it (``exec_tuned``)."""
    assert f"GLIBC_TUNABLES={memory.TUNABLES}" in service["Environment"]


def test_stop_waits_for_the_drain(service: dict[str, list[str]]) -> None:
    # The server drains for up to 10 s on SIGTERM; systemd must not SIGKILL it before that.
    assert int(one(service, "TimeoutStopSec")) > 10
    assert service.get("KillSignal", ["SIGTERM"]) == ["SIGTERM"]


def test_exec_start_names_a_real_command() -> None:
    helped = subprocess.run(
        [sys.executable, "-m", "markproto.server.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--root" in helped.stdout


def test_env_file_names_only_real_settings() -> None:
    known = {env_name(f.name) for f in fields(ServerConfig) if f.name != "sources"}
    text = ENV_FILE.read_text()
    named = set(re.findall(r"^#?(MARK_[A-Z_]+)=", text, re.MULTILINE))
    assert named
    assert named <= known, named - known
    assert re.findall(r"^MARK_PORT=(\d+)$", text, re.MULTILINE) == [str(DEFAULT_PORT)]
    # An explicit root turns off first-run seeding: the default must stay commented out.
    assert not re.search(r"^MARK_ROOT=", text, re.MULTILINE)


def _analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is absent (Debian package: systemd)")
    return tool


def _local_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this environment's mark-server, which verify requires."""
    server = Path(sys.executable).parent / "mark-server"
    if not server.exists():
        pytest.skip(f"{server} is absent: the project is not installed in this environment")
    copy = tmp_path / UNIT.name
    text = UNIT.read_text().replace("/opt/markproto/venv/bin/mark-server", str(server))
    copy.write_text(text)
    return copy


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = _analyze()
    result = subprocess.run(
        [tool, "verify", "--man=no", str(_local_copy(tmp_path))], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert UNIT.name not in result.stderr


def test_security_exposure_is_at_most_2(tmp_path: Path) -> None:
    tool = _analyze()
    result = subprocess.run(
        [tool, "security", "--offline=true", str(_local_copy(tmp_path))],
        capture_output=True,
        text=True,
    )
    if "--offline" in result.stderr or "unrecognized option" in result.stderr:
        pytest.skip("systemd-analyze is older than 250 and cannot score a unit file offline")
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE, result.stdout
    # The README quotes the score; keep it in step with the unit.
    readme = (DEPLOY / "README.md").read_text()
    assert f"exposure level **{found.group(1)}**" in readme
