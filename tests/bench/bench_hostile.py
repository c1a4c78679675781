"""Hostile clients: a well-behaved client's FETCH latency under each attack against its latency with
no attack, measured in alternating rounds in the same run, and what each attacker got.

The real server runs in its own process with its defaults: rate limit 50/s (burst 100), 32
streams per connection, 10 s request timeout, 30 s idle timeout. The well-behaved client runs
here, from 127.0.0.2, and sends one FETCH every 50 ms, one at a time. Each attack runs in a
process of its own at the lowest priority (nice 19), so an attacker's own CPU use delays its
process, not the measuring one (a real attacker is on another machine); each attack comes from an
address of its own (tests/reliability/attacks.py). No process is pinned: on a machine other work
shares, a server pinned to one CPU waits for it while the other may be idle.

- flood: one address, 4 connections x 32 streams, a new FETCH as soon as one is answered, up to
  2,000 a second;
- oversized: 2 connections uploading 1 MiB + 1 byte (with 60 KiB of metadata), 1.5 MiB and
  2.5 MiB PUBLISH back to back;
- unused: 200 streams that send one byte and never finish, each replaced when reset;
- slow: a slow sender, 32 streams of a request's first lines and then a byte a second;
- idle: 20 connections that handshake and say nothing;
- all: every one of them at once.

A round measures each attack once, right after a phase with no attack; each attack's p99 is
compared with the p99 of the phases just before it, over all rounds. The attack starts a second
once the server holds all its connections, plus a second, and ends after it; before the next phase
the server must hold nothing of it (every attacker connection closed). Handshakes are not part of
any attack measured here.

    tests/bench/run hostile    # or: python tests/bench/bench_hostile.py [--seconds 10 --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import tempfile
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path

import perfkit
from reliability import attacks
from reliability.attacks import lasting
from reliability.workloads import LoadReport, seed_load_root

LIMIT = 3.0
"""The well-behaved client's p99 under an attack may be at most this many times its p99 without."""
KINDS = [*attacks.ATTACKS, "all"]
RSS_SLACK = 128 << 20
"""RSS bounded: the peak under attack is at most this above the RSS before the first attack (the
server's 64 MiB of request buffers, and as much again for QUIC state)."""


CONNECTIONS = {"flood": 4, "oversized": 2, "unused": 7, "slow": 1, "idle": 20}
"""How many connections each attack holds: it is under way once the server has them all."""
CONNECTIONS["all"] = sum(CONNECTIONS.values())


def _attack_main(name: str, port: int, cert: str, stop: Event, pipe: Connection) -> None:
    os.nice(19)
    attack = attacks.everything if name == "all" else attacks.ATTACKS[name]
    pipe.send(asyncio.run(attack(port, Path(cert), lambda _: stop.is_set())))


class Peak:
    """The highest RSS of a process, sampled every 0.1 s on a thread until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid, self.most = pid, perfkit.rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.most = max(self.most, perfkit.rss_bytes(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def phase(
    name: str | None, child: perfkit.Child, seconds: float
) -> tuple[LoadReport, Counter[str], float, int]:
    """The well-behaved client's report over ``seconds`` while attack ``name`` runs (None: none),
    what the attacker got, the server's CPU share and its peak RSS."""
    peak = Peak(child.pid)
    cpu, started = perfkit.cpu_seconds(child.pid), time.monotonic()
    outcomes: Counter[str] = Counter()
    if name is None:
        report = asyncio.run(attacks.honest(child.port, child.cert, lasting(seconds)))
    else:
        context = multiprocessing.get_context("spawn")
        parent, end = context.Pipe()
        stop = context.Event()
        proc = context.Process(
            target=_attack_main, args=(name, child.port, str(child.cert), stop, end)
        )
        proc.start()
        deadline = time.monotonic() + 60
        while child.ask("stats")["connections"] < CONNECTIONS[name]:
            if time.monotonic() > deadline:
                raise SystemExit(f"the {name} attack did not connect")
            time.sleep(0.1)
        time.sleep(1.0)  # under way: its first streams are in
        report = asyncio.run(attacks.honest(child.port, child.cert, lasting(seconds)))
        stop.set()
        outcomes = parent.recv()
        proc.join(60)
    cpu = (perfkit.cpu_seconds(child.pid) - cpu) / (time.monotonic() - started)
    most = peak.stop()
    deadline = time.monotonic() + 60
    while child.ask("stats")["connections"] and time.monotonic() < deadline:
        time.sleep(0.2)  # the attackers' CONNECTION_CLOSE frames land
    return report, outcomes, cpu, most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per phase")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every attack")
    parser.add_argument("--only", nargs="+", choices=KINDS, help="these attacks alone")
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args()
    kinds = args.only or KINDS
    root = Path(tempfile.mkdtemp(prefix="bench-hostile-")) / "root"
    root.mkdir()
    seed_load_root(root)
    calm: dict[str, list[float]] = {kind: [] for kind in KINDS}
    hit: dict[str, list[float]] = {kind: [] for kind in KINDS}
    failed: dict[str, int] = Counter()
    cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
    got: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
    peaks: list[int] = []
    with perfkit.child_server(root, rate_limit=50.0, rate_burst=100, pinned=False) as child:
        phase(None, child, 2.0)  # warm-up: caches, first connections
        before = perfkit.rss_bytes(child.pid)
        for round_ in range(1, args.rounds + 1):
            for kind in kinds:
                base, _, _, _ = phase(None, child, args.seconds)
                report, outcomes, share, most = phase(kind, child, args.seconds)
                calm[kind] += base.latency.get("FETCH", [])
                hit[kind] += report.latency.get("FETCH", [])
                failed[kind] += len(report.errors) + len(base.errors)  # not ok, or no answer
                cpu[kind].append(share)
                got[kind].update(outcomes)
                peaks.append(most)
                ratio = perfkit.percentile(hit[kind], 99) / perfkit.percentile(calm[kind], 99)
                print(f"round {round_} {kind}: p99 ratio so far {ratio:.2f}", flush=True)
        after = child.ask("stats")
    rows, over = [], []
    for kind in kinds:
        p99_calm, p99_hit = perfkit.percentile(calm[kind], 99), perfkit.percentile(hit[kind], 99)
        ratio = p99_hit / p99_calm
        if ratio > LIMIT or failed[kind]:
            over.append(kind)
        rows.append(
            [
                kind,
                f"{len(hit[kind]) - failed[kind]}/{len(hit[kind])}",
                f"{perfkit.percentile(calm[kind], 50):.1f}",
                f"{p99_calm:.1f}",
                f"{perfkit.percentile(hit[kind], 50):.1f}",
                f"{p99_hit:.1f}",
                f"{ratio:.2f}",
                f"{max(hit[kind]):.1f}",
                f"{sum(cpu[kind]) / len(cpu[kind]):.0%}",
                perfkit.counts(got[kind]) or "-",
            ]
        )
    headers = [
        "attack",
        "ok under attack",
        "p50 ms, no attack",
        "p99 ms, no attack",
        "p50 ms, attack",
        "p99 ms, attack",
        "p99 ratio",
        "max ms, attack",
        "server CPU",
        "attackers got (all rounds)",
    ]
    text = perfkit.table(headers, rows)
    bounded = max(peaks) - before <= RSS_SLACK
    verdict = "every p99 within it, no request failed" if not over else "over: " + ", ".join(over)
    mib = 1 << 20
    summary = (
        f"Limit: p99 under attack at most {LIMIT:g}x the p99 without, and no failed request:"
        f" {verdict}. Server RSS {before / mib:.0f} MiB before the first attack, at most"
        f" {max(peaks) / mib:.0f} MiB under attack ({'bounded' if bounded else 'NOT bounded'}:"
        f" limit +{RSS_SLACK // mib} MiB), {after['rss'] / mib:.0f} MiB after; after the attacks"
        f" {after['connections']} connections, {after['buffered']} bytes buffered, partial"
        f" {after['partial']}, queued {after['queued']}, running {after['running']}."
    )
    print(text)
    print(summary)
    if not args.no_doc and not args.only:
        notes = __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0]
        load = os.getloadavg()
        perfkit.write_section(
            "Hostile clients",
            f"{perfkit.stamp('hostile')} Load average at the end: {load[0]:.1f}, {load[1]:.1f},"
            f" {load[2]:.1f}; {args.rounds} rounds of {args.seconds:g} s phases.\n\n{notes}\n\n"
            f"{text}\n\n{summary}\n",
        )
    if over or not bounded:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
