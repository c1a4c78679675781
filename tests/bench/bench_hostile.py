"""Hostile clients: a well-behaved client's FETCH latency with no attack and during each attack,
in the same run, and what each attacker got back.

The real server runs in its own process (CPU 0) with ``--rate-limit 50`` (burst 100) and its
default caps (32 streams per connection, 10 s request timeout, 30 s idle timeout). Each attack
runs in its own process from 127.0.0.1; the honest client runs here from 127.0.0.2 (another
address to the rate limiter) and sends one FETCH every 50 ms (20/s). Both share CPU 1.

- slow senders: 8 connections x 40 streams (beyond the cap of 32) sending the start of a request
  and then a byte a second, never a FIN; streams the server resets are replaced at once;
- unused streams: 50 connections each opening all 32 streams its credit allows with one byte and
  then going silent;
- oversized requests: one connection sending a 1 MiB + 60 KiB PUBLISH (refused by the parser) and
  a 2 MiB one (refused by the transport as it arrives), back to back;
- flood: one connection sending 1,000 FETCH per second.

    tests/bench/run hostile       # or: python tests/bench/bench_hostile.py [--seconds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection
from pathlib import Path

import perfkit
from reliability import workloads
from reliability.workloads import LoadReport, honest, seed_load_root

BUDGET_MS = 50.0
"""The honest client's p99 budget during an attack (the no-attack p99 is a few ms)."""

Attack = Callable[[int, Path, float], Coroutine[object, object, Counter[str]]]
ATTACKS: dict[str, Attack] = {
    "slow senders": lambda port, cert, s: workloads.slow_loris(port, cert, s, connections=8),
    "unused streams": lambda port, cert, s: workloads.unused(port, cert, s, connections=50),
    "oversized requests": workloads.oversized,
    "flood 1,000 req/s": workloads.flood,
}


def _attack_main(name: str, port: int, cert: str, seconds: float, pipe: Connection) -> None:
    perfkit.pin(perfkit.CLIENT_CPU)
    pipe.send(asyncio.run(ATTACKS[name](port, Path(cert), seconds)))


def attacked(
    name: str | None, child: perfkit.Child, seconds: float
) -> tuple[LoadReport, Counter[str]]:
    """The honest client's report over ``seconds`` while attack ``name`` runs (None: none). The
    attack starts a second early and outlasts the honest client: it is under way all along."""
    if name is None:
        return asyncio.run(honest(child.port, child.cert, seconds)), Counter()
    context = multiprocessing.get_context("spawn")
    parent, end = context.Pipe()
    proc = context.Process(
        target=_attack_main, args=(name, child.port, str(child.cert), seconds + 2.0, end)
    )
    proc.start()

    async def run() -> LoadReport:
        await asyncio.sleep(1.0)
        return await honest(child.port, child.cert, seconds)

    report = asyncio.run(run())
    outcomes: Counter[str] = parent.recv()
    proc.join(30)
    return report, outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="honest client time per phase")
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args()
    perfkit.pin(perfkit.CLIENT_CPU)
    root = Path(tempfile.mkdtemp(prefix="bench-hostile-")) / "root"
    root.mkdir()
    seed_load_root(root)
    rows = []
    failed = []
    with perfkit.child_server(root, rate_limit=50.0, rate_burst=100) as child:
        phases: list[str | None] = [None, *ATTACKS, None]
        for name in phases:
            cpu, started = perfkit.cpu_seconds(child.pid), time.monotonic()
            report, outcomes = attacked(name, child, args.seconds)
            cpu = (perfkit.cpu_seconds(child.pid) - cpu) / (time.monotonic() - started)
            values = report.latency.get("FETCH", [])
            p99 = perfkit.percentile(values, 99) if values else float("inf")
            ok = report.statuses.get("FETCH", Counter())["ok"]
            label = name or "no attack"
            if name is not None and (p99 > BUDGET_MS or report.errors):
                failed.append(label)
            rows.append(
                [
                    label,
                    f"{ok}/{len(values) + len(report.errors)}",
                    f"{perfkit.percentile(values, 50):.1f}" if values else "-",
                    f"{p99:.1f}",
                    f"{max(values):.1f}" if values else "-",
                    f"{cpu:.0%}",
                    perfkit.counts(outcomes) or "-",
                ]
            )
            print(rows[-1], flush=True)
        time.sleep(1.0)  # the attackers' CONNECTION_CLOSE frames land
        stats = child.ask("stats")
    headers = [
        "phase",
        "honest ok",
        "honest p50 ms",
        "honest p99 ms",
        "honest max ms",
        "server CPU",
        "attacker got",
    ]
    text = perfkit.table(headers, rows)
    verdict = "all within budget" if not failed else "over budget: " + ", ".join(failed)
    summary = (
        f"Honest client p99 budget during an attack: {BUDGET_MS:g} ms: {verdict}. After the"
        f" attacks: {stats['connections']} connections open, partials {stats['partials']},"
        f" running {stats['running']}, buffered {stats['buffered']} bytes."
    )
    print(text)
    print(summary)
    if not args.no_doc:
        notes = f"""
The real server in its own process (CPU 0) with `--rate-limit 50` (burst 100) and its default
caps: 32 streams per connection, 10 s request timeout, 30 s idle timeout, 64 MiB of request
buffers in all. Each attack runs in its own process from 127.0.0.1, starting a second before
the honest client and ending after it; the honest client (127.0.0.2, so the limiter tells it
apart) sends one FETCH of a small document every 50 ms for {args.seconds:g} s. Both share CPU 1.
Slow senders: 8 connections x 40 streams (8 over the cap) sending a request's first line and
then a byte a second, never a FIN, each reset stream replaced. Unused streams: 50 connections
each opening its 32 streams with one byte, then silent. Oversized: back-to-back PUBLISH of
1 MiB + 60 KiB metadata (parser refusal) and of 2 MiB (transport refusal while arriving).
Flood: 1,000 FETCH/s on one connection. "Attacker got" counts how each attacker stream ended.
"""
        perfkit.write_section(
            "Hostile clients", f"{perfkit.stamp('hostile')}\n{notes}\n{text}\n\n{summary}\n"
        )
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
