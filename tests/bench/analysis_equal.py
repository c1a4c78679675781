"""Whether two checkouts analyse bodies alike: ``analyze`` (and ``analyze_many`` in batches) of
every corpus body, the hostile shapes of ``bench_analysis`` and generated markdown, serialised.
A dev check for work on the analysis' speed, not a bench (``run`` skips it) nor a test.

    /path/to/baseline/python tests/bench/analysis_equal.py save /tmp/want.pkl
    .venv/bin/python tests/bench/analysis_equal.py compare /tmp/want.pkl

Run both with the same ``PYTHONHASHSEED``: the order of a run's terms follows the iteration
order of heading word sets, so it differs between processes otherwise. The comparison says how
many records differ at all, how many once each run's terms are sorted, and how many once the
runs are merged as the index merges them (what decides: how a long section's postings are cut
into runs is not the index's content).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
import sys
import zlib
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analysis import shapes
from support.shapes import hostile

from markproto.server.search.analysis import (
    FLAG_BITS,
    Analysis,
    Outline,
    Postings,
    analyze,
    analyze_many,
    combine,
)

LINES = [
    lambda r: "#" * r.randint(1, 7) + r.choice([" ", "", "\t"]) + text(r),
    lambda r: text(r),
    lambda r: text(r),
    lambda r: "",
    lambda r: r.choice(["===", "---", "- - -", "***", "___", "=", "-", "  ---  "]),
    lambda r: r.choice(["```", "~~~", "````", "```py", "  ```", "    ```"]),
    lambda r: r.choice(["> ", ">", "> > ", ">>"]) + text(r),
    lambda r: r.choice(["- ", "* ", "+ ", "1. ", "2) ", "10. ", "-", "  - ", "    - "]) + text(r),
    lambda r: " " * r.randint(1, 8) + text(r),
    lambda r: "\t" + text(r),
    lambda r: r.choice(["<div>", "</div>", "<pre>", "</pre>", "<!--", "-->", "<a href='/x.md'>"]),
    lambda r: f"[{word(r)}]: /{word(r)}.md" + r.choice(["", " 'title'", ' "t"']),
    lambda r: "| " + " | ".join(word(r) for _ in range(r.randint(1, 4))) + " |",
    lambda r: r.choice(["|---|---|", "| :-- | --: |", "|-"]),
    lambda r: "# " + text(r) + " #" + r.choice(["", "#", " {#id .c}"]),
]
WORDS = [
    *[
        "the",
        "a",
        "prometheus",
        "FastAPI",
        "café",
        "naïve",
        "日本",
        "x",
        "ab",
        "foo_bar",
        "foo-bar",
        "it's",
        "e.g.",
        "U.S.A",
        "a1",
        "12",
    ],
    *[
        "1.5",
        "v2.0",
        "–",
        "—",
        "🎉",
        "\x1c",
        "\xa0",
        "a\u2003b",
        "Ǆ",
        "İ",
        "ß",
        "ﬁ",
        "K",
        "https://x.org/p",
        "www.e.com",
    ],
    *[
        "mark://h/p.md",
        "<https://a.b>",
        "[l](/p.md)",
        "![i](p.png)",
        "[r]",
        "[r][x]",
        "[[Wiki]]",
        "[[W#H|l]]",
    ],
    *[
        "`code`",
        "``c`d``",
        "**b**",
        "*i*",
        "_u_",
        "~~s~~",
        "\\*",
        "\\[",
        "&amp;",
        "&#35;",
        "<b>",
        "</b>",
        "<br/>",
        "{#anchor}",
    ],
    *[
        "<a",
        'name="n">',
        "{",
        "}",
        "|",
        ":",
        "(",
        ")",
        "[",
        "]",
        "<",
        ">",
        "#",
        "=",
        "--",
        "...",
        "x.y.z",
        "a/b/c",
    ],
    "w" * 40,
    "longword" * 5,
]


def word(r: random.Random) -> str:
    return r.choice(WORDS)


def text(r: random.Random) -> str:
    return " ".join(word(r) for _ in range(r.randint(0, 9)))


def generated(count: int = 1500, seed: int = 1) -> list[bytes]:
    r = random.Random(seed)
    out = []
    for _ in range(count):
        end = r.choice(["\n", "\r\n", "\n", "\n"])
        body = end.join(r.choice(LINES)(r) for _ in range(r.randint(1, 60))) + r.choice([end, ""])
        if r.random() < 0.1:
            body = "---\ntitle: t\n---\n" + body
        data = body.encode()
        if r.random() < 0.03:
            data = data[: len(data) // 2] + b"\xff\xfe" + data[len(data) // 2 :]
        out.append(data)
    return out


def outline_values(outline: Outline) -> tuple[object, ...]:
    """An outline as what it tells (each section's numbers, heading and anchor), however its
    numbers are held."""
    sections = range(len(outline))
    return (
        "Outline",
        tuple(outline.lengths),
        tuple(outline.heads),
        tuple(map(outline.span, sections)),
        tuple(map(outline.heading, sections)),
        tuple(map(outline.anchor, sections)),
        outline.preamble,
    )


def canon(value: object, sort_runs: bool) -> object:
    """A value of plain tuples, arrays as their type code and bytes; a run's terms sorted."""
    if isinstance(value, Outline):
        return outline_values(value)
    if sort_runs and isinstance(value, Postings):
        terms = value.terms.split("\n") if value.terms else []
        at, pairs = 0, []
        for term, count in zip(terms, value.counts, strict=True):
            pairs.append((term, value.entries[at : at + count].tobytes()))
            at += count
        return ("Postings", value.counts.typecode, value.entries.typecode, tuple(sorted(pairs)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value).__name__, *(canon(getattr(value, f.name), sort_runs) for f in fields))
    if isinstance(value, array):
        return (value.typecode, value.tobytes())
    if isinstance(value, tuple | list):
        return tuple(canon(item, sort_runs) for item in value)
    return value


def merged(value: object) -> object:
    """A value with its runs of postings merged into one (each term's entries in order, an
    entry split between two runs combined, as the index appends them): how the index sees it,
    whatever the runs' sizes."""
    runs: list[Postings] = []

    def rest(part: object) -> object:
        if isinstance(part, Outline):
            return outline_values(part)
        if isinstance(part, Postings):
            runs.append(part)
            return None
        if dataclasses.is_dataclass(part) and not isinstance(part, type):
            return (
                type(part).__name__,
                *(rest(getattr(part, f.name)) for f in dataclasses.fields(part)),
            )
        if isinstance(part, array):
            return (part.typecode, part.tobytes())
        if isinstance(part, tuple | list):
            if part and all(isinstance(item, Postings) for item in part):
                runs.extend(part)  # however many runs, one set of postings
                return "postings"
            return tuple(rest(item) for item in part)
        return part

    others = rest(value)
    terms: dict[str, list[int]] = {}
    for run in runs:
        at = 0
        for term, count in zip(run.terms.split("\n") if run.terms else [], run.counts, strict=True):
            part = list(run.entries[at : at + count])
            at += count
            found = terms.setdefault(term, [])
            if found and found[-1] >> FLAG_BITS == part[0] >> FLAG_BITS:
                found[-1] = combine(found[-1], part.pop(0))
            found += part
    return others, tuple(sorted((term, tuple(entries)) for term, entries in terms.items()))


def plain(value: object) -> object:
    """An analysis (or ``analyze_many``'s answer) with its links' records decompressed: how
    they are compressed (the compressor's window and memory level) is not their content."""
    if isinstance(value, Analysis):
        return dataclasses.replace(
            value, links=zlib.decompress(value.links) if value.links else b""
        )
    if isinstance(value, tuple | list):
        return type(value)(plain(item) for item in value)
    return value


def records() -> dict[str, tuple[object, object, object]]:
    """Each analysis as it is (its links' records decompressed), with its runs' terms sorted,
    and with its runs merged."""
    bodies = {f"{name}/{n}": one for name, group in shapes().items() for n, one in enumerate(group)}
    bodies.update((f"generated/{n}", body) for n, body in enumerate(generated()))
    out = {}
    for name, body in bodies.items():
        found = plain(analyze(body))
        out[name] = (canon(found, False), canon(found, True), merged(found))
    batch = [body for name, body in bodies.items() if not name.startswith(tuple(hostile()))]
    for start in range(0, len(batch), 40):
        found_many = plain(analyze_many(batch[start : start + 40]))
        out[f"batch/{start}"] = (
            canon(found_many, False),
            canon(found_many, True),
            merged(found_many),
        )
    return out


def main() -> None:
    mode, path = sys.argv[1], Path(sys.argv[2])
    got = records()
    if mode == "save":
        path.write_bytes(pickle.dumps(got))
        print(f"saved {len(got)} analyses")
        return
    want = pickle.loads(path.read_bytes())
    exact = sum(want[name][0] != value[0] for name, value in got.items())
    runs = [name for name, value in got.items() if want[name][1] != value[1]]
    differ = [name for name, value in got.items() if want[name][2] != value[2]]
    seed = os.environ.get("PYTHONHASHSEED", "random")
    print(
        f"{len(got)} analyses: {len(differ)} differ, {len(runs)} differ in how their postings"
        f" are cut into runs, {exact} differ in term order (seed {seed})"
    )
    for name in differ[:10]:
        print("  differs:", name)
    for name in runs[:10]:
        print("  runs differ:", name)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
