"""What every bench script needs: a real server in its own pinned process, process CPU and RSS
from /proc, percentiles, the machine line, and the writer of docs/PERFORMANCE.md sections.

Not a benchmark itself (no ``bench_`` prefix): `run` never executes it directly.
"""

from __future__ import annotations

import asyncio
import compileall
import dataclasses
import fcntl
import functools
import importlib
import io
import math
import multiprocessing
import os
import platform
import re
import statistics
import struct
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

DOC = REPO / "docs" / "PERFORMANCE.md"
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
SERVER_CPU, CLIENT_CPU = 0, 1
SCRATCH = Path(os.environ.get("BENCH_SCRATCH", "/var/tmp"))
"""Where `scratch` makes its folders (``$BENCH_SCRATCH``, else /var/tmp)."""


def scratch(prefix: str) -> Path:
    """A fresh folder for content roots a bench writes many files into, away from where the
    machine's other work deletes files. On a journal-less ext4 (this sandbox's root file system)
    every inode allocation first steps over the inodes deleted in its block group in the last
    minute (six while their table block is dirty), and folders are placed in their parent's
    group: in the system's temporary folder, where every test suite deletes its files, creating
    a file measured 0.4 to 1 ms of kernel CPU, against 30 to 40 us in a group of its own. So the
    folder is made outside it (``$BENCH_SCRATCH``, else /var/tmp) and flagged as the top of a
    tree (``chattr +T``, where the file system has the flag), which makes ext4 spread the
    folders made in it over fresh groups instead of its parent's (which a previous run's
    clean-up may just have emptied)."""
    parent = SCRATCH if SCRATCH.is_dir() and os.access(SCRATCH, os.W_OK) else None
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = struct.unpack("l", fcntl.ioctl(fd, _GETFLAGS, struct.pack("l", 0)))[0]
        fcntl.ioctl(fd, _SETFLAGS, struct.pack("l", flags | _TOPDIR))
    except OSError:
        pass  # not ext4 (tmpfs, overlayfs): nothing to spread
    finally:
        os.close(fd)
    return folder


_GETFLAGS, _SETFLAGS, _TOPDIR = 0x80086601, 0x40086602, 0x00020000
"""``FS_IOC_GETFLAGS``, ``FS_IOC_SETFLAGS`` and ``FS_TOPDIR_FL`` (linux/fs.h)."""


def pin(cpu: int) -> None:
    """Keep this process on one CPU (where the machine has it), so server and load generator do
    not trade places between runs."""
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), at clock-tick resolution."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_bytes(pid: int) -> int:
    """Resident set size now (``statm`` field 2, in pages)."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0-100) of a non-empty sample."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def machine() -> str:
    """One line naming the machine and software a table was measured on."""
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    return (
        f"{os.cpu_count()} x {cpu}, {mem // 1024} GiB RAM, Linux {platform.release()},"
        f" Python {platform.python_version()}, aioquic {version('aioquic')}"
    )


def stamp(part: str) -> str:
    """When, where and how to measure it again."""
    return (
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}; reproduce with"
        f" `tests/bench/run {part}` (Python from `$PYTHON`, else `.venv/bin/python`)."
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; the same text is printed and written to the doc."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(out)


_INTRO = """# Performance and reliability

Numbers measured by `tests/bench/run` (each section says when and on which machine; the load on
the machine at the time is part of the result, so every comparison is against a baseline
measured in the same run). Each section is rewritten by its bench script; run one with
`PYTHON=/path/to/venv/python tests/bench/run <part>`.
"""


def write_section(title: str, body: str) -> None:
    """Replace (or append) ``## title`` in docs/PERFORMANCE.md; every other section stays."""
    text = DOC.read_text() if DOC.exists() else _INTRO
    block = f"## {title}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: block + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + block
    DOC.write_text(text)
    print(f"\n(written to {DOC.relative_to(REPO)} § {title})")


# -- a real server in a child process ---------------------------------------------------------


@dataclass
class Child:
    """A markproto server (the real `App`) in a spawned process pinned to the server CPU."""

    proc: multiprocessing.process.BaseProcess
    pipe: Connection
    port: int
    cert: Path

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def ask(self, command: str) -> Any:
        """Run ``command`` in the child ("stats"): per-connection state and RSS."""
        self.pipe.send(command)
        return self.pipe.recv()

    def stop(self) -> None:
        if self.proc.is_alive():
            self.pipe.send("stop")
            self.proc.join(15)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def _child_main(
    settings: dict[str, Any],
    log_level: str,
    patches: dict[str, object],
    log_file: str,
    pinned: bool,
    pipe: Connection,
) -> None:
    if pinned:
        pin(SERVER_CPU)
    for target, value in patches.items():
        module, _, name = target.rpartition(".")
        setattr(importlib.import_module(module), name, value)
    from markproto.server import logsetup
    from markproto.server.app import App
    from markproto.server.config import ServerConfig

    sys.stderr = open(log_file, "a", buffering=1)  # noqa: SIM115 - the child's whole life
    level, _, every_request = log_level.partition("+")
    logsetup.configure("text", level, sys.stderr)
    if every_request:  # one record per request, as DEBUG gives, without aioquic's DEBUG records
        logsetup.request_log.setLevel("DEBUG")

    async def main() -> None:
        app = App(ServerConfig(**settings), out=io.StringIO())
        await app.start()
        loop = asyncio.get_running_loop()
        pipe.send(app.port)
        while True:
            command = await loop.run_in_executor(None, pipe.recv)
            if command == "stop":
                break
            pipe.send(_stats(app))
        await app.stop(timeout=2.0)

    asyncio.run(main())


def _stats(app: Any) -> dict[str, int]:
    """What the transport holds (`MarkServer.usage`, summed over connections) and the RSS."""
    return {**dataclasses.asdict(app.server.usage()), "rss": rss_bytes(os.getpid())}


PACKAGES = (
    "markproto.protocol",
    "markproto.durable",
    "markproto.tree",
    "markproto.server",
    "markproto.client",
)
"""The installed packages (pyproject's ``package-dir``), each compiled with its subpackages."""


@functools.cache
def installed_bytecode() -> None:
    """Write the bytecode of this interpreter's markproto and of the tests' support modules, as
    ``pip install`` does for an installed package. An editable checkout run with
    ``PYTHONDONTWRITEBYTECODE`` (or changed since its last import) compiles every changed module
    from source at each start instead: on this machine that put about 1.5 MiB of compiler
    garbage into the peak of every server start and its CPU into the start-up times, which no
    user of an installed server pays. Once a process; a module already fresh is skipped."""
    folders = [Path(importlib.import_module(name).__path__[0]) for name in PACKAGES]
    for folder in [*folders, REPO / "tests" / "support"]:
        compileall.compile_dir(folder, quiet=1)


@contextmanager
def child_server(
    root: Path,
    *,
    log_level: str = "info",
    patches: dict[str, object] | None = None,
    pinned: bool = True,
    tokens: Path | None = None,
    start_timeout: float = 60.0,
    environ: Mapping[str, str] | None = None,
    **settings: object,
) -> Iterator[Child]:
    """Serve ``root`` from a spawned process on 127.0.0.1 (port picked by the system).

    Logs go to a file at ``log_level`` (the real server writes them to stderr): their cost is
    part of what is measured. ``info+requests`` is INFO with a record for every request. The
    rate limiter is off unless ``rate_limit`` is given. ``patches`` sets module attributes in the
    server process before it starts (``{"package.module.NAME": value}``), to measure a variant.
    ``pinned=False`` lets the system place the server (on a machine others share, a pinned server
    waits for its CPU while the other may be free). ``start_timeout`` is how long it may take to
    index ``root`` and start (a loaded machine). ``environ`` is added to the environment the
    server starts in (``mark-server serve``'s: ``_server_environment``).
    """
    installed_bytecode()
    state = Path(tempfile.mkdtemp(prefix="bench-state-"))
    options: dict[str, Any] = {
        "root": root,
        "state_dir": state,
        "host": "127.0.0.1",
        "port": 0,
        "rate_limit": 0.0,
        "scan_interval": 0.0,
        "tokens": tokens if tokens is not None else state / "absent-tokens.toml",
        "sources": {"root": "bench"} | ({"tokens": "bench"} if tokens is not None else {}),
    }
    options.update(settings)
    context = multiprocessing.get_context("spawn")
    parent, end = context.Pipe()
    proc = context.Process(
        target=_child_main,
        args=(options, log_level, patches or {}, str(state / "server.log"), pinned, end),
        daemon=False,  # a daemonic process may not start the index build's worker processes
    )
    with _server_environment(environ or {}):
        proc.start()
    if not parent.poll(start_timeout):
        proc.kill()
        raise RuntimeError("the server process did not start")
    child = Child(proc, parent, parent.recv(), state / "devcert.pem")
    try:
        yield child
    finally:
        child.stop()


@contextmanager
def _server_environment(extra: Mapping[str, str]) -> Iterator[None]:
    """This process's environment with ``extra`` and then the rule of ``mark-server serve``
    (``memory.environment``: its ``exec_tuned`` gives it), for a child spawned meanwhile; without
    that rule for a server that has none (main's, measured as a baseline)."""
    from markproto.server import memory

    env = {**os.environ, **extra}
    rule = getattr(memory, "environment", None)
    env = (rule(env) if rule is not None else None) or env
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def token_file(path: Path, raw: str) -> Path:
    """A tokens file granting ``raw`` publish on everything."""
    from support.server import TokenSpec, write_tokens

    return write_tokens(path, {"bench": TokenSpec(raw)})


def counts(statuses: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
