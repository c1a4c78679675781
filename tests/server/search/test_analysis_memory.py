"""Analysing a document costs at most a few times its size, whatever its shape (issue 13's
board budget: at most 4x): the transient peak of ``analyze`` under tracemalloc, for shapes that
once cost tens of times the body (many headings, many sections, long tables, wide characters,
the corpus's largest document, dense with links).

The bound is 4x the body plus a fixed ``ALLOWANCE``: what analysis holds whatever the body's size
(one run of ``RUN_TERMS`` distinct terms, one piece of the heading parse, compiled state), which
is most of the peak of a small body and little of a large one's. The shapes are the analysis
bench's (docs/PERFORMANCE.md, "Analysis speed"), which reports their peaks at full size without
the allowance.

The allowance is what the worst shape needs at this size (dense reference links: 201 KiB, most of
it one run of distinct terms), with room for hash order to move it: tuples made from generators
once kept 677 KiB in CPython's free lists for 5,000 headings of every level
(``mdoutline.iter_own_spans``' trails), which it fails.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from support import shared_path
from support.shapes import hostile

from markproto.protocol import mdoutline
from markproto.server.search.analysis import analyze

BOUND = 4.0
ALLOWANCE = 320 << 10
WARM = (
    '---\ntitle: t\n---\n# A [x](/b.md)\n\nText <a id="q"></a> [r][1] https://e.com\n\n'
    "[1]: /c.md\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\ncode\n```\n\n* 🎉 item\n"
).encode()


def peak(body: bytes) -> float:
    """The largest transient allocation of analysing ``body`` but the allowance, as a multiple
    of its size."""
    analyze(WARM)  # imports, compiled patterns and caches are not the body's cost
    mdoutline._headings.cache_clear()
    gc.collect()
    tracemalloc.start()
    try:
        analyze(body)
        top = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return (top - ALLOWANCE) / len(body)


SCALE = 4
"""The shared hostile shapes (``support.shapes``, the analysis bench's) at a quarter of the
bench's size: each body from 50 KB to 0.5 MB, analysed under tracemalloc in seconds."""
SHAPES = hostile(SCALE)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_analysis_peaks_within_four_times_the_body(shape: str) -> None:
    body = SHAPES[shape]
    assert len(body) > 40_000
    assert peak(body) <= BOUND


def test_the_largest_corpus_document_peaks_within_four_times() -> None:
    body = shared_path("corpus", "fastapi-docs", "release-notes.md").read_bytes()
    assert peak(body) <= BOUND


def test_analysis_leaves_no_cycle_holding_the_body() -> None:
    """What an analysis leaves in reference cycles lives until the collector's full pass, which
    a server with many long-lived objects runs rarely: a cycle reaching the body (the link
    extractor and its sink once made one) kept the last large body and its links' tails
    resident after a publish (x1: 1.1 MB, most of "other Python objects")."""
    body = next(body for name, body in SHAPES.items() if name.startswith("dense inline links"))
    analyze(WARM)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        analyze(body)
        gc.collect()
        held = [type(o).__name__ for o in gc.garbage if any(r is body for r in gc.get_referents(o))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert held == []


CYCLIC = {
    "links of every kind": WARM.decode()
    + "".join(
        f"see [l{n}](/p/{n}.md#a) [u{n}][r{n % 7}] [r{n % 7}] <https://e{n}.com>\n"
        for n in range(50)
    )
    + "\n"
    + "".join(f"[r{n}]: /d{n}.md 'title'\n" for n in range(7)),
    "headings with inline syntax": "".join(
        f"# *Part* [{n}](/x.md) **bold** ~~gone~~\n\ntext {n}\n\n" for n in range(40)
    ),
    "a heading parse piece that must grow": "# Top\n\n```\n"
    + "code line\n" * 20_000
    + "```\n\n## After *it*\n",
}


@pytest.mark.parametrize("shape", CYCLIC)
def test_analysis_leaves_no_cyclic_garbage(shape: str) -> None:
    """Nothing an analysis allocates waits for the cycle collector: not its links, not the
    heading parse's block trees or inline tokens (mistletoe links each token to its parent),
    whatever path the parse takes."""
    body = CYCLIC[shape].encode()
    analyze(WARM)
    gc.collect()
    gc.disable()
    try:
        analyze(body)
        assert gc.collect() == 0
    finally:
        gc.enable()
