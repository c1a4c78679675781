"""LOOKUP at scale: the FastAPI docs published 20 times under different prefixes (~29 MB).

Measures, in one run, and writes the ``LOOKUP`` section of docs/PERFORMANCE.md:

* cold start: ``Content.open`` over the content root with a ``Lookup`` as its index (walk,
  snapshot, catalog, body index), inline and with the per-document work in worker processes
  (``Lookup.bulk``), as MB/s of bodies, wall and per CPU second (the workers included);
* re-indexing one ~10 KB document (``Lookup.put`` of a new version): its analysis and the
  index work apart, medians of 50;
* LOOKUP body-mode latency in-process (rank, read filter, limit 10, snippets cut from the bodies
  through ``Content``) against SQLite FTS5 over the same sections (bm25 + snippet, limit 10),
  interleaved query by query so a busy machine slows both alike;
* body index memory (tracemalloc: everything the index keeps) against the body bytes indexed,
  for the 20 copies and for one, beside the index as it was (``--baseline``: a checkout of it,
  measured in a child process with that checkout first on ``PYTHONPATH``);
* the transient peak of analysing one document (tracemalloc), against its size, for the largest
  corpus document and for hostile shapes: the heading pass (mdoutline) and the whole analysis.

    tests/bench/run lookup   # or: python tests/bench/bench_lookup.py [--copies 20] [--root DIR]
                             #     [--baseline ../main]

The page cache is warm (the root was just written), so "cold" means a fresh process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import perfkit
from bench_retrieval import CORPUS, QUESTIONS, corpus, loaded
from support.exchange import seed
from support.shapes import hostile

from markproto.protocol import mdoutline
from markproto.protocol.bodies import LookupRow
from markproto.protocol.metadata import with_type_default
from markproto.server.search.analysis import analyze
from markproto.server.search.bodyindex import BodyIndex
from markproto.server.search.build import Build
from markproto.server.search.catalog import Entry
from markproto.server.search.service import Lookup, Query
from markproto.server.search.text import strip_markup
from markproto.server.storage.content import Content
from markproto.server.storage.store import Version

REPEATS = 7


class Fts5:
    """The latency baseline: the same sections in an FTS5 table of trail and text, ranked by
    bm25(), with snippet(): what a stock engine does per query."""

    def __init__(self, docs: Sequence[tuple[str, bytes]]) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute(
            "CREATE VIRTUAL TABLE s USING fts5(path UNINDEXED, anchor UNINDEXED,"
            " heading UNINDEXED, trail, body)"
        )
        rows = []
        for path, body in docs:
            for section in mdoutline.own_sections(body.decode()):
                text = strip_markup(section.text)
                if text or section.heading:
                    trail = " ".join(section.trail)
                    rows.append((path, section.anchor, section.heading, trail, text))
        self.db.executemany("INSERT INTO s VALUES (?, ?, ?, ?, ?)", rows)
        self.sections = len(rows)

    def search(self, query: str, limit: int = 10) -> list[LookupRow]:
        match = " ".join('"' + field.replace('"', '""') + '"' for field in query.split())
        found = self.db.execute(
            "SELECT path, anchor, heading, snippet(s, 4, '', '', '...', 16) FROM s"
            " WHERE s MATCH ? ORDER BY bm25(s, 0, 0, 0, 1.5, 1.0) LIMIT ?",
            (match, limit),
        ).fetchall()
        return [LookupRow(p, a, 0.5, h, (), snip) for p, a, h, snip in found]


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the bulk build's workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def cold_start(root: Path, *, workers: int) -> tuple[float, float, Lookup, Content]:
    """Wall and CPU seconds of ``Content.open`` and the startup build of a fresh ``Lookup``
    (``build.Build``: on a thread, or in ``workers`` processes past ``WORKER_BYTES``)."""
    gc.collect()
    lookup = Lookup()
    lookup.begin_build()
    cpu, started = cpu_seconds(), time.perf_counter()
    content = Content.open(root)
    content.attach(lookup)
    asyncio.run(Build(lookup, content, saved=None, workers=workers).run())
    return time.perf_counter() - started, cpu_seconds() - cpu, lookup, content


def reindex(lookup: Lookup, content: Content) -> tuple[float, float, int]:
    """Median seconds of the two halves of indexing a new version of a ~10 KB document as a
    PUBLISH does (``Lookup.put``): the new body's analysis (``Lookup.prepare``, the writer
    thread's half) and applying it to the indexes (``Lookup.settle``, the event loop's, the old
    version cut out by its slots); then the stored one again."""
    stored = [doc for c in content.current_versions() if (doc := content.read(c)) is not None]
    target = min(stored, key=lambda doc: abs(len(doc.body) - 10_000))
    analysis, settle = [], []
    for round_ in range(50):
        new = loaded(target.path, target.body + f"\n\nEdit {round_}.\n".encode())
        started = time.perf_counter()
        change = Lookup.prepare(target.path, new)
        prepared = time.perf_counter()
        lookup.settle(change)
        analysis.append(prepared - started)
        settle.append(time.perf_counter() - prepared)
    lookup.put(target)
    return statistics.median(analysis), statistics.median(settle), len(target.body)


def latencies(
    systems: Sequence[Callable[[str], object]], queries: Sequence[str]
) -> list[list[float]]:
    """Every system runs every query REPEATS times, interleaved query by query."""
    out: list[list[float]] = [[] for _ in systems]
    for _ in range(REPEATS):
        for query in queries:
            for times, search in zip(out, systems, strict=True):
                started = time.perf_counter()
                search(query)
                times.append(time.perf_counter() - started)
    return out


def index_memory(docs: Sequence[tuple[str, bytes]]) -> int:
    """Bytes the body index keeps (catalog entries are built before tracing starts)."""
    entries = [
        Entry.build(path, with_type_default(path, {}), loaded(path, b"").modified, facts)
        for path, body in docs
        for facts in (analyze(body).facts,)
    ]
    gc.collect()
    tracemalloc.start()
    index = BodyIndex()
    for entry, (_, body) in zip(entries, docs, strict=True):
        index.apply(entry, "", analyze(body))
    mdoutline._headings.cache_clear()  # the parser's small cache is not the index's
    gc.collect()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return size


BASELINE_MEMORY = """
import gc, sys, tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from markproto.protocol import mdoutline
from markproto.protocol.metadata import with_type_default
from markproto.server.search.analysis import analyze
from markproto.server.search.bodyindex import BodyIndex
from markproto.server.search.catalog import Entry
root, copies, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
files = sorted(root.rglob("*.md"))
docs = [(f"/c{c}/{f.relative_to(root)}", f.read_bytes()) for c in range(copies) for f in files]
day = datetime(2026, 1, 1, tzinfo=UTC)
docs = docs[:count]
entries = [Entry.build(p, with_type_default(p, {}), day, analyze(b, 0).facts) for p, b in docs]
gc.collect()
tracemalloc.start()
index = BodyIndex()
for entry, (_, body) in zip(entries, docs):
    index.put(entry, "", analyze(body, index.reserve()))
mdoutline._headings.cache_clear()
gc.collect()
print(tracemalloc.get_traced_memory()[0])
"""
"""``index_memory`` as the index was before packed postings (its API: ``reserve`` and ``put``)."""


def baseline_memory(baseline: Path, copies: int, count: int) -> int:
    shim = Path(tempfile.mkdtemp(prefix="bench-baseline-")) / "markproto"
    shim.mkdir()
    for part in ("protocol", "server", "client", "durable"):
        (shim / part).symlink_to(baseline / part)
    out = subprocess.run(
        [sys.executable, "-c", BASELINE_MEMORY, str(CORPUS), str(copies), str(count)],
        env={**os.environ, "PYTHONPATH": str(shim.parent)},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[-1])


def shapes() -> dict[str, bytes]:
    """The corpus's largest document and the hostile shapes (``support.shapes``: those the
    analysis bench and its memory test read)."""
    release = (CORPUS / "release-notes.md").read_bytes()
    return {"release-notes.md (the corpus's largest, 2,299 emoji)": release, **hostile()}


def peak(job: Callable[[], object]) -> float:
    """Largest transient allocation of ``job``, in bytes (tracemalloc)."""
    mdoutline._headings.cache_clear()
    gc.collect()
    tracemalloc.start()
    job()
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return top


def analysis_peaks(say: Report) -> None:
    rows = []
    for name, body in shapes().items():
        analyze(body[:4096])  # imports and caches warm
        heading_pass = peak(lambda body=body: mdoutline.headings(body))  # type: ignore[misc]
        whole = peak(lambda body=body: analyze(body))  # type: ignore[misc]
        rows.append(
            [
                name,
                f"{len(body):,}",
                f"{heading_pass / len(body):.2f}x",
                f"{whole / len(body):.2f}x",
            ]
        )
    say(
        perfkit.table(
            ["document", "bytes", "heading pass peak", "whole analysis peak"],
            rows,
        )
    )
    say()


class Report:
    """Lines printed as they come and written to docs/PERFORMANCE.md at the end."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


def startup(say: Report, root: Path, mb: float) -> tuple[Lookup, Content]:
    rows = []
    for label, workers in (
        ("background build on a thread", 0),
        ("background build, 2 worker processes allowed (they start past 64 MiB of bodies)", 2),
    ):
        seconds, cpu, lookup, content = cold_start(root, workers=workers)
        rows.append(
            [label, f"{seconds:.2f}", f"{mb / seconds:.1f}", f"{cpu:.2f}", f"{mb / cpu:.1f}"]
        )
        if not workers:
            content.close()
    say(
        perfkit.table(
            ["cold start", "wall s", "MB/s", "CPU s (all processes)", "MB per CPU s"], rows
        )
    )
    say()
    analysis, settle, size = reindex(lookup, content)
    say(
        f"Indexed {len(lookup.catalog):,} documents, {lookup.bodies.sections:,} sections,"
        f" {lookup.bodies.terms:,} terms. Re-indexing one {size:,}-byte document (a PUBLISH):"
        f" **{(analysis + settle) * 1000:.2f} ms**, of which its analysis"
        f" {analysis * 1000:.2f} ms and the index work {settle * 1000:.2f} ms (medians of 50;"
        " target 5 ms)."
    )
    say()
    return lookup, content


def latency(
    say: Report, lookup: Lookup, content: Content, docs: Sequence[tuple[str, bytes]]
) -> None:
    def load(path: str) -> Version | None:
        current = content.current(path)
        return content.read(current) if current is not None else None

    def ours(query: str) -> object:
        return lookup.answer(Query(query, "body", 10, ()), "/", lambda _: True, load)

    queries = [q["query"] for q in json.loads(QUESTIONS.read_text())["questions"]]
    fts = Fts5(docs)
    measured = latencies([ours, fts.search], queries)
    rows = [
        [
            name,
            f"{perfkit.percentile(times, 50) * 1000:.2f}",
            f"{perfkit.percentile(times, 99) * 1000:.2f}",
        ]
        for name, times in zip(
            ("markproto", "SQLite FTS5, bm25() + snippet()"), measured, strict=True
        )
    ]
    say(
        f"Body-mode LOOKUP in-process, limit 10, the {len(queries)} queries of"
        f" `questions_fastapi.json` x {REPEATS}, interleaved with FTS5 over the same"
        f" {fts.sections:,} sections:"
    )
    say()
    say(perfkit.table(["engine", "p50 ms", "p99 ms"], rows))
    say()


def memory(
    say: Report, docs: Sequence[tuple[str, bytes]], copies: int, baseline: Path | None
) -> None:
    rows = []
    for count in sorted({1, copies}):
        subset = docs[: len(docs) * count // copies]
        size = index_memory(subset)
        total = sum(len(body) for _, body in subset)
        row = [f"{count} x", f"{total:,}", f"{size:,}", f"{size / total:.2f}"]
        if baseline is not None:
            before = baseline_memory(baseline, copies, len(subset))
            row += [f"{before:,}", f"{before / total:.2f}"]
        rows.append(row)
    headers = ["corpus", "body bytes", "body index bytes", "ratio"]
    if baseline is not None:
        headers += ["as it was", "ratio as it was"]
    say(perfkit.table(headers, rows))
    say()


NOTES = """\
Targets: cold start at 5 MB/s of bodies or more, a 10 KB re-index within 5 ms, body index memory
within 1.5x the body bytes (the reference budgets 3x), body-mode p50 no slower than FTS5, and
analysing any one document within 4x its size. Timings are from a shared 2-core machine (see the
load average above): compare the rows of one run, not runs.

- **Cold start** is CPU-bound: mdoutline's block parse, then stripping, splitting into words and
  merging. The startup walk runs inside `Lookup.bulk()`: each batch of bodies (1 MB) goes to a
  worker process, which returns compact records (section spans, word counts, anchors) and one
  block of postings for the whole batch, appended here in put order.
- **Memory**: a term's postings are one `array('I')` of entries `slot << 8 | flags` (a 24-bit
  section slot, the term frequency capped at 63, in-trail and in-heading bits): 4 bytes a
  posting, no per-term object but the array itself. A document keeps its section spans, word
  counts, anchors and headings (one string) and its compressed vocabulary (removal needs it), no
  stripped text; documents whose tags or title hold a term are one small array per term. The
  one-copy ratio is high because each distinct term costs its string, its dict slot and an array
  header whatever its postings; the twenty copies share them.
- **Transient memory**: the body is never decoded whole (a document with emoji decodes to four
  bytes a character): headings are parsed from the bytes a line-aligned 64 KiB piece at a time
  (a piece ends before a heading line at the left margin unless a fence, an HTML block or link
  definitions are still open there; its block tree is freed before the next), each section is
  decoded, stripped and split on its own (long ones 16 KiB at a time), and postings gather in two
  flat arrays. What cannot shrink is per distinct word and per heading: a document of 100,000
  headings or 50,000 distinct words holds that many strings while it is analysed.
- **Latency**: matching is set algebra on the postings (the rarest term first, the others probed
  by bisection or intersected in C); only the rows shown get a snippet, and only the lines that
  can win are stripped (a line's text with the in-line rules alone bounds the terms its stripped
  form can hold, and it is made a growing piece of lines at a time, so a winner among the first
  lines leaves the rest alone). "LOOKUP: latency by instruction counts" below says where a
  query's instructions go.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--root", type=Path, help="reuse (or fill) this content root")
    parser.add_argument("--baseline", type=Path, help="a checkout of the index as it was")
    args = parser.parse_args()
    say = Report()
    docs = corpus(args.copies)
    mb = sum(len(body) for _, body in docs) / 1e6
    say(perfkit.stamp("lookup"))
    say()
    say(
        f"The FastAPI docs published {args.copies} times under different prefixes: {len(docs):,}"
        f" documents, {mb:.1f} MB of bodies. {os.cpu_count()} CPUs, 1-minute load average"
        f" {os.getloadavg()[0]:.2f} at the start."
    )
    say()
    # the root's thousands of files in folders of their own (perfkit.scratch), away from where
    # the machine's other work deletes files, as the import bench's
    scratch = None if args.root else perfkit.scratch("bench-lookup-")
    root = args.root or scratch
    assert root is not None
    try:
        if not any(root.iterdir()):
            seed(root, [(path, body, {}) for path, body in docs])
        lookup, content = startup(say, root, mb)
        try:
            latency(say, lookup, content, docs)
        finally:
            content.close()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    memory(say, docs, args.copies, args.baseline)
    say("Transient peak of analysing one document, as a multiple of its size (tracemalloc):")
    say()
    analysis_peaks(say)
    say(NOTES)
    perfkit.write_section("LOOKUP", "\n".join(say.lines))


if __name__ == "__main__":
    main()
