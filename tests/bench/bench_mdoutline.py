"""mdoutline throughput on the FastAPI corpus, against full mistletoe parsing in the same run.

Measures MB/s (UTF-8 bytes of markdown) of ``headings()`` and ``own_sections()`` over every
``.md`` of the corpus, best and median of several runs, with mistletoe's full parse (blocks and
inlines, HTML tokens on, as a renderer sets it up) as the baseline, and the time to process the
corpus document closest to 10 KB, the size of a typical PUBLISH re-index. The parse cache is
cleared before every call, so each number is a real parse.

    /work/venv/bin/python tests/bench/bench_mdoutline.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mistletoe.block_token import Document
from mistletoe.html_renderer import HtmlRenderer
from support import SHARED

from markproto.protocol import mdoutline

Job = Callable[[str], object]


def _fresh(job: Job) -> Job:
    def run(body: str) -> object:
        mdoutline._headings.cache_clear()
        return job(body)

    return run


def _full_mistletoe(body: str) -> object:
    with HtmlRenderer():  # type: ignore[no-untyped-call]
        return Document(body.replace("\r\n", "\n"))


def _timings(job: Job, bodies: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for body in bodies:
            job(body)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    corpus = SHARED / "corpus" / "fastapi-docs"
    bodies = [path.read_text(encoding="utf-8") for path in sorted(corpus.rglob("*.md"))]
    if not bodies:
        sys.exit(f"no markdown under {corpus}")
    megabytes = sum(len(body.encode()) for body in bodies) / 1e6
    jobs = {
        "full mistletoe parse": _full_mistletoe,
        "headings()": _fresh(mdoutline.headings),
        "own_sections()": _fresh(mdoutline.own_sections),
    }
    rates = {}
    for name, job in jobs.items():
        job(bodies[0])  # warm up imports and regex caches
        times = _timings(job, bodies, args.runs)
        rates[name] = (megabytes / min(times), megabytes / statistics.median(times))
    baseline = rates["full mistletoe parse"][0]
    print(f"corpus: {len(bodies)} documents, {megabytes:.2f} MB, {args.runs} runs each")
    print(f"| {'job':<20} | {'best MB/s':>9} | {'median MB/s':>11} | {'vs mistletoe':>12} |")
    for name, (best, median) in rates.items():
        print(f"| {name:<20} | {best:>9.2f} | {median:>11.2f} | {best / baseline:>11.1f}x |")
    ten_kb = min(bodies, key=lambda body: abs(len(body.encode()) - 10_000))
    calls = 50
    times = _timings(_fresh(mdoutline.own_sections), [ten_kb] * calls, args.runs)
    per_call = [t / calls * 1e3 for t in times]
    print(
        f"own_sections() of one {len(ten_kb.encode())} B document: best {min(per_call):.2f} ms, "
        f"median {statistics.median(per_call):.2f} ms"
    )


if __name__ == "__main__":
    main()
