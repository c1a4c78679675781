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
* a page of 10 backlinks of a hub 3,000 synthetic notes link to, against following every
  backlink in full and keeping 10;
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
import os
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
from markproto.protocol import linkkinds, links, wire
from markproto.protocol.bodies import parse_links
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.search import analysis, graph
from markproto.server.search.bodyindex import BodyIndex
from markproto.server.search.catalog import Entry
from markproto.server.search.links import LinkIndex
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content

RUNS = 5
NOTES = """\
Targets (issue 14): backlinks and explore under 2 ms p50 at this scale, a depth-2 graph in one
round trip per level or better, the link index inside the footprint. Explore is the four requests
`mark_explore` sends (FETCH, a page of 10 links each way, LIST of the folder), here one after
another; the bridge sends them at once. The link index keeps, per document, its links packed and
compressed, and per path a link may lead to, the links that may; a link is resolved when it is
asked for, for the reader asking (so no other document's entry changes on a write); a page of a
document's own links resolves only its rows, and the anchors it checks are the body index's
string, shared. The crawl is the reference's way: FETCH every document reached and parse its
links on the client. Timings are from a shared 2-core machine (the load is above): compare rows
of one run, not runs."""


class _NoLinks:
    """The analysis with link extraction stubbed out: the baseline of its cost."""

    def __init__(self, body: object) -> None:
        self.ids: list[str] = []

    def section(self, *args: object) -> None:
        pass

    def links(self) -> list[linkkinds.Link]:
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
    gc.collect()
    tracemalloc.start()
    bodies = BodyIndex()
    for path, body in docs:
        version = loaded(path, body)
        found = analysis.analyze(body)
        bodies.apply(Entry.build(path, version.meta, version.modified, found.facts), "", found)
        del found, version
    gc.collect()
    body_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return own, count, index.memory(), body_bytes


def hub_backlinks(notes: int = 3000) -> tuple[float, float]:
    """A page of 10 backlinks of a hub every one of ``notes`` notes links to (p50 ms, 20 runs
    interleaved): as the server answers it (each backlink counted by where it leads, the page's
    followed in full), and every backlink followed in full and then cut to 10 (the baseline)."""
    lookup = Lookup()
    lookup.put(loaded("/hub.md", b"# Hub\n"))
    for number in range(notes):
        body = "".join(f"part {j} [x](/other{j}.md)\n\n" for j in range(20)) + "[hub](/hub.md)\n"
        lookup.put(loaded(f"/notes/{number}.md", f"# Note {number}\n\n{body}".encode()))
    query = graph.LinksQuery(direction="incoming", limit=10)
    paged: list[float] = []
    whole: list[float] = []
    for _ in range(20):
        started = time.perf_counter()
        page = graph.answer(lookup.links, query, "/hub.md", False, lambda p: True, lambda p: p)
        paged.append((time.perf_counter() - started) * 1e3)
        started = time.perf_counter()
        cut = lookup.links.inbound("/hub.md")[:10]
        whole.append((time.perf_counter() - started) * 1e3)
        assert page.total == notes and len(cut) == len(page.rows) == 10
    return perfkit.percentile(paged, 50), perfkit.percentile(whole, 50)


def timed(job: Callable[[], object], repeats: int = 1) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        job()
    return (time.perf_counter() - started) / repeats


async def in_process(root: Path) -> dict[str, object]:
    """Latency through the dispatcher over the documents of ``root``; the hub page (the document
    with the most links that resolve) and the most linked-to document are picked from the
    server's own link index."""
    lookup = Lookup()
    content = Content.open(root, [lookup])
    dispatcher = Dispatcher(Context(content, lookup=lookup))
    index = lookup.links
    paths = sorted(index.paths())[:: max(1, len(index) // 300)]
    hub = max(
        [p for p in index.paths() if p.startswith("/c0/")] or list(index.paths()),
        key=lambda p: sum(e.state == linkkinds.OK for e in index.outbound(p)),
    )
    target = max(index.paths(), key=lambda p: len(index.inbound(p)))

    async def send(data: bytes) -> wire.Response:
        out = dispatcher.handle(data, PEER)
        return wire.parse_response(out if isinstance(out, bytes) else await out)

    def links_of(path: str, **keys: str) -> bytes:
        return request("LOOKUP", path, {"match": "links", **keys})

    async def explore(path: str) -> list[tuple[str, list[bytes]]]:
        folder = path.rsplit("/", 1)[0] + "/"
        backlinks = links_of(path, direction="incoming")
        out10 = links_of(path, direction="outgoing", limit="10")
        in10 = links_of(path, direction="incoming", limit="10")
        fetch, listing = request("FETCH", path), request("LIST", folder, {"page-size": "11"})
        return [
            ("backlinks", [backlinks]),
            ("explore links", [out10, in10]),
            ("explore", [fetch, out10, in10, listing]),
        ]

    async def sample(batches: list[tuple[str, list[bytes]]], into: dict[str, list[float]]) -> None:
        for name, batch in batches:
            started = time.perf_counter()
            for data in batch:
                assert (await send(data)).status == "ok"
            into.setdefault(name, []).append((time.perf_counter() - started) * 1e3)

    samples: dict[str, list[float]] = {}
    for path in paths:
        await sample(await explore(path), samples)
    busiest: dict[str, list[float]] = {}
    for _ in range(50):
        await sample(await explore(target), busiest)
    result: dict[str, object] = {
        name: (perfkit.percentile(v, 50), perfkit.percentile(v, 90)) for name, v in samples.items()
    }
    result["busiest"] = {
        name: (perfkit.percentile(v, 50), perfkit.percentile(v, 90)) for name, v in busiest.items()
    }
    result["target"] = (target, len(index.inbound(target)))
    result["paths"], result["hub"] = paths, hub

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


async def over_quic(port: int, paths: Sequence[str], hub: str) -> dict[str, float]:
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

    load = os.getloadavg()[0]
    with_links, without, megabytes = analysis_cost(one)
    own, count, estimate, body_bytes = index_memory(docs)
    root = Path(tempfile.mkdtemp(prefix="bench-links-")) / "root"
    root.mkdir(parents=True)
    seed(root, [(path, body, {}) for path, body in docs])
    local = asyncio.run(in_process(root))
    paths, hub = local["paths"], local["hub"]
    assert isinstance(paths, list) and isinstance(hub, str)
    # a daemon has no workers; indexing inline on a loaded machine may take minutes
    with perfkit.child_server(root, index_workers=0, start_timeout=900) as child:
        remote = asyncio.run(over_quic(child.port, paths[:100], hub))
        rss = perfkit.rss_bytes(child.pid)
    hub_paged, hub_whole = hub_backlinks()
    load_after = os.getloadavg()[0]

    say(perfkit.stamp("links"))
    say()
    say(
        f"The FastAPI docs published {args.copies} times under different prefixes: {len(docs):,} "
        f"documents, {count:,} links ({sum(map(len, (b for _, b in docs))) / 1e6:.1f} MB)."
    )
    say()
    say(
        f"2 CPUs shared with other work: 1-minute load average {load:.2f} at the start, "
        f"{load_after:.2f} at the end."
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
                [
                    "server RSS after the QUIC requests (the footprint)",
                    f"{rss:,}",
                    "",
                    f"link index {own / rss:.1%} of it",
                ],
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
    target, inbound = local["target"]  # type: ignore[misc]
    busy = local["busiest"]
    assert isinstance(busy, dict)
    say()
    say(f"The most linked-to document, {target} ({inbound} backlinks), 50 times (ms):")
    say()
    say(
        perfkit.table(
            ["request", "p50", "p90"],
            [
                [n, f"{busy[n][0]:.2f}", f"{busy[n][1]:.2f}"]
                for n in ("backlinks", "explore links", "explore")
            ],
        )
    )
    say()
    say(
        f"A page of 10 backlinks of a hub 3,000 notes link to: {hub_paged:.2f} ms p50, against "
        f"{hub_whole:.2f} ms to follow every backlink in full and keep 10 "
        f"({hub_whole / hub_paged:.0f}x)."
    )
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
    say()
    say(NOTES)
    perfkit.write_section("Links", "\n".join(lines))


if __name__ == "__main__":
    main()
