"""Load: 50 concurrent clients for 60 s mixing FETCH, LIST, LOOKUP and PUBLISH against the real
server; zero errors other than expected conflicts, latency per verb, server RSS bounded.

The server runs in its own process (CPU 0) with a token file, request log at INFO to a file and
the rate limiter off (every client comes from 127.0.0.1, so a per-IP limit would throttle the
whole load; the limiter is measured under Hostile clients). Each client is its own `Pool` (its own
connection) on CPU 1 and sends one request at a time: 55% FETCH, 15% LIST, 20% LOOKUP (half in
body mode), 10% PUBLISH to one of 8 shared documents with the version it last saw as
``expected-version``, so clients race and lose with ``conflict``. Server RSS is sampled every
second.

    tests/bench/run load          # or: python tests/bench/bench_load.py [--clients 50 --seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import perfkit
from reliability.workloads import LoadReport, mixed_load, seed_load_root, summary_rows

TOKEN = "bench-load-token"


async def run(child: perfkit.Child, clients: int, seconds: float) -> tuple[LoadReport, list[int]]:
    samples: list[int] = []

    async def sample() -> None:
        while True:
            samples.append(perfkit.rss_bytes(child.pid))
            await asyncio.sleep(1.0)

    sampler = asyncio.create_task(sample())
    try:
        report = await mixed_load(
            f"127.0.0.1:{child.port}", child.cert, clients=clients, seconds=seconds, token=TOKEN
        )
    finally:
        sampler.cancel()
    samples.append(perfkit.rss_bytes(child.pid))
    return report, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args()
    perfkit.pin(perfkit.CLIENT_CPU)
    base = Path(tempfile.mkdtemp(prefix="bench-load-"))
    root = base / "root"
    root.mkdir()
    seed_load_root(root)
    tokens = perfkit.token_file(base / "tokens.toml", TOKEN)
    with perfkit.child_server(root, tokens=tokens) as child:
        cpu, client_cpu = perfkit.cpu_seconds(child.pid), time.process_time()
        report, rss = asyncio.run(run(child, args.clients, args.seconds))
        cpu = perfkit.cpu_seconds(child.pid) - cpu
        client_cpu = time.process_time() - client_cpu
        stats = child.ask("stats")

    text = perfkit.table(
        ["verb", "requests", "p50 ms", "p99 ms", "statuses"],
        summary_rows(report, perfkit.percentile),
    )
    mib = [r / 2**20 for r in rss]
    third = max(1, len(mib) // 3)
    summary = (
        f"{report.total:,} requests in {args.seconds:g} s ({report.total / args.seconds:,.0f}"
        f" req/s), server CPU {cpu / args.seconds:.0%} of one core, client CPU"
        f" {client_cpu / args.seconds:.0%}; errors:"
        f" {len(report.errors)}"
        + (f" (first: {report.errors[:3]})" if report.errors else "")
        + f".\nServer RSS: {mib[0]:.1f} MiB at the start, max {max(mib):.1f} MiB, max over the"
        f" last third {max(mib[-third:]):.1f} MiB against {max(mib[:third]):.1f} MiB over the"
        f" first third, {mib[-1]:.1f} MiB at the end. After the load: {stats['connections']}"
        f" connections, partial {stats['partial']}, running {stats['running']}."
    )
    print(text)
    print(summary)
    if not args.no_doc:
        notes = f"""
{args.clients} clients for {args.seconds:g} s against the real server in its own process
(CPU 0, token file, request log at INFO to a file, rate limiter off: all clients share one IP).
Each client is its own `Pool` connection on CPU 1 sending one request at a time: 55% FETCH of 40
documents, 15% LIST, 20% LOOKUP (half body mode), 10% PUBLISH to one of 8 shared documents with
`expected-version` set to the last version the client saw (conflicts are the expected outcome of
those races). Latency is client-side: with one Python process driving 50 connections the client
is the bottleneck (see the CPU figures), so it mostly measures the client's own queueing.
"""
        perfkit.write_section("Load", f"{perfkit.stamp('load')}\n{notes}\n{text}\n\n{summary}\n")
    if report.errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
