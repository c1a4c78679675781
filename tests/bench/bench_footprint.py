"""What a running server costs: resident memory and startup time, for sizing a small board.

Starts `mark-server serve` as a child process on two roots: the seeded first-run root, and the
FastAPI docs published 20 times under different prefixes (about 3,100 documents, 38 MB of
markdown). For each: the time from process start until it prints "markproto serving ... on udp"
(median of a few starts), VmRSS and VmHWM from /proc at idle, then again after a read load of
FETCHes and body-mode LOOKUPs (the body index is the server's largest structure), the CPU time the
idle server spends over a minute (its periodic store scans run every 30 s), and whether SIGTERM
ends it with status 0. During startup it also samples the whole process tree (the server and the
worker processes that analyze bodies for the body index), whose peak is what a cgroup's
MemoryMax must hold. deploy/README.md quotes these numbers and sizes MemoryMax from that peak.

    /work/venv/bin/python tests/bench/bench_footprint.py [--copies 20] [--starts 3] [--idle 65]

With ``--live`` it measures instead what a user sees as documents arrive: an empty server, the
FastAPI corpus published ``--live-copies`` times (default 5) over QUIC, one PUBLISH at a time,
then a read load; the server's RSS growth per body byte published, and again after a restart on
the same root. The same run measures the server as it was (``--baseline`` names a checkout of
it, run with that checkout's packages first on ``PYTHONPATH``), median of ``--starts`` runs, and
writes the ``Memory after live publish`` section of docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import perfkit
from support import SHARED
from support.server import (
    DEFAULT_TOKENS,
    WRITE_TOKEN,
    ServerProcess,
    start_server_process,
    write_tokens,
)

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import metadata, wire
from markproto.server import seed
from markproto.server.storage.layout import Layout
from markproto.server.storage.store import Store

CORPUS = SHARED / "corpus" / "fastapi-docs"
TICK = os.sysconf("SC_CLK_TCK")
QUERIES = [
    "dependency injection",
    "path parameters",
    "oauth2 password bearer",
    "background tasks",
    "cors middleware",
    "response model",
    "query parameter validation",
    "websocket",
    "testing client",
    "sql database session",
]


@dataclass(frozen=True, slots=True)
class Sample:
    root: str
    documents: int
    megabytes: float
    start_s: float
    idle_rss: int
    idle_hwm: int
    load_rss: int
    load_hwm: int
    requests: int
    idle_cpu: float
    exit_status: int
    start_tree_peak: int


def publish_corpus(root: Path, copies: int) -> tuple[int, int]:
    """Publish every markdown file of the corpus ``copies`` times (copy k under ``/c<k>``)."""
    store = Store(root)
    files = sorted(CORPUS.rglob("*.md"))
    count = size = 0
    for copy in range(copies):
        for file in files:
            path = f"/c{copy:02d}/{file.relative_to(CORPUS).as_posix()}"
            body = file.read_bytes()
            store.publish(path, body, metadata.with_type_default(path, {}), expected=None)
            count += 1
            size += len(body)
    return count, size


def memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()[0] if value.split() else "0"
    return int(fields["VmRSS"]), int(fields["VmHWM"])


def tree_rss(root: Path) -> int:
    """VmRSS in KiB of the `mark-server` serving ``root`` plus its child processes (0 if none)."""
    procs: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        procs[int(entry.name)] = (int(stat[1]), cmdline)
    server = {pid for pid, (_, cmd) in procs.items() if "serve" in cmd and str(root) in cmd}
    members = server | {pid for pid, (ppid, _) in procs.items() if ppid in server}
    total = 0
    for pid in members:
        try:
            total += memory(pid)[0]
        except (OSError, KeyError):
            continue
    return total


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / TICK


async def read_load(port: int, paths: list[str], fetches: int) -> int:
    """Sequential FETCHes of random documents, then every query in body and catalog mode."""
    rng = random.Random(7)
    requests = [wire.Request("FETCH", rng.choice(paths), {}, b"") for _ in range(fetches)]
    for query in QUERIES:
        for mode in ("body", "catalog"):
            requests.append(wire.Request("LOOKUP", "/", {"query": query, "match": mode}, b""))
    async with Pool(Trust(insecure=True)) as pool:
        for request in requests:
            response = wire.parse_response(
                await pool.request(f"127.0.0.1:{port}", wire.emit_request(request))
            )
            if response.status != "ok":
                raise RuntimeError(f"{request.verb} {request.path}: {response.status}")
    return len(requests)


def start(root: Path, state: Path) -> tuple[ServerProcess, float, int]:
    """Start a server; return it, its time to ready, and the process tree's peak RSS meanwhile."""
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(root))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.monotonic()
    try:
        server = start_server_process(root, state, timeout=120.0)
    finally:
        done.set()
        sampler.join()
    return server, time.monotonic() - began, peak


def measure(
    name: str, root: Path, state: Path, *, starts: int, fetches: int, idle: float
) -> Sample:
    paths = [path for kind, path in Layout(root).walk() if kind == "doc"]
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())
    times, peaks = [], []
    for _ in range(starts - 1):
        server, seconds, peak = start(root, state)
        times.append(seconds)
        peaks.append(peak)
        server.terminate()
    server, seconds, peak = start(root, state)
    times.append(seconds)
    peaks.append(peak)
    try:
        time.sleep(2.0)
        rest = memory(server.proc.pid)
        count = asyncio.run(read_load(server.port, paths, fetches))
        time.sleep(0.5)
        loaded = memory(server.proc.pid)
        before = cpu_seconds(server.proc.pid)
        time.sleep(idle)
        idle_cpu = (cpu_seconds(server.proc.pid) - before) / idle * 100 if idle else 0.0
        status = server.terminate()
    finally:
        if server.proc.poll() is None:
            server.kill()
    return Sample(
        name,
        len(paths),
        size / 1e6,
        statistics.median(times),
        *rest,
        *loaded,
        count,
        idle_cpu,
        status,
        max(peaks),
    )


@dataclass(frozen=True, slots=True)
class Live:
    """One live-publish run: RSS in KiB at each point, body bytes published."""

    bytes_published: int
    empty: int
    published: int
    after_reads: int
    restarted: int


async def publish_all(port: int, docs: list[tuple[str, bytes]]) -> None:
    async with Pool(Trust(insecure=True)) as pool:
        for path, body in docs:
            request = wire.Request("PUBLISH", path, {"auth": WRITE_TOKEN}, body)
            response = wire.parse_response(
                await pool.request(f"127.0.0.1:{port}", wire.emit_request(request))
            )
            if response.status != "created":
                raise RuntimeError(f"PUBLISH {path}: {response.status}")


def live_run(base: Path, copies: int, env: dict[str, str]) -> Live:
    root, state = base / "root", base / "state"
    root.mkdir()
    state.mkdir()
    tokens = write_tokens(state / "tokens.toml", DEFAULT_TOKENS)
    files = sorted(CORPUS.rglob("*.md"))
    docs = [
        (f"/c{copy}/{file.relative_to(CORPUS).as_posix()}", file.read_bytes())
        for copy in range(copies)
        for file in files
    ]
    server = start_server_process(root, state, tokens_file=tokens, env=env, timeout=120.0)
    try:
        time.sleep(1.0)
        empty = memory(server.proc.pid)[0]
        asyncio.run(publish_all(server.port, docs))
        time.sleep(1.0)
        published = memory(server.proc.pid)[0]
        paths = [path for path, _ in docs]
        asyncio.run(read_load(server.port, paths, 300))
        time.sleep(0.5)
        after_reads = memory(server.proc.pid)[0]
    finally:
        server.terminate()
    server = start_server_process(root, state, tokens_file=tokens, env=env, timeout=120.0)
    try:
        asyncio.run(read_load(server.port, [docs[0][0]], 1))  # the index is built
        time.sleep(1.0)
        restarted = memory(server.proc.pid)[0]
    finally:
        server.terminate()
    return Live(sum(len(body) for _, body in docs), empty, published, after_reads, restarted)


LIVE_NOTES = """\
Issue 13's target is growth within 1.5x the body bytes. The body index's own part is measured in
the LOOKUP section (tracemalloc); the rest of the live growth is the snapshot, the catalog, the
store's caches and what the allocator keeps after transient peaks. After a restart the index is
built in worker processes (`MARK_INDEX_WORKERS`, default 2) whose results are unpickled in the
server; the last row builds it inline instead, which shows how much of the restart's growth is
the start-up path's rather than the index's (publishing is inline in every row).
"""


def live(copies: int, starts: int, baseline: Path | None) -> None:
    variants: dict[str, dict[str, str]] = {}
    if baseline is not None:
        shim = Path(tempfile.mkdtemp(prefix="bench-baseline-")) / "markproto"
        shim.mkdir()
        for part in ("protocol", "server", "client", "durable"):
            (shim / part).symlink_to(baseline / part)
        variants["as it was (baseline)"] = {"PYTHONPATH": str(shim.parent)}
    variants["now"] = {}
    variants["now, restart indexing inline (MARK_INDEX_WORKERS=0)"] = {"MARK_INDEX_WORKERS": "0"}
    rows = []
    for label, env in variants.items():
        runs = []
        for _ in range(starts):
            with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
                runs.append(live_run(Path(tmp), copies, env))
        body = runs[0].bytes_published

        def per_byte(field: str, runs: list[Live] = runs, body: int = body) -> str:
            growth = statistics.median(getattr(r, field) - r.empty for r in runs) * 1024
            return f"{growth / 2**20:.1f} MiB ({growth / body:.2f}x)"

        rows.append(
            [
                label,
                f"{statistics.median(r.empty for r in runs) / 1024:.0f} MiB",
                per_byte("published"),
                per_byte("after_reads"),
                per_byte("restarted"),
            ]
        )
    lines = [
        perfkit.stamp("footprint --live"),
        "",
        f"A server on an empty root, then the FastAPI docs published {copies} times"
        f" over QUIC one PUBLISH at a time ({body / 1e6:.1f} MB of bodies), then 320 reads"
        " (FETCH, LOOKUP in both modes), then a restart on the same root. RSS growth over the"
        f" empty server, as MiB and per body byte published; median of {starts} runs each.",
        "",
        perfkit.table(
            ["server", "RSS empty", "after publishing", "after reads", "after a restart"], rows
        ),
        "",
        LIVE_NOTES,
    ]
    print("\n".join(lines))
    perfkit.write_section("Memory after live publish", "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=20, help="corpus copies in the large root")
    parser.add_argument("--starts", type=int, default=3, help="starts per root (median time)")
    parser.add_argument("--fetches", type=int, default=300, help="FETCHes in the load phase")
    parser.add_argument("--idle", type=float, default=65.0, help="seconds of idle CPU sampling")
    parser.add_argument("--live", action="store_true", help="memory after live publish instead")
    parser.add_argument("--live-copies", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="a checkout of the server as it was")
    args = parser.parse_args()
    if not CORPUS.is_dir():
        sys.exit(f"{CORPUS} is absent: the shared corpus lives beside the checkout")
    if args.live:
        live(args.live_copies, args.starts, args.baseline)
        return

    with tempfile.TemporaryDirectory(prefix="bench-footprint-") as tmp:
        base = Path(tmp)
        seeded = base / "seeded"
        seeded.mkdir()
        seed.seed(seeded)
        corpus = base / "corpus"
        corpus.mkdir()
        began = time.monotonic()
        count, size = publish_corpus(corpus, args.copies)
        print(
            f"published {count} documents ({size / 1e6:.1f} MB of markdown) through Store.publish"
            f" in {time.monotonic() - began:.1f} s",
            file=sys.stderr,
        )
        options = {"starts": args.starts, "fetches": args.fetches, "idle": args.idle}
        samples = [
            measure("seeded", seeded, base / "seeded-state", **options),
            measure(f"fastapi x{args.copies}", corpus, base / "corpus-state", **options),
        ]

    mib = 1024
    print(
        f"\n{'root':<14} {'docs':>6} {'on disk':>8} {'start':>7} {'idle RSS':>9} {'idle HWM':>9}"
        f" {'load RSS':>9} {'load HWM':>9} {'reqs':>5} {'idle CPU':>8} {'exit':>5}"
        f" {'start peak (tree)':>18}"
    )
    for s in samples:
        print(
            f"{s.root:<14} {s.documents:>6} {s.megabytes:>6.1f}MB {s.start_s:>6.2f}s"
            f" {s.idle_rss / mib:>6.1f}MiB {s.idle_hwm / mib:>6.1f}MiB"
            f" {s.load_rss / mib:>6.1f}MiB {s.load_hwm / mib:>6.1f}MiB {s.requests:>5}"
            f" {s.idle_cpu:>7.2f}% {s.exit_status:>5} {s.start_tree_peak / mib:>15.1f}MiB"
        )


if __name__ == "__main__":
    main()
