"""`mark-server serve` as a process: first run with no flags, SIGHUP reloads, SIGTERM drains."""

from __future__ import annotations

import asyncio
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.server import (
    WRITE_TOKEN,
    TokenSpec,
    server_process,
    start_server_process,
    write_tokens,
)

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import wire
from markproto.server import memory


async def _ask(
    pool: Pool, port: int, verb: str, path: str, meta: dict[str, str], body: bytes = b""
) -> wire.Response:
    data = wire.emit_request(wire.Request(verb, path, meta, body))
    return wire.parse_response(await pool.request(f"127.0.0.1:{port}", data))


async def test_first_run_without_flags_seeds_a_root_and_prints_a_token(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home), "XDG_DATA_HOME": "", "XDG_STATE_HOME": "", "STATE_DIRECTORY": ""}
    # Only --host/--port are given, so the test never collides with a real server on 6309.
    cmd = [
        sys.executable,
        "-m",
        "markproto.server.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
    environment.update(env)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert "shown once" in proc.stdout.readline()
        token = proc.stdout.readline().strip()
        assert len(token) == 64
        port = 0
        for line in proc.stderr:
            if "on udp" in line:
                port = int(line.rsplit(":", 1)[1])
                break
        root = home / ".local/share/markproto/root"
        assert (root / "index.md").is_symlink()
        assert (root / ".well-known/agent-manifest.md").is_symlink()
        cert = home / ".local/state/markproto/devcert.pem"
        async with Pool(Trust(cafile=str(cert))) as pool:
            manifest = await _ask(pool, port, "FETCH", "/.well-known/agent-manifest.md", {})
            assert b"- lookup-match: catalog, body\n" in manifest.body
            assert b"\n- watch\n" in manifest.body
            meta = {"auth": token, "expected-version": "0"}
            written = await _ask(pool, port, "PUBLISH", "/hello.md", meta, b"# Hello\n")
            assert written.status == "created"
            denied = await _ask(pool, port, "PUBLISH", "/x.md", {"auth": "wrong"}, b"x")
            assert denied.status == "unauthorized"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    # A second start keeps the root and the token file: no new token is printed.
    again = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    assert again.stderr is not None
    for line in again.stderr:
        if "on udp" in line:
            break
    again.send_signal(signal.SIGTERM)
    out, _ = again.communicate(timeout=15)
    assert again.returncode == 0
    assert out == ""


async def test_sighup_reloads_tokens_and_sigterm_exits_zero(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    state.mkdir()
    tokens = write_tokens(state / "tokens.toml", {"writer": TokenSpec(WRITE_TOKEN)})
    with server_process(root, state, tokens_file=tokens) as server:
        async with Pool(Trust(cafile=str(server.cert))) as pool:
            meta = {"auth": "fresh-token"}
            assert (await _ask(pool, server.port, "PUBLISH", "/a.md", meta, b"x")).status == (
                "unauthorized"
            )
            write_tokens(tokens, {"fresh": TokenSpec("fresh-token")})
            server.proc.send_signal(signal.SIGHUP)
            for _ in range(50):
                answer = await _ask(pool, server.port, "PUBLISH", "/a.md", meta, b"x")
                if answer.status == "created":
                    break
                await asyncio.sleep(0.1)
            assert answer.status == "created"
        assert server.terminate() == 0
        log = "".join(server.stderr_lines)
        assert "tokens reloaded" in log
        assert "server stopped" in log


def test_restart_keeps_the_certificate_so_pins_survive(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    state.mkdir()
    first = start_server_process(root, state)
    cert = first.cert.read_bytes()
    assert first.terminate() == 0
    second = start_server_process(root, state)
    try:
        assert second.cert.read_bytes() == cert
        assert "fingerprint sha256:" in "".join(second.stderr_lines)
    finally:
        assert second.terminate() == 0


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().partition("=")[::2] for pair in pairs if pair)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
@pytest.mark.parametrize(
    ("given", "running"),
    [(None, memory.TUNABLES), ("glibc.malloc.tcache_count=3", "glibc.malloc.tcache_count=3")],
)
def test_serve_runs_with_the_allocator_setting_or_the_operators(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str | None, running: str
) -> None:
    """glibc reads its tunables only as a process starts, so `serve` restarts itself in place
    (the same pid) with them; an operator's own thread-cache setting is kept as it is."""
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    state.mkdir()
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    env = {"GLIBC_TUNABLES": given} if given is not None else {}
    with server_process(root, state, env=env) as server:
        assert _environ(server.proc.pid).get("GLIBC_TUNABLES") == running
        assert server.terminate() == 0
