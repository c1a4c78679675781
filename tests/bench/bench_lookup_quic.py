"""LOOKUP over QUIC: round-trip latency of catalog and body queries against ~10,000 sections.

The FastAPI docs corpus is published several times under different prefixes (5 copies, about
11,000 sections) into a fresh root, served by the real server in its own process on CPU 0; the
real client (`Pool`, one connection) sends each query of ``questions_fastapi.json`` in turn from
CPU 1, one request at a time. The baseline is ``FETCH /health`` on the same connection,
interleaved with the queries: the round trip with no work behind it. Server CPU per request comes
from /proc.

    tests/bench/run lookup_quic   # or: python tests/bench/bench_lookup_quic.py [--copies 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import perfkit
from support import SHARED

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import mdoutline, wire
from markproto.protocol.metadata import with_type_default
from markproto.server.storage.store import Store

CORPUS = SHARED / "corpus" / "fastapi-docs"
QUESTIONS = Path(__file__).with_name("questions_fastapi.json")


def publish_corpus(root: Path, copies: int) -> tuple[int, int]:
    """Publish the corpus ``copies`` times (copy k under ``/c<k>``); (documents, sections)."""
    store = Store(root)
    files = sorted(CORPUS.rglob("*.md"))
    sections = 0
    for copy in range(copies):
        for file in files:
            path = f"/c{copy}/{file.relative_to(CORPUS)}"
            body = file.read_bytes()
            store.publish(path, body, with_type_default(path, {}), None)
            sections += len(mdoutline.own_sections(body.decode()))
    return copies * len(files), sections


async def run(port: int, cert: Path, pid: int, queries: list[str], repeats: int) -> dict[str, Any]:
    authority = f"127.0.0.1:{port}"
    kinds: dict[str, list[bytes]] = {
        "FETCH /health (baseline)": [wire.emit_request(wire.Request("FETCH", "/health", {}, b""))],
        "LOOKUP catalog": [
            wire.emit_request(wire.Request("LOOKUP", "/", {"query": q}, b"")) for q in queries
        ],
        "LOOKUP body": [
            wire.emit_request(wire.Request("LOOKUP", "/", {"query": q, "match": "body"}, b""))
            for q in queries
        ],
    }
    latency: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, float] = dict.fromkeys(kinds, 0.0)
    rows: dict[str, list[int]] = {kind: [] for kind in kinds}
    async with Pool(Trust(cafile=str(cert))) as pool:
        for request in kinds["LOOKUP body"][:5]:  # warm-up: connection, caches
            await pool.request(authority, request)
        for _ in range(repeats):
            for i in range(len(queries)):
                for kind, requests in kinds.items():
                    data = requests[i % len(requests)]
                    before = perfkit.cpu_seconds(pid)
                    started = time.perf_counter()
                    response = wire.parse_response(await pool.request(authority, data))
                    latency[kind].append((time.perf_counter() - started) * 1000)
                    cpu[kind] += perfkit.cpu_seconds(pid) - before
                    if response.status != "ok":
                        raise AssertionError(f"{kind}: {response.status} {response.body[:200]!r}")
                    rows[kind].append(int(response.meta.get("matches", "0")))
    return {"latency": latency, "cpu": cpu, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=5, help="corpus copies (2,236 sections each)")
    parser.add_argument("--repeats", type=int, default=5, help="passes over the query list")
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args()
    if not CORPUS.exists():
        raise SystemExit(f"{CORPUS} is absent: the corpus lives in ../shared beside the checkout")
    perfkit.pin(perfkit.CLIENT_CPU)
    queries = [q["query"] for q in json.loads(QUESTIONS.read_text())["questions"]]
    root = Path(tempfile.mkdtemp(prefix="bench-lookup-")) / "root"
    root.mkdir()
    docs, sections = publish_corpus(root, args.copies)
    started = time.perf_counter()
    with perfkit.child_server(root) as child:
        startup = time.perf_counter() - started
        rss = perfkit.rss_bytes(child.pid)
        result = asyncio.run(run(child.port, child.cert, child.pid, queries, args.repeats))

    out = []
    for kind, values in result["latency"].items():
        n = len(values)
        out.append(
            [
                kind,
                n,
                f"{perfkit.percentile(values, 50):.2f}",
                f"{perfkit.percentile(values, 99):.2f}",
                f"{max(values):.2f}",
                f"{result['cpu'][kind] / n * 1000:.2f}",
                f"{sum(result['rows'][kind]) / n:.1f}",
            ]
        )
    headers = ["request", "n", "p50 ms", "p99 ms", "max ms", "server CPU ms/req", "rows/answer"]
    text = perfkit.table(headers, out)
    print(text)
    if args.no_doc:
        return
    notes = f"""
{docs} documents, {sections:,} sections (the FastAPI docs, {args.copies} copies), served by the
real server in its own process (CPU 0; started and indexed in {startup:.1f} s, RSS
{rss / 2**20:.0f} MiB); the real client (`Pool`, one connection, CPU 1) sends the
{len(queries)} queries of `questions_fastapi.json` {args.repeats} times each, one at a time
(default limit 10), interleaved with the `FETCH /health` baseline. Latency is the client-side
round trip; server CPU is from /proc at 10 ms resolution, averaged over all requests.
"""
    perfkit.write_section("LOOKUP over QUIC", f"{perfkit.stamp('lookup_quic')}\n{notes}\n{text}\n")


if __name__ == "__main__":
    main()
