"""Bodies of hostile shapes: shapes that once cost the analysis (or its heading parse) far more
than a corpus body. One definition, read by the analysis bench (``bench_analysis``), the LOOKUP
bench's table of peaks (``bench_lookup``) and the analysis memory test
(``tests/server/search/test_analysis_memory.py``), so that what the bench measures is what
the test bounds; the test reads them smaller (``scale``), as a bench's bodies take tens of
seconds under tracemalloc.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["hostile"]


def _distinct_words(count: int) -> str:
    return "intro\n\n" + "".join(f"w{n}x{n * 7919 % 10007} " for n in range(count)) + "\n"


def _reference_links(count: int) -> str:
    uses = "".join(f"[a{n}][r{n % 500}] [r{n % 700}] [x{n}][] " for n in range(count))
    return uses + "\n\n" + "".join(f"[r{n}]: /doc{n}.md#h{n} 'title'\n" for n in range(600))


def _inline_links(count: int) -> str:
    return "".join(
        f"see [l{n}](/p/{n}.md#a) ![i](x.png) <https://e{n}.com/x> https://b{n}.org/y, "
        f'<a href="/h{n}.md" id="i{n}">t</a> [[Note {n}|lab]] `[c](d)`\n'
        for n in range(count)
    )


def _table(count: int) -> str:
    rows = "".join(f"| x{n} | y{n % 50} | `z` **b** |\n" for n in range(count))
    return "| a | b | c |\n|---|---|---|\n" + rows


_SHAPES: tuple[tuple[str, int, Callable[[int], str]], ...] = (
    ("{:,} one-line headings", 100_000, lambda n: "".join(f"# h{i}\n" for i in range(n))),
    ("one line of {:,} distinct words", 20_000, _distinct_words),
    ("dense reference links ({:,} groups of uses)", 8_000, _reference_links),
    ("dense inline links and URLs ({:,} lines)", 6_000, _inline_links),
    ("a {:,}-row table", 50_000, _table),
    (
        "{:,} list items, 70 deep",
        20_000,
        lambda n: "".join(
            "  " * (i % 70) + f"- item {i} text *em* [l](/x{i}.md)\n" for i in range(n)
        ),
    ),
    (
        "{:,} setext headings",
        20_000,
        lambda n: "".join(
            f"Title {i} with *words*\n{'=' if i % 2 else '-'}\n\ntext {i % 91}\n\n"
            for i in range(n)
        ),
    ),
    (
        "{:,} headings of every level",
        20_000,
        lambda n: "".join(f"{'#' * (1 + i % 6)} part {i % 40}\n\ntext {i}\n\n" for i in range(n)),
    ),
    (
        "{:,} sections with fenced code",
        10_000,
        lambda n: "".join(
            f"# Part {i}\n\n```py\n# not a heading {i}\nx = [a](b)\n```\n\n~~~\ncode\n~~~\n\n"
            for i in range(n)
        ),
    ),
    (
        "one fenced block of {:,} lines",
        60_000,
        lambda n: "```\n" + "".join(f"call_{i % 300}(x)\n" for i in range(n)) + "```\n",
    ),
    (
        "{:,} list items with emoji",
        40_000,
        lambda n: "".join(f"* 🎉 item {i % 500} done ünïcödé 日本語\n" for i in range(n)),
    ),
    (
        "{:,} sections of one line",
        30_000,
        lambda n: "".join(f"## Heading {i}\n\nword{i % 97} text\n\n" for i in range(n)),
    ),
    (
        "{:,} HTML blocks and comments",
        10_000,
        lambda n: "".join(
            f'<div id="d{i}">\n<p>para {i}</p>\n</div>\n\n<!-- c {i} [x](y) -->\n\n## H{i % 10}\n\n'
            for i in range(n)
        ),
    ),
)


def hostile(scale: int = 1) -> dict[str, bytes]:
    """Each shape, its count (in its name) the full one divided by ``scale``."""
    return {
        name.format(count // scale): make(count // scale).encode() for name, count, make in _SHAPES
    }
