"""Real servers for integration tests: in-process (same event loop) or a `mark-server` process."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from markproto.protocol.grants import hash_token
from markproto.server.app import App
from markproto.server.config import ServerConfig

WRITE_TOKEN = "test-write-token"
"""Raw token of the default grant: paths ["/**"], operations ["publish"]."""


@dataclass(frozen=True)
class TokenSpec:
    raw: str
    paths: Sequence[str] = ("/**",)
    ops: Sequence[str] = ("publish",)
    expires: str | None = None


DEFAULT_TOKENS = {"writer": TokenSpec(WRITE_TOKEN)}


def write_tokens(path: Path, tokens: Mapping[str, TokenSpec]) -> Path:
    """Write a tokens.toml in the reference's labelled format."""
    lines = []
    for label, spec in tokens.items():
        lines += [
            f"[tokens.{label}]",
            f'hash = "{hash_token(spec.raw)}"',
            "paths = [" + ", ".join(f'"{p}"' for p in spec.paths) + "]",
            "operations = [" + ", ".join(f'"{o}"' for o in spec.ops) + "]",
        ]
        if spec.expires:
            lines.append(f'expires = "{spec.expires}"')
        lines.append("")
    path.write_text("\n".join(lines))
    path.chmod(0o600)
    return path


@dataclass
class RunningServer:
    """A server under test: its app, address and the certificate clients can pin or trust."""

    app: App
    root: Path
    state_dir: Path
    tokens_file: Path | None
    host: str = "127.0.0.1"
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.app.port

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"mark://{self.host}:{self.port}"

    @property
    def cert(self) -> Path:
        return self.state_dir / "devcert.pem"


@asynccontextmanager
async def running_server(
    root: Path,
    *,
    tokens: Mapping[str, TokenSpec] | None = DEFAULT_TOKENS,
    **settings: object,
) -> AsyncIterator[RunningServer]:
    """Start a real server on loopback (port picked by the system) in this event loop.

    ``tokens=None`` runs without a token store (reads public, writes refused); other settings
    override ``ServerConfig`` fields (``read_only=True``, ``rate_limit=5``, ...).
    """
    root.mkdir(parents=True, exist_ok=True)
    state = root.parent / f"{root.name}-state"
    state.mkdir(exist_ok=True)
    tokens_file = None if tokens is None else write_tokens(state / "tokens.toml", tokens)
    options: dict[str, object] = {
        "host": "127.0.0.1",
        "port": 0,
        "rate_limit": 0.0,
        "scan_interval": 0.0,
    }
    options.update(settings)
    config = ServerConfig(
        root=root,
        state_dir=state,
        tokens=tokens_file if tokens_file else state / "absent-tokens.toml",
        sources={"root": "test"},
        **options,  # type: ignore[arg-type]
    )
    app = App(config, out=io.StringIO())
    await app.start()
    try:
        yield RunningServer(app, root, state, tokens_file)
    finally:
        await app.stop(timeout=2.0)


_LISTENING = re.compile(r"on udp \S*:(\d+)")


@dataclass
class ServerProcess:
    """A `mark-server serve` child process."""

    proc: subprocess.Popen[str]
    port: int
    root: Path
    state_dir: Path
    stderr_lines: list[str]

    @property
    def url(self) -> str:
        return f"mark://127.0.0.1:{self.port}"

    @property
    def cert(self) -> Path:
        return self.state_dir / "devcert.pem"

    def kill(self) -> None:
        """SIGKILL: no cleanup, no drain, exactly like a power cut for the process."""
        self.proc.kill()
        self.proc.wait()

    def terminate(self, timeout: float = 15.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


def start_server_process(
    root: Path,
    state_dir: Path,
    *,
    tokens_file: Path | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> ServerProcess:
    """Start `mark-server serve` on 127.0.0.1 with a free port and wait until it listens."""
    cmd = [
        sys.executable,
        "-m",
        "markproto.server.cli",
        "serve",
        "--root",
        str(root),
        "--state-dir",
        str(state_dir),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--rate-limit",
        "0",
        *(["--tokens", str(tokens_file)] if tokens_file else []),
        *args,
    ]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
    environment.update(env or {})
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        found = _LISTENING.search(line)
        if found:
            _drain_in_background(proc, lines)
            return ServerProcess(proc, int(found.group(1)), root, state_dir, lines)
    proc.kill()
    raise RuntimeError("mark-server did not start:\n" + "".join(lines))


def _drain_in_background(proc: subprocess.Popen[str], lines: list[str]) -> None:
    """Keep reading stderr so the child never blocks on a full pipe."""
    import threading

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)

    threading.Thread(target=pump, daemon=True).start()


@contextmanager
def server_process(root: Path, state_dir: Path, **kwargs: object) -> Iterator[ServerProcess]:
    server = start_server_process(root, state_dir, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.kill()
