"""Issue 13's board budget, measured as an operator sees it: a real server, the FastAPI docs
published live over QUIC, RSS of the server and its workers from /proc.

1. RSS growth per body byte after publishing the corpus x1, x5 and x20 (x20 pipelined), peak and
   settled, then after a restart that restores the saved index and one that builds it in full.
2. A second client's FETCH p99 while a 1 MB document is published, against its p99 in the quiet
   rounds between (alternating).
3. Settled RSS after the x1 and x5 publish with the server's allocator settings (one glibc heap,
   a fixed mmap threshold, ``malloc_trim`` after write bursts) against others: two heaps, no
   trim, glibc's defaults (patched out in the child), ``PYTHONMALLOC=malloc``.
4. Empty root: exec to the first answered FETCH and RSS, `mark-server serve` against the bare
   aioquic echo server (tests/support/echo.py) started the same way, interleaved.
5. Index-ready MB/s at start-up on the x5 root, from the server's "lookup index built" record.

    PYTHON=.venv/bin/python tests/bench/run board        # or: bench_board.py [--starts 5]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import perfkit
from bench_footprint import memory
from perfkit import child_server, median, percentile, table, token_file, write_section

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import wire
from markproto.server import devcert

TOKEN = "bench-board-token"
GROWTH_TARGET, P99_TARGET_MS, START_TARGET, READY_TARGET = 1.5, 50.0, 1.3, 8.0
WARMED_S = 4.0
"""Seconds after the first answer by which an empty server has imported ``app.WARM``."""
SETTLE_S = 8.0
"""Long enough for the server's trim (two quiet 2 s intervals after the last write and the
index work it held back) to have happened."""


def _nothing(*_: object, **__: object) -> None:
    """A no-op in place of a patched call (a module-level function: the patch is pickled)."""


NO_ALLOCATOR_SETTINGS = {  # glibc defaults: neither call has a setting that turns it off
    "markproto.server.memory.tune": _nothing,
    "markproto.server.memory.trim": _nothing,
}
NO_TRIM = {"markproto.server.memory.trim": _nothing}
THREAD_CACHES = {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=7"}
"""glibc's default thread caches, in place of the server's setting (``memory.TUNABLES``)."""
BUILT = re.compile(r"lookup index built.*?mb=([\d.]+) seconds=([\d.]+)")
PARTS = ("1", "2", "3", "4", "5")


def corpus() -> Path | None:
    from support import shared_path

    try:
        return shared_path("corpus", "fastapi-docs")
    except BaseException:  # pytest's Skipped: the shared corpus is absent
        return None


def descendants_rss() -> int:
    """RSS in bytes of every process below this one (the server and its index workers)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if b"resource_tracker" in (entry / "cmdline").read_bytes():
                    continue
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[1])
    members, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - members
        members |= frontier
    total = 0
    for pid in members:
        try:
            total += perfkit.rss_bytes(pid)
        except OSError:
            continue
    return total


@contextmanager
def peak_sampler() -> Iterator[list[int]]:
    """The largest `descendants_rss` seen while the block runs, in ``peak[0]``."""
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], descendants_rss())
            done.wait(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


async def request(pool: Pool, port: int, req: wire.Request) -> wire.Response:
    return wire.parse_response(await pool.request(f"127.0.0.1:{port}", wire.emit_request(req)))


async def publish(port: int, docs: list[tuple[str, bytes]], in_flight: int) -> None:
    """PUBLISH every document, ``in_flight`` at a time over one connection."""
    gate = asyncio.Semaphore(in_flight)

    async def one(pool: Pool, path: str, body: bytes) -> None:
        async with gate:
            answer = await request(pool, port, wire.Request("PUBLISH", path, {"auth": TOKEN}, body))
        if answer.status != "created":
            raise RuntimeError(f"PUBLISH {path}: {answer.status}")

    async with Pool(Trust(insecure=True)) as pool:
        await asyncio.gather(*(one(pool, path, body) for path, body in docs))


def docs_of(files: list[Path], base: Path, copies: int) -> list[tuple[str, bytes]]:
    return [
        (f"/c{copy:02d}/{file.relative_to(base).as_posix()}", file.read_bytes())
        for copy in range(copies)
        for file in files
    ]


def settled() -> int:
    time.sleep(SETTLE_S)
    return descendants_rss()


def settled_empty(port: int) -> int:
    """`settled` after one answered FETCH: the server imports what documents and LOOKUP need
    once it is idle after its first answer (``app.WARM``), as a server in service has."""

    async def health() -> None:
        async with Pool(Trust(insecure=True)) as pool:
            await request(pool, port, wire.Request("FETCH", "/health", {}, b""))

    asyncio.run(health())
    return settled()


@dataclass(frozen=True)
class Restart:
    """A start on a loaded root: tree peak and settled RSS, seconds to the first FETCH after
    binding, and the (MB, seconds) of the index build."""

    peak: int
    settled: int
    first_fetch_s: float
    ready: tuple[float, float]


@dataclass
class Growth:
    copies: int
    """FastAPI corpus copies (0: the vault of short notes, ``label``)."""
    body: int
    empty: int
    warm: int
    publish_s: float
    peak: int
    settled: int
    restored: Restart | None = None
    built: Restart | None = None
    parts: dict[str, int] | None = None
    """Where the settled growth went (``attribution``, settled minus empty), bytes."""
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or f"x{self.copies}"


def index_ready(server: perfkit.Child) -> tuple[float, float]:
    """(MB, seconds) of the last "lookup index built" record in the server's log (written
    beside the certificate path `child_server` names)."""
    found = BUILT.findall((server.cert.parent / "server.log").read_text())
    return (float(found[-1][0]), float(found[-1][1])) if found else (0.0, 0.0)


async def first_fetch_then_lookup(port: int, path: str) -> float:
    """Seconds to the first FETCH after binding; then waits for a LOOKUP (the index ready)."""
    began = time.monotonic()
    async with Pool(Trust(insecure=True), request_timeout=300.0) as pool:
        answer = await request(pool, port, wire.Request("FETCH", path, {}, b""))
        fetched = time.monotonic() - began
        if answer.status != "ok":
            raise RuntimeError(f"FETCH {path}: {answer.status}")
        for _ in range(600):
            query = wire.Request("LOOKUP", "/", {"query": "dependency", "match": "body"}, b"")
            if (await request(pool, port, query)).status == "ok":
                break
            await asyncio.sleep(0.2)
    return fetched


async def caught_up(port: int) -> None:
    """Wait for the index work a burst held back: a LOOKUP waits for it."""
    async with Pool(Trust(insecure=True), request_timeout=300.0) as pool:
        query = wire.Request("LOOKUP", "/", {"query": "dependency", "match": "body"}, b"")
        for _ in range(600):  # a LOOKUP's wait is bounded: ask again until it is answered
            if (await request(pool, port, query)).status == "ok":
                return
            await asyncio.sleep(0.2)
        raise RuntimeError("LOOKUP after the publish was never answered")


def restart(root: Path, state: Path, tokens: Path, path: str) -> Restart:
    """Start on ``root`` again and wait for its index."""
    with peak_sampler() as peak, child_server(root, tokens=tokens, state_dir=state) as server:
        fetched = asyncio.run(first_fetch_then_lookup(server.port, path))
        rest = settled()
        hwm = memory(server.pid)[1] * 1024
        ready = index_ready(server)
    return Restart(max(peak[0], hwm), rest, fetched, ready)


def growth_run(
    base: Path,
    docs: list[tuple[str, bytes]],
    copies: int,
    in_flight: int,
    before: dict[str, int] | None = None,
) -> Growth:
    """Part 1 at one scale; ``before`` is ``empty_attribution`` (else none is taken)."""
    work = Path(tempfile.mkdtemp(prefix="bench-board-", dir=base))
    root, state = work / "root", work / "state"
    root.mkdir()
    state.mkdir()
    tokens = token_file(work / "tokens.toml", TOKEN)
    patches = {"perfkit._stats": attribution}
    with child_server(root, tokens=tokens, state_dir=state, patches=patches) as server:
        empty = settled_empty(server.port)
        asyncio.run(publish(server.port, [("/warm.md", b"# Warm\n\nup\n")], 1))
        warm = settled()
        began = time.monotonic()
        with peak_sampler() as peak:
            asyncio.run(publish(server.port, docs, in_flight))
            took = time.monotonic() - began
            asyncio.run(caught_up(server.port))
        hwm = memory(server.pid)[1] * 1024
        run = Growth(
            copies, sum(len(b) for _, b in docs), empty, warm, took, max(peak[0], hwm), settled()
        )
        if before is not None:
            after = server.ask("attribution")
            run.parts = {key: after[key] - before.get(key, 0) for key in after}
    run.restored = restart(root, state, tokens, docs[0][0])
    shutil.rmtree(state / "index")
    run.built = restart(root, state, tokens, docs[0][0])
    shutil.rmtree(work)
    return run


def _deep_size(roots: list[object], seen: set[int]) -> int:
    """Bytes of ``roots`` and everything they reach that ``seen`` does not hold yet (modules,
    classes and functions aside: code is counted as the rest)."""
    import gc
    import types

    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def _pymalloc() -> tuple[int, int]:
    """(bytes of pymalloc arenas, bytes in blocks allocated from them)."""
    fd, name = tempfile.mkstemp()
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
    text = Path(name).read_text()
    os.unlink(name)

    def field(key: str) -> int:
        found = re.search(rf"^# {key}\s*=\s*([\d,]+)", text, re.M)
        return int(found.group(1).replace(",", "")) if found else 0

    arena = 1 << 20 if sys.version_info >= (3, 10) else 256 << 10
    return field("arenas allocated current") * arena, field("bytes in allocated blocks")


def attribution(app: object) -> dict[str, int]:
    """What the server process holds, by part (run in it: ``child_server``'s stats hook): RSS,
    the sizes of the live structures (each object counted once, in this order), Python's small-
    object arenas and glibc's heaps; shared bytes are counted with the first that reaches them."""
    import ctypes

    class Mallinfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                         "uordblks", "fordblks", "keepcost")
        ]  # fmt: skip

    out = {"rss": perfkit.rss_bytes(os.getpid())}  # before the walk below allocates
    out["pymalloc arenas"], out["pymalloc used"] = _pymalloc()
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Mallinfo2
        info = libc.mallinfo2()
        out["glibc used"], out["glibc free"] = info.uordblks + info.hblkhd, info.fordblks
    except (OSError, AttributeError):
        pass
    out["modules"] = len(sys.modules)
    content: Any = getattr(app, "content", None)
    lookup: Any = getattr(app, "_lookup", None)
    dispatcher: Any = getattr(app, "_dispatcher", None)
    parts: list[tuple[str, list[object]]] = [
        ("snapshot", [getattr(content, "_snapshot", None)]),
        ("catalog", [getattr(lookup, "catalog", None)]),
        ("body index", [getattr(lookup, "bodies", None)]),
        ("link index", [getattr(lookup, "links", None)]),
        ("version cache", [getattr(content, "_cache", None)]),
        ("response cache", [getattr(dispatcher, "cache", None)]),
        ("watch log", [getattr(getattr(app, "watch", None), "log", None)]),
    ]
    seen: set[int] = set()
    for name, roots in parts:
        out[name] = _deep_size([r for r in roots if r is not None], seen)
    return out


def empty_attribution(base: Path) -> dict[str, int]:
    """``attribution`` of a server on an empty root, settled (its own process, so that asking
    does not change what a growth run measures)."""
    work = Path(tempfile.mkdtemp(prefix="bench-board-empty-", dir=base))
    (work / "root").mkdir()
    tokens = token_file(work / "tokens.toml", TOKEN)
    with child_server(work / "root", tokens=tokens, patches={"perfkit._stats": attribution}) as s:
        settled_empty(s.port)
        found: dict[str, int] = s.ask("attribution")
    shutil.rmtree(work)
    return found


@dataclass(frozen=True)
class Allocator:
    """One allocator setting: the server's environment and patches."""

    name: str
    env: dict[str, str]
    patches: dict[str, object]


ALLOCATORS = (
    Allocator(
        "now: pymalloc, MALLOC_ARENA_MAX=1, mmap threshold 256 KiB, no thread caches, malloc_trim",
        {},
        {},
    ),
    Allocator(
        "pymalloc, glibc's thread caches (GLIBC_TUNABLES=glibc.malloc.tcache_count=7)",
        THREAD_CACHES,
        {},
    ),
    Allocator("pymalloc, MALLOC_ARENA_MAX=2 (two glibc heaps)", {"MALLOC_ARENA_MAX": "2"}, {}),
    Allocator("pymalloc, no trim", {}, NO_TRIM),
    Allocator("pymalloc, glibc defaults (no tune, no trim)", THREAD_CACHES, NO_ALLOCATOR_SETTINGS),
    Allocator("PYTHONMALLOC=malloc, tune + malloc_trim", {"PYTHONMALLOC": "malloc"}, {}),
    Allocator(
        "PYTHONMALLOC=malloc, glibc defaults",
        {"PYTHONMALLOC": "malloc", **THREAD_CACHES},
        NO_ALLOCATOR_SETTINGS,
    ),
)


@dataclass(frozen=True)
class AllocatorRun:
    empty: int
    peak: int
    settled: int
    publish_s: float
    cpu_s: float
    """The server process's CPU seconds for the publish and its settling."""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def allocator_run(base: Path, docs: list[tuple[str, bytes]], setting: Allocator) -> AllocatorRun:
    """A fresh server with ``setting``: empty RSS, then the peak and settled RSS of publishing
    ``docs`` one at a time."""
    work = Path(tempfile.mkdtemp(prefix="bench-board-alloc-", dir=base))
    (work / "root").mkdir()
    tokens = token_file(work / "tokens.toml", TOKEN)
    with child_server(
        work / "root", tokens=tokens, patches=setting.patches, environ=setting.env
    ) as server:
        empty = settled_empty(server.port)
        cpu = _cpu_seconds(server.pid)
        began = time.monotonic()
        with peak_sampler() as peak:
            asyncio.run(publish(server.port, docs, 1))
            took = time.monotonic() - began
            rest = settled()
        hwm = memory(server.pid)[1] * 1024
        run = AllocatorRun(empty, max(peak[0], hwm), rest, took, _cpu_seconds(server.pid) - cpu)
    shutil.rmtree(work)
    return run


# -- 2: FETCH p99 while a large document is published -----------------------------------------


def _publisher(port: int, pipe: Connection) -> None:
    """A second client in its own process: publishes the body it is sent, answers the time."""
    while (job := pipe.recv()) is not None:
        path, body = job
        began = time.monotonic()
        asyncio.run(publish(port, [(path, body)], 1))
        pipe.send(time.monotonic() - began)


async def fetch_while(
    port: int, pipe: Connection | None, seconds: float
) -> tuple[list[float], float]:
    """FETCH latencies (ms) of /small.md until the publisher answers (or for ``seconds``), and
    the publisher's answer (its PUBLISH's seconds)."""
    loop = asyncio.get_running_loop()
    waiting = loop.run_in_executor(None, pipe.recv) if pipe is not None else None
    end = time.monotonic() + seconds
    latencies = []
    async with Pool(Trust(insecure=True)) as pool:
        fetch = wire.Request("FETCH", "/small.md", {}, b"")
        await request(pool, port, fetch)  # the connection is up before timing starts
        while (waiting is None and time.monotonic() < end) or (waiting and not waiting.done()):
            began = time.perf_counter()
            if (await request(pool, port, fetch)).status != "ok":
                raise RuntimeError("FETCH /small.md failed")
            latencies.append((time.perf_counter() - began) * 1000)
    return latencies, (await waiting if waiting is not None else 0.0)


def stall_rounds(base: Path, big: bytes, rounds: int) -> tuple[list[float], list[float], float]:
    import multiprocessing

    work = Path(tempfile.mkdtemp(prefix="bench-board-stall-", dir=base))
    (work / "root").mkdir()
    tokens = token_file(work / "tokens.toml", TOKEN)
    quiet: list[float] = []
    busy: list[float] = []
    took: list[float] = []
    with child_server(work / "root", tokens=tokens) as server:
        asyncio.run(publish(server.port, [("/small.md", b"# Small\n\nA short page.\n" * 20)], 1))
        context = multiprocessing.get_context("spawn")
        parent, end = context.Pipe()
        proc = context.Process(target=_publisher, args=(server.port, end))
        proc.start()
        parent.send(("/warm.md", b"# Warm\n\nup\n"))
        parent.recv()
        try:
            for index in range(rounds):
                quiet += asyncio.run(fetch_while(server.port, None, 1.5))[0]
                parent.send((f"/big-{index}.md", big))
                latencies, seconds = asyncio.run(fetch_while(server.port, parent, 0))
                busy += latencies
                took.append(seconds)
        finally:
            parent.send(None)
            proc.join(10)
    shutil.rmtree(work)
    return quiet, busy, median(took)


def big_document(base: Path, size: int = 1_000_000) -> bytes:
    """About 1 MB of real markdown: the release notes, then other pages, cut at a line."""
    first = base / "release-notes.md"
    files = [first] + [f for f in sorted(base.rglob("*.md")) if f != first]
    out = bytearray()
    for file in files:
        out += file.read_bytes() + b"\n"
        if len(out) >= size:
            break
    return bytes(out[: out.rfind(b"\n", 0, size) + 1])


# -- 4: empty root, exec to the first answer --------------------------------------------------

ECHO = """
import asyncio, sys
from pathlib import Path
from support.echo import start_echo
async def main():
    await start_echo(Path(sys.argv[1]), Path(sys.argv[2]), port=int(sys.argv[3]))
    await asyncio.Event().wait()
asyncio.run(main())
"""


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def answered(port: int, cafile: Path, limit: float) -> float:
    """Poll with FETCH until something answers; the time it did (monotonic)."""
    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration

    config = QuicConfiguration(is_client=True, alpn_protocols=["mark"], server_name="localhost")
    config.load_verify_locations(cafile=str(cafile))
    deadline = time.monotonic() + limit
    asyncio.get_running_loop().set_exception_handler(lambda *_: None)  # refused handshakes

    async def once() -> None:
        async with connect("127.0.0.1", port, configuration=config) as connection:
            reader, writer = await connection.create_stream()
            writer.write(b"FETCH /index.md\n")
            writer.write_eof()
            await reader.read()

    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(once(), 0.15)
            return time.monotonic()
        except (TimeoutError, ConnectionError, OSError):
            continue
    raise RuntimeError(f"nothing answered on udp/{port} within {limit} s")


def cold_start(kind: str, base: Path, cert: Path, key: Path) -> tuple[float, int, int]:
    """Exec one server on an empty root: seconds to the first answer, RSS 0.5 s and
    ``WARMED_S`` later (ours imports what documents need once idle after answering)."""
    perfkit.installed_bytecode()
    port = free_port()
    root = Path(tempfile.mkdtemp(prefix="empty-", dir=base))
    state = Path(tempfile.mkdtemp(prefix="state-", dir=base))
    shutil.copy(cert, state / cert.name)
    shutil.copy(key, state / key.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
    env["PYTHONPATH"] = str(perfkit.REPO / "tests")
    if kind == "echo":
        command = [sys.executable, "-c", ECHO, str(cert), str(key), str(port)]
    else:
        command = [sys.executable, "-m", "markproto.server.cli", "serve", "--root", str(root)]
        command += ["--state-dir", str(state), "--host", "127.0.0.1", "--port", str(port)]
    began = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        seconds = asyncio.run(answered(port, cert, 60.0)) - began
        time.sleep(0.5)
        rss = perfkit.rss_bytes(proc.pid)
        time.sleep(WARMED_S - 0.5)
        warmed = perfkit.rss_bytes(proc.pid)
    finally:
        proc.terminate()
        proc.wait(15)
    return seconds, rss, warmed


# -- the report --------------------------------------------------------------------------------


def mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


def per_byte(value: int, run: Growth) -> str:
    return f"{mib(value - run.empty)} ({(value - run.empty) / run.body:.2f}x)"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def growth_rows(runs: list[Growth], label: str = "") -> tuple[list[list[str]], float]:
    """The rows of part 1's table, and the worst cell's growth per body byte."""
    rows = []
    worst = 0.0
    for run in runs:
        assert run.restored is not None and run.built is not None
        cells = [run.peak, run.settled, run.restored.peak, run.restored.settled]
        cells += [run.built.peak, run.built.settled]
        worst = max(worst, *((c - run.empty) / run.body for c in cells))
        rows.append(
            [
                f"{label}{run.name}",
                f"{run.body / 1e6:.1f} MB",
                mib(run.empty),
                mib(run.warm - run.empty),
                f"{run.publish_s:.0f} s",
                *(per_byte(c, run) for c in cells),
            ]
        )
    return rows, worst


ATTRIBUTED = (
    "snapshot",
    "catalog",
    "body index",
    "link index",
    "version cache",
    "response cache",
    "watch log",
)


def attribution_table(runs: list[Growth]) -> str:
    """Where each run's settled growth went, per body byte (the server process alone)."""
    rows = []
    names = [*ATTRIBUTED, "other Python objects", "free in pymalloc's arenas", "the rest"]
    for run in runs:
        parts = run.parts or {}
        structures = sum(parts.get(name, 0) for name in ATTRIBUTED)
        used = parts.get("pymalloc used", 0) + parts.get("glibc used", 0)
        pools = parts.get("pymalloc arenas", 0) - parts.get("pymalloc used", 0)
        cells = [parts.get(name, 0) for name in ATTRIBUTED]
        cells += [used - structures, pools, parts.get("rss", 0) - used - pools]
        rows.append(
            [run.name, mib(parts.get("rss", 0)), f"{parts.get('modules', 0):+d}"]
            + [f"{cell / run.body:.2f}" for cell in cells]
        )
    return table(["copies", "settled growth", "modules", *names], rows)


def part1(runs: list[Growth], before: list[Growth]) -> list[str]:
    rows, worst = growth_rows(runs)
    if before:
        rows = growth_rows(before, "main ")[0] + rows
    growth_table = table(
        [
            "copies",
            "bodies",
            "RSS empty",
            "first tiny PUBLISH",
            "publish",
            "peak",
            "settled",
            "restored: peak",
            "restored: settled",
            "full build: peak",
            "full build: settled",
        ],
        rows,
    )
    return [
        "**1. RSS growth per body byte.** The server and its index workers together (every"
        " process below the bench, from /proc), as growth over the empty server (settled after"
        " one answered FETCH: ours has then imported what documents and LOOKUP need, `app.WARM`,"
        " about 2.5 MiB that main imports with the first PUBLISH and LOOKUP instead): peak sampled"
        f" every 50 ms (and the server's VmHWM), settled {SETTLE_S:.0f} s after the last write"
        " (the server trims after two quiet 2 s intervals). x1 and x5 are one PUBLISH at a time,"
        " x20 eight in flight (a burst: the server holds the index work back and catches up"
        " once writes pause; the publish time is until the last answer, the peak and settled"
        " figures include the catch-up, awaited by a LOOKUP). Then a restart on the same root"
        " (the index saved at stop restored), and a restart with the saved index removed"
        " (every body analysed again); each restart waits for a body-mode LOOKUP to answer"
        " before settling. The notes row is a vault of short notes instead (`support.vaults`:"
        " about 540 bytes each, frontmatter with two tags, a wikilink and a relative link, eight"
        " folders), the shape of most Obsidian vaults, where what a document costs whatever its"
        " size (its snapshot and catalog entries, outline, links) outweighs its words."
        + (
            " Rows marked main are the server of `$BOARD_BASELINE_PYTHON` (main's checkout),"
            " measured by this bench in the same run just before."
            if before
            else ""
        ),
        "",
        growth_table,
        "",
        f"Target <= {GROWTH_TARGET}x body bytes: {verdict(worst <= GROWTH_TARGET)} (worst cell"
        f" {worst:.2f}x). The full-build peak would count index worker processes (each a"
        " Python interpreter of about 50 MiB, which a cgroup's MemoryMax must hold too), but a"
        " build starts them only past `build.WORKER_BYTES` (64 MiB) of bodies: none here.",
        "",
        "Where the settled growth of the publish goes, per body byte (the server process, settled"
        " minus a settled empty server's, from inside it: each structure's objects counted once,"
        " in the order of the columns; other Python objects are the rest of what pymalloc and"
        " glibc have handed out, mostly the code of the modules imported since the empty start"
        " (modules: how many); then the free blocks and pools of pymalloc's arenas (an arena is"
        " handed back only when all of it is free); the rest is glibc's free memory still"
        " resident and what is not malloc's at all: shared libraries' pages, thread stacks).",
        "",
        attribution_table(runs),
    ]


def notes_run(base: Path, count: int, before: dict[str, int] | None = None) -> Growth:
    """Part 1 on the vault of ``count`` short notes (``support.vaults``), one PUBLISH at a
    time."""
    from support.vaults import small_notes

    run = growth_run(base, small_notes(count), 0, 1, before)
    run.label = f"{count:,} notes"
    return run


def baseline(python: str, copies: str, notes: int) -> list[Growth]:
    """Part 1 measured with another interpreter (main's checkout), read back as JSON."""
    import json

    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [python, __file__, "--parts", "1", "--copies", copies, "--notes", str(notes)]
        command += ["--json", out.name]
        subprocess.run(command, check=True, env={**os.environ, "BOARD_BASELINE_PYTHON": ""})
        data = json.loads(Path(out.name).read_text())
    runs = []
    for item in data:
        restored, built = item.pop("restored"), item.pop("built")
        run = Growth(**item)
        run.restored = Restart(**{**restored, "ready": tuple(restored["ready"])})
        run.built = Restart(**{**built, "ready": tuple(built["ready"])})
        runs.append(run)
    return runs


def splice(parts: dict[str, list[str]], head: list[str]) -> str:
    """The section with the parts measured now in place of the old ones (the rest kept)."""
    old = perfkit.DOC.read_text() if perfkit.DOC.exists() else ""
    found = re.search(r"^## Board budget \(measured\)\n(.*?)(?=^## |\Z)", old, re.S | re.M)
    blocks: dict[str, str] = {}
    if found:
        pieces = re.split(r"^(?=\*\*\d\. )", found.group(1), flags=re.M)
        blocks = {piece[2]: piece.strip() for piece in pieces[1:]}
    for key, lines in parts.items():
        blocks[key] = "\n".join(lines).strip()
    measured = ", ".join(sorted(parts))
    kept = ", ".join(sorted(blocks.keys() - parts.keys()))
    note = f"; {kept} as an earlier run measured them" if kept else ""
    return "\n".join(
        [*head, f"Parts measured in this run: {measured}{note}.", ""]
        + [blocks[key] + "\n" for key in sorted(blocks)]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", default="1,5,20", help="corpus copies, comma-separated")
    parser.add_argument(
        "--notes", type=int, default=2000, help="part 1's vault of short notes (0: none)"
    )
    parser.add_argument("--alloc-copies", default="1,5", help="part 3's corpus copies")
    parser.add_argument("--rounds", type=int, default=5, help="publish rounds of the 1 MB document")
    parser.add_argument("--starts", type=int, default=5, help="interleaved empty-root starts")
    parser.add_argument(
        "--parts",
        default=os.environ.get("BOARD_PARTS", ",".join(PARTS)),
        help="parts to run, comma-separated (default $BOARD_PARTS, else all); the others keep"
        " their figures in docs/PERFORMANCE.md",
    )
    parser.add_argument("--json", help="write part 1's figures here instead of the docs")
    args = parser.parse_args()
    wanted = set(args.parts.split(","))
    base_dir = corpus()
    if base_dir is None:
        print("board: skipped, the shared FastAPI corpus (../shared/corpus/fastapi-docs) is absent")
        return 0
    before: list[Growth] = []
    if "1" in wanted and (python := os.environ.get("BOARD_BASELINE_PYTHON")):
        before = baseline(python, args.copies, args.notes)
    began = time.monotonic()
    load_before = os.getloadavg()
    files = sorted(base_dir.rglob("*.md"))
    base = Path(tempfile.mkdtemp(prefix="bench-board-"))
    parts: dict[str, list[str]] = {}
    runs: list[Growth] = []
    if "1" in wanted:
        empty = empty_attribution(base)
        for n in [int(c) for c in args.copies.split(",")]:
            docs = docs_of(files, base_dir, n)
            runs.append(growth_run(base, docs, n, 8 if n >= 20 else 1, empty))
            print(f"x{n}: done at {time.monotonic() - began:.0f} s", file=sys.stderr)
        if args.notes:
            runs.append(notes_run(base, args.notes, empty))
            print(f"notes: done at {time.monotonic() - began:.0f} s", file=sys.stderr)
        if args.json:
            import json

            Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in runs]))
            shutil.rmtree(base, ignore_errors=True)
            return 0
        parts["1"] = part1(runs, before)
    if "3" in wanted:
        parts["3"] = part3(base, files, base_dir, [int(c) for c in args.alloc_copies.split(",")])
        print(f"allocator: done at {time.monotonic() - began:.0f} s", file=sys.stderr)
    if "2" in wanted:
        parts["2"] = part2(base, base_dir, args.rounds)
        print(f"stalls: done at {time.monotonic() - began:.0f} s", file=sys.stderr)
    if "4" in wanted:
        parts["4"] = part4(base, args.starts)
    if "5" in wanted:
        parts["5"] = part5(base, docs_of(files, base_dir, 5), runs)
    shutil.rmtree(base, ignore_errors=True)
    elapsed = time.monotonic() - began
    load_after = os.getloadavg()
    head = [
        perfkit.stamp("board"),
        f"1-minute load average {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end"
        f"; the parts run took {elapsed / 60:.1f} min. One run of each (no medians but the"
        " start-up times), so compare rows of one run. Every server runs from written bytecode,"
        " as an installed package does (`perfkit.installed_bytecode`, before the first start).",
        "",
    ]
    for key in sorted(parts):
        print("\n".join(parts[key]) + "\n")
    write_section("Board budget (measured)", splice(parts, head))
    return 0


def part2(base: Path, base_dir: Path, rounds: int) -> list[str]:
    big = big_document(base_dir)
    quiet, busy, publish_s = stall_rounds(base, big, rounds)
    q99, b99 = percentile(quiet, 99), percentile(busy, 99)
    stall_table = table(
        ["rounds", "FETCHes", "p50 ms", "p99 ms", "max ms"],
        [
            [name, len(v), f"{median(v):.1f}", f"{percentile(v, 99):.1f}", f"{max(v):.1f}"]
            for name, v in (("quiet (baseline)", quiet), ("while publishing 1 MB", busy))
        ],
    )
    return [
        "**2. A second client's FETCH while a 1 MB document is published.** A small document"
        f" fetched back to back on one connection; {rounds} rounds alternate 1.5 s quiet"
        f" with the PUBLISH of a new {len(big) / 1e6:.2f} MB document (the release notes and"
        f" other pages) from another process (each took {publish_s:.2f} s, median).",
        "",
        stall_table,
        "",
        f"Target p99 <= {P99_TARGET_MS:.0f} ms while publishing: {verdict(b99 <= P99_TARGET_MS)}"
        f" ({b99:.1f} ms, {b99 / q99:.1f}x the quiet p99). A body over"
        " `content.INLINE_INDEX_MAX` (16 KiB) is analysed on the backlog's thread, not the event"
        " loop, so the loop waits at most a GIL switch interval at a time; the quiet rounds"
        " include the tail of that analysis after each publish.",
    ]


def part3(base: Path, files: list[Path], base_dir: Path, scales: list[int]) -> list[str]:
    rows = []
    for copies in scales:
        docs = docs_of(files, base_dir, copies)
        body = sum(len(b) for _, b in docs)
        runs = [allocator_run(base, docs, setting) for setting in ALLOCATORS]
        now = runs[0]
        for setting, run in zip(ALLOCATORS, runs, strict=True):
            rows.append(
                [
                    f"x{copies}",
                    setting.name,
                    mib(run.empty),
                    f"{(run.peak - run.empty) / body:.2f}x",
                    f"{(run.settled - run.empty) / body:.2f}x",
                    mib(run.settled),
                    f"{run.settled / now.settled:.2f}",
                    f"{run.publish_s:.1f} s",
                    f"{run.cpu_s:.1f} s",
                ]
            )
    alloc_table = table(
        [
            "copies",
            "allocator",
            "RSS empty",
            "peak growth",
            "settled growth",
            "settled RSS",
            "vs now",
            "publish",
            "server CPU",
        ],
        rows,
    )
    return [
        "**3. Allocator settings.** The corpus published one PUBLISH at a time on a fresh server"
        f" for each setting (its empty RSS after one FETCH and the warm-up), settled"
        f" {SETTLE_S:.0f} s later; growth per body byte as in part 1, the settled RSS whole"
        " (what the board holds), the publish's wall time and the server's CPU seconds for it."
        " glibc has no setting that turns `malloc_trim` off, and the server skips its own arena"
        " limit and mmap threshold only when the environment sets them, so the rows without"
        " them patch `markproto.server.memory.trim` / `tune` to no-ops in the server process."
        " glibc's thread caches are off unless `GLIBC_TUNABLES` sets them (`mark-server serve`"
        " restarts itself with `memory.TUNABLES` otherwise; the bench starts every server in that"
        " environment), so the rows with them, glibc defaults among them, set glibc's default"
        " count; `PYTHONMALLOC=malloc` is likewise set in the server's environment as it starts.",
        "",
        alloc_table,
    ]


def part4(base: Path, count: int) -> list[str]:
    from markproto.server.app import WARM_DELAY  # here: main's checkout (part 1) has none

    cert, key, _ = devcert.ensure(base / "cert")
    starts: dict[str, list[tuple[float, int, int]]] = {"ours": [], "echo": []}
    for _ in range(count):
        for kind in starts:
            starts[kind].append(cold_start(kind, base, cert, key))
    ours_s, ours_rss, ours_warm = (median(list(c)) for c in zip(*starts["ours"], strict=True))
    echo_s, echo_rss, echo_warm = (median(list(c)) for c in zip(*starts["echo"], strict=True))
    start_table = table(
        ["server", "exec to first answer", "RSS 0.5 s later", f"RSS {WARMED_S:.0f} s later"],
        [
            ["bare aioquic echo (baseline)", f"{echo_s:.2f} s", mib(echo_rss), mib(echo_warm)],
            ["`mark-server serve`", f"{ours_s:.2f} s", mib(ours_rss), mib(ours_warm)],
            ["ratio", f"{ours_s / echo_s:.2f}x", f"{ours_rss / echo_rss:.2f}x",
             f"{ours_warm / echo_warm:.2f}x"],
        ],
    )  # fmt: skip
    return [
        "**4. Empty root, exec to the first answered FETCH.** `python -m markproto.server.cli"
        " serve` against `tests/support/echo.py` run by `python -c`, the same interpreter, the"
        " certificate already in the state directory for both, polled with a FETCH every"
        f" 150 ms at most; median of {count} interleaved starts.",
        "",
        start_table,
        "",
        f"Target <= {START_TARGET}x: time {verdict(ours_s / echo_s <= START_TARGET)}, RSS"
        f" {verdict(max(ours_rss / echo_rss, ours_warm / echo_warm) <= START_TARGET)}. Ours"
        " imports what a document's analysis and LOOKUP need (`app.WARM`, about 36 modules)"
        f" {WARM_DELAY:.0f} s after its first request (the start-up build done), on a thread, so"
        " the later column holds them: the memory it keeps once it serves documents.",
    ]


def part5(base: Path, docs5: list[tuple[str, bytes]], runs: list[Growth]) -> list[str]:
    """Index-ready rates on the x5 root (part 1's, when it ran x5)."""
    x5 = next((r for r in runs if r.copies == 5), None) or growth_run(base, docs5, 5, 1)
    assert x5.restored is not None and x5.built is not None
    # the record's "mb" counts the bodies analysed (none when all is restored): rate of all bodies
    rmb = bmb = round(x5.body / 1e6, 1)
    rs, bs = x5.restored.ready[1], x5.built.ready[1]
    restored_rate = rmb / rs if rs else 0.0
    built_rate = bmb / bs if bs else 0.0
    fetched_ms = x5.restored.first_fetch_s * 1000
    building = "while" if x5.restored.first_fetch_s < rs else "after"
    ready_table = table(
        ["start-up on the x5 root", "bodies", "index ready", "MB/s", "vs full build"],
        [
            ["full build (no saved index, baseline)", f"{bmb} MB", f"{bs:.2f} s",
             f"{built_rate:.1f}", "1.00"],
            ["restored from the saved index", f"{rmb} MB", f"{rs:.2f} s", f"{restored_rate:.1f}",
             f"{restored_rate / built_rate:.1f}" if built_rate else "-"],
        ],
    )  # fmt: skip
    return [
        "**5. Index ready at start-up (x5 root)**, from the server's `lookup index built` record"
        f" (after a restart that restores it, the first FETCH was answered {fetched_ms:.0f} ms"
        f" after binding, {building} the index was being restored; the x5 bodies are"
        f" {x5.body / 1e6:.1f} MB, the rate is over all of them).",
        "",
        ready_table,
        "",
        f"Target >= {READY_TARGET:.0f} MB/s: restored {verdict(restored_rate >= READY_TARGET)},"
        f" full build {verdict(built_rate >= READY_TARGET)}.",
    ]


if __name__ == "__main__":
    sys.exit(main())
