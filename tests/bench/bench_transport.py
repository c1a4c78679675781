"""Our transport (sync echo handler) against the bare aioquic echo baseline, same payload, same run.

Both servers run in their own processes pinned to CPU 0, measured one at a time in alternating
rounds; the client runs here, pinned to CPU 1 where the machine has one. Scenarios: (a) one
connection keeping 50 streams in flight, (b) 50 connections each doing sequential requests. Reports
req/s and the server's CPU per request (utime + stime from /proc, steadier than req/s when the
Python client is the bottleneck), and the ratio ours/echo.

    /work/venv/bin/python tests/bench/bench_transport.py [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.echo import start_echo
from support.quicclient import QuicClient, connect

from markproto.server import devcert, transport

PAYLOAD = b"FETCH /docs/tutorial/first-steps.md\n---\nif-none-match: " + b"a" * 64 + b"\n---\n"
PAYLOAD += b"x" * (300 - len(PAYLOAD))
IN_FLIGHT = 50
CONNECTIONS = 50
SCENARIOS = {  # name: (connections, requests in flight per connection)
    f"(a) 1 connection, {IN_FLIGHT} streams in flight": (1, IN_FLIGHT),
    f"(b) {CONNECTIONS} connections, sequential": (CONNECTIONS, 1),
}
TICK = os.sysconf("SC_CLK_TCK")


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


def _server_process(kind: str, state: str, max_streams: int, pipe: Connection) -> None:
    """Serve until the parent says stop; the port goes back through ``pipe``."""
    _pin(0)

    async def run() -> None:
        cert, key, _ = devcert.ensure(Path(state))
        if kind == "ours":
            server = await transport.serve(
                lambda request, peer: request,
                host="127.0.0.1",
                port=0,
                certfile=cert,
                keyfile=key,
                responses=transport.Responses(b"oversize", b"timeout", b"internal"),
                max_streams=max_streams,
            )
            pipe.send(server.port)
        else:
            server, port = await start_echo(cert, key)  # type: ignore[assignment]
            pipe.send(port)
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
        server.close()

    asyncio.run(run())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def _load(clients: list[QuicClient], workers: int, stop: asyncio.Event) -> int:
    """Run ``workers`` sequential request loops per connection until ``stop``; count answers."""
    done = 0

    async def worker(client: QuicClient) -> None:
        nonlocal done
        while not stop.is_set():
            assert await client.request(PAYLOAD) == PAYLOAD
            done += 1

    await asyncio.gather(*(worker(c) for c in clients for _ in range(workers)))
    return done


async def _measure(
    port: int, pid: int, scenario: tuple[int, int], seconds: float
) -> tuple[float, float]:
    """(req/s, server CPU µs per request) over ``seconds``, after a short warm-up."""
    connections, workers = scenario
    clients = [await connect("127.0.0.1", port) for _ in range(connections)]
    loop = asyncio.get_running_loop()
    try:
        warm = asyncio.Event()
        loop.call_later(min(0.5, seconds / 4), warm.set)
        await _load(clients, workers, warm)
        stop = asyncio.Event()
        cpu, start = _cpu_seconds(pid), loop.time()
        loop.call_later(seconds, stop.set)
        done = await _load(clients, workers, stop)
        elapsed = loop.time() - start
        return done / elapsed, (_cpu_seconds(pid) - cpu) / done * 1e6
    finally:
        for client in clients:
            client.hang_up()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per cell (median reported)")
    parser.add_argument(
        "--max-streams",
        type=int,
        default=transport.DEFAULT_MAX_STREAMS,
        help="our per-connection stream cap (the echo baseline has aioquic's 128)",
    )
    args = parser.parse_args()
    _pin(1)
    state = tempfile.mkdtemp(prefix="bench-transport-")
    context = multiprocessing.get_context("spawn")
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    servers = {}
    for kind in ("echo", "ours"):
        parent, child = context.Pipe()
        proc = context.Process(
            target=_server_process, args=(kind, state, args.max_streams, child), daemon=True
        )
        proc.start()
        servers[kind] = proc, parent, parent.recv()
    try:
        for _ in range(args.rounds):  # interleaved, so drift on the machine hits both alike
            for name, scenario in SCENARIOS.items():
                for kind, (proc, _, port) in servers.items():
                    assert proc.pid is not None
                    cell = asyncio.run(_measure(port, proc.pid, scenario, args.seconds))
                    results.setdefault((name, kind), []).append(cell)
    finally:
        for proc, parent, _ in servers.values():
            parent.send("stop")
            proc.join(10)

    print(
        f"payload {len(PAYLOAD)} bytes, {args.rounds} x {args.seconds:g} s per cell, medians;"
        f" our stream cap {args.max_streams}"
    )
    print(f"{'scenario':40} {'server':6} {'req/s':>9} {'server us/req':>14}")
    for name in SCENARIOS:
        cells = {}
        for kind in ("echo", "ours"):
            rates, cpus = zip(*results[(name, kind)], strict=True)
            cells[kind] = statistics.median(rates), statistics.median(cpus)
            print(f"{name:40} {kind:6} {cells[kind][0]:9.0f} {cells[kind][1]:14.1f}")
        rate = cells["ours"][0] / cells["echo"][0]
        cpu = cells["ours"][1] / cells["echo"][1]
        print(f"{'':40} {'ratio':6} {rate:9.2f} {cpu:14.2f}  (ours / echo)")


if __name__ == "__main__":
    main()
