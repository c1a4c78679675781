"""deploy/install.sh end to end into a staging directory: the tree it lays down, a second run that
changes nothing, uninstall, the certbot hook, and shellcheck where it exists.

Staging (``--destdir``) skips the user, sysctl, ufw and systemd steps, so this runs without root or
systemd; one install (a venv and a pip install of this checkout, about 20 s) serves the module.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import REPO

from markproto.protocol.grants import hash_token

DEPLOY = REPO / "deploy"
SCRIPT = DEPLOY / "install.sh"
HOOK = DEPLOY / "certbot-deploy-hook.sh"
PREFIX = "opt/markproto"


@dataclass(frozen=True)
class Staged:
    root: Path
    first: str
    second: str
    before: dict[str, tuple[int, int, int]]
    after: dict[str, tuple[int, int, int]]


def run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DESTDIR"}
    return subprocess.run(
        [str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env, check=check
    )


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its size, mode and modification time."""
    out = {}
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_size, st.st_mode, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Staged:
    root = tmp_path_factory.mktemp("stage")
    first = run("--destdir", root, "--python", sys.executable, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    before = snapshot(root)
    second = run("--destdir", root, "--python", sys.executable, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    return Staged(root, first.stdout, second.stdout, before, snapshot(root))


def test_scripts_are_executable() -> None:
    assert os.access(SCRIPT, os.X_OK)
    assert os.access(HOOK, os.X_OK)


def test_venv_has_both_commands(staged: Staged) -> None:
    bin_dir = staged.root / PREFIX / "venv/bin"
    for command in ("mark-server", "mark"):
        shown = subprocess.run(
            [bin_dir / command, "--version"], capture_output=True, text=True, check=True
        )
        assert shown.stdout.startswith(f"{command}, version ")


def test_unit_file_is_the_deploy_unit(staged: Staged) -> None:
    unit = staged.root / "etc/systemd/system/markproto.service"
    assert unit.read_text() == (DEPLOY / "markproto.service").read_text()
    assert "ExecStart=/opt/markproto/venv/bin/mark-server serve" in unit.read_text()
    assert "EnvironmentFile=-/etc/markproto/markproto.env" in unit.read_text()


def test_env_and_sysctl_files(staged: Staged) -> None:
    env = staged.root / "etc/markproto/markproto.env"
    assert env.read_text() == (DEPLOY / "markproto.env").read_text()
    assert env.stat().st_mode & 0o777 == 0o640
    sysctl = (staged.root / "etc/sysctl.d/60-markproto.conf").read_text()
    assert re.findall(r"^(net\.core\.[rw]mem_max) = (\d+)$", sysctl, re.MULTILINE) == [
        ("net.core.rmem_max", "7500000"),
        ("net.core.wmem_max", "7500000"),
    ]


def test_first_token_is_shown_once_and_stored_hashed(staged: Staged) -> None:
    tokens = staged.root / "var/lib/markproto/tokens.toml"
    assert tokens.stat().st_mode & 0o777 == 0o600
    (raw,) = re.findall(r"^\s+([0-9a-f]{64})$", staged.first, re.MULTILINE)
    owner = tomllib.loads(tokens.read_text())["tokens"]["owner"]
    assert owner["hash"] == hash_token(raw)
    assert owner["paths"] == ["/**"]
    assert raw not in staged.second


def test_installer_keeps_a_copy_for_uninstall_and_upgrades(staged: Staged) -> None:
    copy = staged.root / PREFIX / "deploy"
    for name in ("install.sh", "certbot-deploy-hook.sh", "markproto.service", "markproto.env"):
        assert (copy / name).read_bytes() == (DEPLOY / name).read_bytes()
    assert os.access(copy / "install.sh", os.X_OK)
    stamp = (staged.root / PREFIX / "installed-from").read_text().splitlines()
    assert stamp[0].startswith("python /")
    assert re.fullmatch(rf"checkout {re.escape(str(REPO))} sha256:[0-9a-f]{{64}}", stamp[1])


def test_staging_touches_no_system_step(staged: Staged) -> None:
    for skipped in (
        "no system user",
        "sysctl not applied",
        "firewall untouched",
        "service not enabled",
    ):
        assert f"staging: {skipped}" in staged.first
    assert "mark-server and mark run" in staged.first


def test_second_run_changes_nothing(staged: Staged) -> None:
    assert staged.after == staged.before
    assert "wrote" not in staged.second
    assert "installed" not in staged.second
    assert "unchanged /opt/markproto/venv" in staged.second


@pytest.mark.parametrize("keep", [[], ["--keep-data"]], ids=["default", "keep-data"])
def test_uninstall_keeps_the_data_unless_purged(
    staged: Staged, tmp_path: Path, keep: list[str]
) -> None:
    root = tmp_path / "stage"
    shutil.copytree(staged.root, root, symlinks=True)
    kept = run("uninstall", *keep, "--destdir", root)
    left = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert left == {"etc/markproto/markproto.env", "var/lib/markproto/tokens.toml"}
    assert "uninstall --purge deletes them" in kept.stdout
    run("uninstall", "--purge", "--destdir", root)
    assert [p for p in root.rglob("*") if not p.is_dir()] == []
    assert not (root / PREFIX).exists()


def test_purge_and_keep_data_exclude_each_other(tmp_path: Path) -> None:
    result = run("uninstall", "--purge", "--keep-data", "--destdir", tmp_path, check=False)
    assert result.returncode == 1
    assert result.stderr == (
        "install.sh: --purge and --keep-data contradict each other: give one\n"
    )


def test_the_printed_launch_starts_the_server_as_the_unit_would(
    staged: Staged, tmp_path: Path
) -> None:
    """Without systemd the installer prints the command to use instead; run, it serves the
    state directory's root on the environment file's address, as the unit would."""
    root = tmp_path / "stage"
    shutil.copytree(staged.root, root, symlinks=True)
    (line,) = [
        line.strip() for line in staged.first.splitlines() if line.strip().startswith("sh -c ")
    ]
    env_file = root / "etc/markproto/markproto.env"
    port = free_udp_port()
    text = env_file.read_text().replace("MARK_LISTEN_HOST=::", "MARK_LISTEN_HOST=127.0.0.1")
    env_file.write_text(re.sub(r"MARK_PORT=\d+", f"MARK_PORT={port}", text))
    command = line.replace(str(staged.root), str(root))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MARK_", "STATE_"))}
    proc = subprocess.Popen(["bash", "-c", command], stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        lines = []
        for output in proc.stderr:
            lines.append(output)
            if "markproto serving" in output:
                break
        state = root / "var/lib/markproto"
        assert lines[-1] == f"markproto serving {state / 'root'} on udp 127.0.0.1:{port}\n"
        assert (state / "devcert.pem").exists()  # the state directory is the unit's
    finally:
        proc.terminate()
        proc.wait(15)


def free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "--port must be a port number"),
        (["--port", "http"], "--port must be a port number"),
        (["--prefix", "opt"], "--prefix must be an absolute path"),
        (["--wheel", "/nonexistent/markproto.whl"], "no such wheel"),
        (["--frobnicate"], "unknown argument: --frobnicate"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    result = run(*args, "--destdir", tmp_path / "stage", check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert not (tmp_path / "stage" / PREFIX).exists()


def test_help_lists_every_option() -> None:
    shown = run("--help").stdout
    for option in ("--wheel", "--port", "--python", "--prefix", "--destdir", "--purge"):
        assert option in shown
    assert "uninstall" in shown


def test_certbot_hook_copies_key_and_certificate(tmp_path: Path) -> None:
    lineage = tmp_path / "live/kb.example.com"
    lineage.mkdir(parents=True)
    (lineage / "fullchain.pem").write_text("CERT\n")
    (lineage / "privkey.pem").write_text("KEY\n")
    state = tmp_path / "state"
    env = {
        **os.environ,
        "RENEWED_LINEAGE": str(lineage),
        "MARKPROTO_STATE": str(state),
        "MARKPROTO_USER": pwd.getpwuid(os.getuid()).pw_name,
        "PATH": "/usr/bin:/bin",  # systemctl may be there; no markproto unit is active in CI
    }
    subprocess.run([HOOK], env=env, check=True, capture_output=True)
    tls = state / "tls"
    assert sorted(p.name for p in tls.iterdir()) == ["fullchain.pem", "privkey.pem"]
    assert (tls / "fullchain.pem").read_text() == "CERT\n"
    assert (tls / "privkey.pem").read_text() == "KEY\n"
    assert (tls / "privkey.pem").stat().st_mode & 0o777 == 0o600
    assert tls.stat().st_mode & 0o777 == 0o700


def test_certbot_hook_refuses_to_run_outside_certbot() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RENEWED_LINEAGE"}
    result = subprocess.run([HOOK], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "RENEWED_LINEAGE" in result.stderr


@pytest.mark.parametrize("script", [SCRIPT, HOOK], ids=lambda p: p.name)
def test_shellcheck(script: Path) -> None:
    tool = shutil.which("shellcheck")
    if tool is None:
        pytest.skip("shellcheck is absent (Debian package: shellcheck)")
    result = subprocess.run([tool, "--severity=style", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_staged_unit_passes_systemd_analyze_verify(staged: Staged, tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is absent (Debian package: systemd)")
    installed = (staged.root / "etc/systemd/system/markproto.service").read_text()
    unit = tmp_path / "markproto.service"
    unit.write_text(installed.replace("/opt/markproto", str(staged.root / PREFIX)))
    result = subprocess.run([tool, "verify", "--man=no", unit], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
