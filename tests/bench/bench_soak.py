"""Soak: 20,000 sequential requests on one connection, then 20,000 more; the server's RSS must not
grow by more than 5% between the two halves, and no per-stream state may pile up.

The real server runs in its own process (CPU 0) over a small content root; one raw QUIC
connection (CPU 1) sends a rotation of reads one at a time (`workloads.SOAK_ROTATION`): FETCH of
a document, FETCH of a missing one (logged at INFO each time), LIST, VERSIONS, LOOKUP in both
modes and the health check. RSS is read from /proc after a warm-up, after the first half and
after the second; at the end the transport's per-stream tables and aioquic's stream table are
read inside the server.

    tests/bench/run soak          # or: python tests/bench/bench_soak.py [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path

import perfkit
from reliability.workloads import seed_load_root, sequential
from support.quicclient import connect

WARM_UP = 2_000
LIMIT = 0.05
"""Allowed RSS growth from the end of the first half to the end of the second."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per half")
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args()
    perfkit.pin(perfkit.CLIENT_CPU)
    root = Path(tempfile.mkdtemp(prefix="bench-soak-")) / "root"
    root.mkdir()
    seed_load_root(root)
    with perfkit.child_server(root, request_timeout=30.0) as child:
        rss: list[int] = []

        async def run() -> tuple[list[tuple[str, float]], dict[str, object]]:
            client = await connect("127.0.0.1", child.port, idle_timeout=120.0)
            statuses: Counter[str] = Counter()
            marks = []
            try:
                started = time.perf_counter()
                for label, n in [
                    ("after warm-up", WARM_UP),
                    ("after first half", args.requests),
                    ("after second half", args.requests),
                ]:
                    await sequential(client, n, statuses)
                    rss.append(perfkit.rss_bytes(child.pid))
                    marks.append((label, time.perf_counter() - started))
                await asyncio.sleep(0.5)  # the last acknowledgements land; finished streams go
                stats: dict[str, object] = child.ask("stats")
            finally:
                client.hang_up()
            stats["statuses"] = perfkit.counts(statuses)
            return marks, stats

        marks, stats = asyncio.run(run())

    growth = (rss[2] - rss[1]) / rss[1]
    rows = [
        [label, f"{bytes_ / 2**20:.1f}", f"{elapsed:.1f}"]
        for (label, elapsed), bytes_ in zip(marks, rss, strict=True)
    ]
    text = perfkit.table(["point", "server RSS MiB", "elapsed s"], rows)
    verdict = "PASS" if growth <= LIMIT else "FAIL"
    summary = (
        f"RSS growth over the second half: {growth:+.2%} (limit {LIMIT:.0%}): {verdict}.\n"
        f"First half: {(rss[1] - rss[0]) / rss[0]:+.2%}. Statuses: {stats.pop('statuses')}.\n"
        "Server state at the end, summed over connections: "
        + ", ".join(f"{k} {v}" for k, v in stats.items() if k != "rss")
        + "."
    )
    print(text)
    print(summary)
    if not args.no_doc:
        notes = f"""
{WARM_UP:,} warm-up requests, then {args.requests:,} + {args.requests:,} sequential requests on
one QUIC connection to the real server in its own process (CPU 0; request log at INFO to a file):
a rotation of FETCH, FETCH of a missing document, LIST, VERSIONS, LOOKUP catalog and body, and
the health check. `partials`, `running` and `discarding` are the transport's per-stream tables;
`quic_streams` and `quic_queue` are aioquic's; the connection is still open when they are read.
"""
        perfkit.write_section("Soak", f"{perfkit.stamp('soak')}\n{notes}\n{text}\n\n{summary}\n")
    if growth > LIMIT:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
