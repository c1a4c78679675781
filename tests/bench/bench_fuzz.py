"""Fuzzing at length: over a million Hypothesis inputs across every parser of untrusted bytes
(requests, version files, responses and their bodies, WATCH streams: nothing but
``ProtocolError`` subclasses may escape; markdown bodies: the section splitter and link extraction
raise nothing), then random and mutated
requests against the live server, each answer required to parse as a well-formed response.

The parser inputs (`reliability.fuzzing`) are random bytes and valid requests / version files
with bit flips, truncations, deletions and inserted grammar tokens (fences, line ends, YAML
indicators). They run in chunks of fresh Hypothesis engines with recorded seeds, two processes at
a time; a failure is shrunk and printed with its seed. The live fuzz sends its requests 32 at a
time on one connection to the real server in its own process (with a write token, so some
writes land).

    tests/bench/run fuzz          # or: python tests/bench/bench_fuzz.py [--inputs 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import multiprocessing
import tempfile
import time
from collections import Counter
from pathlib import Path

import perfkit
from hypothesis import HealthCheck, Phase, given, seed, settings
from reliability.fuzzing import (
    MARKDOWN,
    REQUESTS,
    RESPONSES,
    VERSION_FILES,
    WATCH_STREAMS,
    fuzz_live,
    read_markdown,
    read_response,
    read_stream,
)
from support.quicclient import connect

from markproto.protocol import storefmt, wire
from markproto.protocol.errors import ProtocolError

CHUNK = 25_000
TOKEN = "bench-fuzz-token"
TARGETS = {
    "wire.parse_request": (REQUESTS, wire.parse_request),
    "storefmt.parse_version": (VERSION_FILES, storefmt.parse_version),
    "wire.parse_response + bodies.parse_*": (RESPONSES, read_response),
    "watch.WatchReader": (WATCH_STREAMS, read_stream),
    "mdoutline.headings + links.extract": (MARKDOWN, read_markdown),
}


def chunk(target: str, chunk_seed: int, n: int) -> int:
    """Run ``n`` Hypothesis inputs against ``target``; return how many ran (raises on a bug)."""
    strategy, parse = TARGETS[target]
    ran = 0

    @seed(chunk_seed)
    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def check(data: bytes) -> None:
        nonlocal ran
        ran += 1
        with contextlib.suppress(ProtocolError):
            parse(data)

    check()
    return ran


def fuzz_parsers(inputs: int) -> list[list[object]]:
    per_target = inputs // len(TARGETS)
    jobs = [
        (target, k, min(CHUNK, per_target - start))
        for target in TARGETS
        for k, start in enumerate(range(0, per_target, CHUNK))
    ]
    ran = dict.fromkeys(TARGETS, 0)
    failures: dict[str, list[str]] = {target: [] for target in TARGETS}
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        futures = {pool.submit(chunk, *job): job for job in jobs}
        for future in concurrent.futures.as_completed(futures):
            target, chunk_seed, _ = futures[future]
            try:
                ran[target] += future.result()
            except Exception as exc:
                failures[target].append(f"seed {chunk_seed}: {type(exc).__name__}: {exc}")
    elapsed = time.perf_counter() - started
    print(f"parsers: {sum(ran.values()):,} inputs in {elapsed:.0f} s")
    return [
        [
            target,
            f"{ran[target]:,}",
            "; ".join(failures[target]) or "none",
        ]
        for target in TARGETS
    ]


def fuzz_server(requests: int) -> tuple[list[list[object]], list[str]]:
    base = Path(tempfile.mkdtemp(prefix="bench-fuzz-"))
    root = base / "root"
    root.mkdir()
    tokens = perfkit.token_file(base / "tokens.toml", TOKEN)
    with perfkit.child_server(root, tokens=tokens) as child:

        async def run() -> tuple[Counter[str], list[str]]:
            client = await connect("127.0.0.1", child.port, cafile=child.cert, idle_timeout=120)
            try:
                return await fuzz_live(client, requests, TOKEN, seed=11)
            finally:
                client.hang_up()

        started = time.perf_counter()
        statuses, problems = asyncio.run(run())
        elapsed = time.perf_counter() - started
        alive = child.proc.is_alive()
    print(f"live server: {requests:,} requests in {elapsed:.0f} s")
    rows: list[list[object]] = [
        ["live server (random and mutated requests)", f"{requests:,}", perfkit.counts(statuses)]
    ]
    if not alive:
        problems.append("the server process died")
    return rows, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="parser inputs in total")
    parser.add_argument("--requests", type=int, default=50_000, help="live-server requests")
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args()
    perfkit.pin(perfkit.CLIENT_CPU)
    rows = fuzz_parsers(args.inputs)
    live_rows, problems = fuzz_server(args.requests)
    failed = any(row[2] != "none" for row in rows) or problems
    text = perfkit.table(["target", "inputs", "unexpected exceptions"], rows)
    live = perfkit.table(["target", "requests", "answers (all parsed)"], live_rows)
    summary = f"Live-server problems (unparseable, unknown status, internal error): {len(problems)}"
    summary += f" (first: {problems[:3]})." if problems else "."
    print(text)
    print(live)
    print(summary)
    if not args.no_doc:
        notes = f"""
Hypothesis, {CHUNK:,} inputs per engine (fresh engine and recorded seed per chunk, two processes);
inputs are random bytes and valid requests / version files mutated with bit flips, truncations,
deletions and inserted grammar tokens (`tests/reliability/fuzzing.py`). Anything but a
`ProtocolError` subclass is a failure. Then {args.requests:,} random and mutated requests (all
verbs and junk verbs, odd paths, random metadata, the write token half the time) to the real
server in its own process, 32 in flight on one connection; every answer must parse with
`wire.parse_response`, carry a known status and never be `internal error`.
"""
        body = f"{perfkit.stamp('fuzz')}\n{notes}\n{text}\n\n{live}\n\n{summary}\n"
        perfkit.write_section("Fuzzing", body)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
