"""The link graph (issue 14) at scale: the FastAPI docs published 20 times (~3,100 documents).

Measures, in one run, and writes the ``Links`` section of docs/PERFORMANCE.md:

* what finding links costs the per-document analysis: ``analyze`` over one copy of the corpus
  with link extraction and with it stubbed out, interleaved, best of several runs;
* the link index's memory (tracemalloc: what it alone keeps, the anchors it shares with the body
  index aside), per link and against the body index's, beside its own ``memory()`` estimate;
* latency in-process through the dispatcher (parse, read auth, answer, emit), p50 and p90 over
  the corpus's documents: backlinks (``match: links``, ``direction: incoming``), and explore's
  two link requests (outgoing and incoming, 10 each) and all four of its requests (with its
  FETCH and LIST);
* a depth-2 graph of the hub page (the document with the most internal links): the requests and
  time of one ``depth: 2`` LOOKUP, against the reference's way, a crawl that FETCHes every
  document reached and finds its links itself, level by level;
* the same backlinks and depth-2 graph over QUIC from a client to a server in its own process.

    tests/bench/run links   # or: python tests/bench/bench_links.py [--copies 20]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import perfkit
from bench_retrieval import corpus, loaded
from support.exchange import PEER, request, seed

from markproto.client import Client, Pool, Trust
from markproto.client.graph import gather
from markproto.protocol import links, wire
from markproto.protocol.bodies import parse_links
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.search import analysis
from markproto.server.search.bodyindex import BodyIndex
from markproto.server.search.catalog import Entry
from markproto.server.search.links import LinkIndex
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content

RUNS = 5


class _NoLinks:
    """The analysis with link extraction stubbed out: the baseline of its cost."""

    def __init__(self, body: object) -> None:
        self.ids: list[str] = []

    def section(self, *args: object) -> None:
        pass

    def links(self) -> list[links.Link]:
        return []


def analysis_cost(bodies: Sequence[bytes]) -> tuple[float, float, float]:
    """MB/s of ``analyze`` with links and without, best of ``RUNS`` interleaved runs."""
    megabytes = sum(map(len, bodies)) / 1e6
    best = {"with": float("inf"), "without": float("inf")}
    real = analysis.Extractor
    for _ in range(RUNS):
        for name, extractor in (("with", real), ("without", _NoLinks)):
            analysis.Extractor = extractor  # type: ignore[misc, assignment]
            started = time.process_time()
            for body in bodies:
                analysis.analyze(body)
            best[name] = min(best[name], time.process_time() - started)
    analysis.Extractor = real  # type: ignore[misc]
    return megabytes / best["with"], megabytes / best["without"], megabytes


def index_memory(docs: Sequence[tuple[str, bytes]]) -> tuple[int, int, int, int]:
    """(bytes the link index alone keeps, links, its ``memory()``, the body index's bytes)."""
    gc.collect()
    tracemalloc.start()
    index = LinkIndex()
    shared = 0
    for path, body in docs:
        found = analysis.analyze(body)
        index.apply(path, found, {})
        outline = found.outline
        shared += sum(sys.getsizeof(getattr(outline, f.name)) for f in dataclasses.fields(outline))
        del found
    gc.collect()
    own = tracemalloc.get_traced_memory()[0] - shared
    tracemalloc.stop()
    count = sum(len(index.outbound(path)) for path in index.paths())
    entries = [
        (Entry.build(p, loaded(p, b).meta, loaded(p, b).modified, analysis.analyze(b).facts), b)
        for p, b in docs
    ]
    gc.collect()
    tracemalloc.start()
    bodies = BodyIndex()
    for entry, body in entries:
        bodies.apply(entry, "", analysis.analyze(body))
    gc.collect()
    body_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return own, count, index.memory(), body_bytes


def timed(job: Callable[[], object], repeats: int = 1) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        job()
    return (time.perf_counter() - started) / repeats


async def in_process(root: Path, paths: Sequence[str], hub: str) -> dict[str, object]:
    lookup = Lookup()
    content = Content.open(root, [lookup])
    dispatcher = Dispatcher(Context(content, lookup=lookup))

    async def send(data: bytes) -> wire.Response:
        out = dispatcher.handle(data, PEER)
        return wire.parse_response(out if isinstance(out, bytes) else await out)

    def links_of(path: str, **keys: str) -> bytes:
        return request("LOOKUP", path, {"match": "links", **keys})

    samples: dict[str, list[float]] = {"backlinks": [], "explore links": [], "explore": []}
    for path in paths:
        folder = path.rsplit("/", 1)[0] + "/"
        backlinks = links_of(path, direction="incoming")
        out10 = links_of(path, direction="outgoing", limit="10")
        in10 = links_of(path, direction="incoming", limit="10")
        fetch, listing = request("FETCH", path), request("LIST", folder, {"page-size": "11"})
        for name, batch in (
            ("backlinks", [backlinks]),
            ("explore links", [out10, in10]),
            ("explore", [fetch, out10, in10, listing]),
        ):
            started = time.perf_counter()
            for data in batch:
                assert (await send(data)).status == "ok"
            samples[name].append((time.perf_counter() - started) * 1e3)
    result: dict[str, object] = {
        name: (perfkit.percentile(v, 50), perfkit.percentile(v, 90)) for name, v in samples.items()
    }

    graph_times, pages = [], 0
    for _ in range(RUNS):
        started = time.perf_counter()
        cursor, pages, rows = "", 0, 0
        while True:
            keys = {"direction": "outgoing", "depth": "2", "limit": "1000"}
            answer = await send(links_of(hub, **keys, **({"cursor": cursor} if cursor else {})))
            pages += 1
            rows += len(parse_links(answer.body)[0])
            cursor = answer.meta.get("next-cursor", "")
            if not cursor:
                break
        graph_times.append((time.perf_counter() - started) * 1e3)
    crawl_times, fetches, reached = [], 0, 0
    for _ in range(RUNS):
        started = time.perf_counter()
        fetches, seen, level = 0, {hub}, [hub]
        for _depth in range(2):
            following = []
            for path in level:
                page = await send(request("FETCH", path))
                fetches += 1
                if page.status != "ok":
                    continue
                for link in links.extract(page.body):
                    target = links.parse_target(link.target, path, link.syntax)
                    for candidate in target.candidates:
                        if content.current(candidate) is not None and candidate not in seen:
                            seen.add(candidate)
                            following.append(candidate)
                            break
            level = following
        reached = len(seen)
        crawl_times.append((time.perf_counter() - started) * 1e3)
    result["graph"] = (pages, rows, min(graph_times), fetches, reached, min(crawl_times))
    content.close()
    return result


async def over_quic(port: int, cert: Path, paths: Sequence[str], hub: str) -> dict[str, float]:
    trust = Trust(known_hosts=Path(tempfile.mkdtemp()) / "known_hosts", trust_new=True)
    async with Client(Pool(trust)) as client:
        base = f"mark://127.0.0.1:{port}"
        await client.links(base + paths[0])
        times = []
        for path in paths:
            started = time.perf_counter()
            (await client.links(base + path, direction="incoming")).raise_for_status()
            times.append((time.perf_counter() - started) * 1e3)
        graph = []
        for _ in range(RUNS):
            started = time.perf_counter()
            found = await gather(client, client.url(base + hub), direction="outgoing", depth=2)
            graph.append((time.perf_counter() - started) * 1e3)
        assert found.rows
    return {
        "p50": perfkit.percentile(times, 50),
        "p90": perfkit.percentile(times, 90),
        "graph": min(graph),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=20)
    args = parser.parse_args()
    docs = corpus(args.copies)
    one = [body for path, body in docs if path.startswith("/c0/")] or [b for _, b in docs]
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text)
        lines.append(text)

    with_links, without, megabytes = analysis_cost(one)
    own, count, estimate, body_bytes = index_memory(docs)
    root = Path(tempfile.mkdtemp(prefix="bench-links-")) / "root"
    root.mkdir(parents=True)
    seed(root, [(path, body, {}) for path, body in docs])
    index = LinkIndex()
    for path, body in docs:
        index.apply(path, analysis.analyze(body), {})
    hub = max(
        (p for p in index.paths() if p.startswith("/c0/")),
        key=lambda p: sum(e.state == links.OK for e in index.outbound(p)),
    )
    paths = sorted(index.paths())[:: max(1, len(docs) // 300)]
    local = asyncio.run(in_process(root, paths, hub))
    with perfkit.child_server(root, index_workers=0) as child:  # a daemon has no workers
        remote = asyncio.run(over_quic(child.port, child.cert, paths[:100], hub))

    say(perfkit.stamp("links"))
    say()
    say(
        f"The FastAPI docs published {args.copies} times under different prefixes: {len(docs):,} "
        f"documents, {count:,} links ({sum(map(len, (b for _, b in docs))) / 1e6:.1f} MB)."
    )
    say()
    say("Finding links in the per-document analysis (one copy, best of 5 interleaved runs):")
    say()
    say(
        perfkit.table(
            ["analysis", "MB/s (CPU)", "time for one copy"],
            [
                [
                    "without links (extraction stubbed)",
                    f"{without:.2f}",
                    f"{megabytes / without:.2f} s",
                ],
                ["with links", f"{with_links:.2f}", f"{megabytes / with_links:.2f} s"],
                ["ratio", f"{with_links / without:.2f}", ""],
            ],
        )
    )
    say()
    say(
        perfkit.table(
            ["memory", "bytes", "per link", "against the body index"],
            [
                [
                    "link index, own (tracemalloc)",
                    f"{own:,}",
                    f"{own / count:.1f}",
                    f"{own / body_bytes:.2f}x",
                ],
                ["link index, memory() estimate", f"{estimate:,}", f"{estimate / count:.1f}", ""],
                ["body index (tracemalloc)", f"{body_bytes:,}", "", "1.00x"],
            ],
        )
    )
    say()
    say(f"Latency in-process through the dispatcher, over {len(paths)} documents (ms):")
    say()
    rows = [
        [name, f"{p50:.2f}", f"{p90:.2f}"]
        for name, (p50, p90) in ((n, local[n]) for n in ("backlinks", "explore links", "explore"))
    ]  # type: ignore[misc]
    say(perfkit.table(["request", "p50", "p90"], rows))
    pages, edges, graph_ms, fetches, reached, crawl_ms = local["graph"]  # type: ignore[misc]
    say()
    say(f"A depth-2 graph of the hub page {hub} ({edges} links):")
    say()
    say(
        perfkit.table(
            ["way", "requests", "time (ms, best of 5)"],
            [
                ["LOOKUP match: links, depth 2", pages, f"{graph_ms:.2f}"],
                [
                    f"crawl: FETCH each document reached ({reached}) and find its links",
                    fetches,
                    f"{crawl_ms:.2f}",
                ],
            ],
        )
    )
    say()
    say(
        f"Over QUIC from a client to a server in its own process: backlinks p50 "
        f"{remote['p50']:.2f} ms, p90 {remote['p90']:.2f} ms; "
        f"the depth-2 graph {remote['graph']:.2f} ms."
    )
    perfkit.write_section("Links", "\n".join(lines))


if __name__ == "__main__":
    main()
