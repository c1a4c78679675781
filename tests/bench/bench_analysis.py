"""Per-document analysis speed (``analysis.analyze``, issues 13 and 15): MB of bodies per CPU
second on each corpus and on hostile shapes, and the transient peak per body byte, against a
baseline checkout measured in the same run.

Each side runs in its own process (``--worker``), the two interleaved round by round, and each
figure is the best round's process CPU time (``time.process_time``), so load from other work
on the machine weighs on both alike. The baseline is the Python of another checkout (its own
markproto): ``$BASELINE_PYTHON``, else the sibling ``main`` checkout's ``.venv`` when it exists;
without one only this checkout is measured.

    PYTHON=.venv/bin/python tests/bench/run analysis
    .venv/bin/python tests/bench/bench_analysis.py [--rounds 3] [--baseline /path/to/python]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("MARKPROTO_SHARED", REPO.parent / "shared"))
CORPORA = ("fastapi-docs", "prometheus-docs")

sys.path.insert(0, str(REPO / "tests"))
from support.shapes import hostile  # noqa: E402  (tests/ is on the path only from here)


def shapes() -> dict[str, list[bytes]]:
    out = {}
    for corpus in CORPORA:
        root = SHARED / "corpus" / corpus
        out[corpus] = [path.read_bytes() for path in sorted(root.rglob("*.md"))]
    out.update((name, [body]) for name, body in hostile().items())
    return out


def worker(rounds: int, peaks: bool) -> None:
    """Best CPU seconds of analysing each shape and (with ``peaks``) the transient peak of its
    largest body per byte (tracemalloc), as JSON on stdout."""
    import tracemalloc

    from markproto.server.search.analysis import analyze

    found = {}
    for name, bodies in shapes().items():
        analyze(bodies[0][:4096])  # imports and compiled patterns are not the body's cost
        best = float("inf")
        for _ in range(rounds):
            gc.collect()
            started = time.process_time()
            for body in bodies:
                analyze(body)
            best = min(best, time.process_time() - started)
        peak = 0.0
        if peaks:
            largest = max(bodies, key=len)
            gc.collect()
            tracemalloc.start()
            analyze(largest)
            peak = tracemalloc.get_traced_memory()[1] / len(largest)
            tracemalloc.stop()
        found[name] = (sum(map(len, bodies)), best, peak)
    print(json.dumps(found))


BUILD_COPIES = 5
"""Copies of the FastAPI corpus in the start-up build's root (issue 13 measures x5)."""


def build_root(base: Path, copies: int) -> Path | None:
    """A store root holding ``copies`` of the FastAPI corpus, made once (by this checkout: the
    store's format is the same on both sides); None without the corpus."""
    source = SHARED / "corpus" / "fastapi-docs"
    if not source.is_dir():
        return None
    from markproto.server.storage.store import Store

    root = base / f"fastapi-x{copies}"
    root.mkdir(parents=True)
    store = Store(root)
    try:
        with store.batch():
            for copy in range(copies):
                for path in sorted(source.rglob("*.md")):
                    name = f"/copy{copy}/{path.relative_to(source).as_posix()}"
                    store.publish(name, path.read_bytes(), {}, None)
    finally:
        store.close()
    return root


def build_worker(root: Path) -> None:
    """One start-up build of ``root``'s LOOKUP index as the server runs it (``build.Build`` with
    no saved index and no worker processes), in a fresh process so that the analysis's imports
    are the build's, as at a server's start: bodies, wall and CPU seconds as JSON on stdout."""
    import asyncio

    from markproto.server.search.build import Build
    from markproto.server.search.service import Lookup
    from markproto.server.storage.content import Content

    content = Content.open(root)
    lookup = Lookup()
    lookup.begin_build()
    size = sum(
        len(version.body)
        for current in content.current_versions()
        if (version := content.load(current)) is not None
    )
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    asyncio.run(Build(lookup, content, saved=None, workers=0).run())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert lookup.ready
    content.close()
    print(json.dumps([size, wall, cpu]))


def measure_build(python: str, root: Path) -> tuple[int, float, float]:
    out = subprocess.run(
        [python, __file__, "--build-worker", str(root)],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout
    size, wall, cpu = json.loads(out)
    return int(size), float(wall), float(cpu)


def measure(python: str, rounds: int, peaks: bool) -> dict[str, tuple[int, float, float]]:
    out = subprocess.run(
        [python, __file__, "--worker", "--rounds", str(rounds), *(["--peaks"] if peaks else [])],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout
    return {name: tuple(value) for name, value in json.loads(out).items()}  # type: ignore[misc]


def baseline_python(given: str | None) -> str | None:
    candidate = given or os.environ.get("BASELINE_PYTHON")
    if candidate:
        return candidate
    sibling = REPO.parent / "main" / ".venv" / "bin" / "python"
    return str(sibling) if sibling.exists() and REPO.name != "main" else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline")
    parser.add_argument("--peaks", action="store_true")
    parser.add_argument("--build-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.rounds, args.peaks)
        return
    if args.build_worker:
        build_worker(args.build_worker)
        return
    sys.path.insert(0, str(REPO / "tests" / "bench"))
    import perfkit

    base = baseline_python(args.baseline)
    sides = {"this": sys.executable} | ({"baseline": base} if base else {})
    best: dict[tuple[str, str], tuple[int, float, float]] = {}
    for round_ in range(args.rounds):
        for side, python in sides.items():
            for name, (size, seconds, peak) in measure(python, 2, round_ == 0).items():
                had = best.get((side, name))
                peak = had[2] if had else peak
                if had is None or seconds < had[1]:
                    best[(side, name)] = (size, seconds, peak)
    builds: dict[str, tuple[int, float, float]] = {}
    scratch = perfkit.scratch("bench-analysis-")
    try:
        root = build_root(scratch, BUILD_COPIES)
        for _ in range(args.rounds if root is not None else 0):
            for side, python in sides.items():
                size, wall, cpu = measure_build(python, root)  # type: ignore[arg-type]
                had = builds.get(side)
                if had is None or cpu < had[2]:
                    builds[side] = (size, wall, cpu)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for name in shapes():
        size, seconds, peak = best[("this", name)]
        row = [name, f"{size / 1e6:.2f}"]
        if base:
            _, before, before_peak = best[("baseline", name)]
            row += [f"{size / before / 1e6:.2f}", f"{size / seconds / 1e6:.2f}"]
            row += [f"{before / seconds:.2f}x", f"{before_peak:.2f}x", f"{peak:.2f}x"]
        else:
            row += ["", f"{size / seconds / 1e6:.2f}", "", "", f"{peak:.2f}x"]
        rows.append(row)
    headers = [
        "bodies",
        "MB",
        "MB/CPU-s before",
        "MB/CPU-s now",
        "speedup",
        "peak/body before",
        "peak/body now",
    ]
    lines = [
        perfkit.stamp("analysis"),
        "",
        f"Baseline: `{base}` (its own checkout's markproto), this checkout: `{sys.executable}`;"
        f" best of {args.rounds} interleaved rounds of 2 runs each, process CPU time. Peak:"
        " the largest allocation while one `analyze` runs (tracemalloc, imports warm), per"
        " byte of the body (a corpus: its largest body).",
        "",
        perfkit.table(headers, rows),
        "",
        *build_lines(builds),
        "Where the time goes (cProfile of the corpora): the words of each piece of text"
        " (`text.prose_words`: stripMarkup's line rules, then the split into words, per word in"
        " Python) about 35%, the links (`links.Extractor`, per link) about 25%, the heading pass"
        " about 13% (most pieces are read by `mdparse._scan`, the rest by mistletoe, imported"
        " only then; a heading whose inline syntax is only code spans, simple emphasis, plain"
        " links or tags skips mistletoe's inline parser), postings"
        " (`_Found`, one append a section of at most 8 KiB) about 10%, the rest per section."
        " `tests/bench/analysis_equal.py` checks"
        " that the analyses are those of the baseline (once their runs of postings are merged"
        " as the index merges them: a long section's postings may be cut into runs elsewhere).",
        "",
        "What bounds the peaks: the heading parse cuts its pieces before a line at the left"
        " margin after an empty line as well as before a heading line there (a document of"
        " setext headings alone was one mistletoe piece); a line over 16 KiB is stripped and"
        " split a piece at a time where `text.line_cut` shows its words unchanged, each"
        " piece's words let go before a run of postings is packed; a run packed inside a long"
        " section keeps the terms the next piece brings (at most half a run), so its recurring"
        " words are not repeated run after run; the link extractor keeps a body's links as"
        " UTF-8 bytes and arrays and its reference uses as a few varint bytes each (a line's"
        " rise, the reference, the label only where it differs), drops uses whose label no"
        " `]:` in the body can define, and matches them as they are packed, merged by line"
        " after the others; a block's lines are cut from its section's text once, not split"
        " and joined; the links' compressor has an 8 KiB window (80 KB of state, not 300 KB);"
        " the anchor dedupe keeps only unsuffixed anchors (a slug's suffixed ones follow from"
        " the last suffix it took). What is left is mostly the section's text, decoded whole"
        " for the link extractor (once, and once more masked where it holds code spans: a"
        " paragraph of dense inline links), and the output: postings and outline of tens of"
        " thousands of short headings or distinct terms.",
    ]
    print("\n".join(lines))
    perfkit.write_section("Analysis speed", "\n".join(lines))


def build_lines(builds: dict[str, tuple[int, float, float]]) -> list[str]:
    """The start-up build's table (none without the corpus)."""
    import perfkit

    if "this" not in builds:
        return ["Start-up build: not measured (no FastAPI corpus under ../shared).", ""]
    rows = []
    for side, label in (("baseline", "baseline"), ("this", "this checkout")):
        if side in builds:
            size, wall, cpu = builds[side]
            rows.append(
                [label, f"{size / 1e6:.1f}", f"{wall:.2f}", f"{cpu:.2f}", f"{size / cpu / 1e6:.2f}"]
                + ([f"{cpu / builds['this'][2]:.2f}x"] if "baseline" in builds else [])
            )
    headers = ["start-up build, FastAPI x5", "MB", "wall s", "CPU s", "MB/CPU-s"]
    if "baseline" in builds:
        headers.append("speedup vs baseline")
    return [
        f"Start-up build: the LOOKUP index of a root holding the FastAPI corpus {BUILD_COPIES}"
        " times, built as a server's start builds it with no saved index (`build.Build`, no"
        " worker processes), each in a fresh process so the analysis's imports are part of it;"
        " the best round's CPU time. Issue 13 asks for an index ready at 8 MB/s or more.",
        "",
        perfkit.table(headers, rows),
        "",
    ]


if __name__ == "__main__":
    main()
