"""What an agent pays for evidence through `mark mcp`: the reference's `lookup-fetch` strategy.

For each question file (``questions_*.json`` here, or ``--questions FILE ...``; format:
``{"corpus": <dir under shared/corpus>, "questions": [{"query", "expected": [path#anchor]}]}``),
the corpus is published into a fresh root and served by the real server in its own process;
`mark mcp` runs as a child process and is driven over stdio by the official MCP SDK's client,
as an agent's client would drive it. One bridge serves every question (the reference starts one
per question so its per-session fetch dedup cannot leak savings; ours has no such dedup).

Strategy `lookup-fetch` (the reference's, oracle-assisted: it knows which section it wants):
one `mark_lookup` (scope `/`, match body), then `mark_fetch` of the rows in rank order (a row's
`path#anchor`, or its path) until the expected section is in hand, at most 5 fetches; a fetch
that returns an outline gets one more fetch of the expected `path#anchor`. With `budget`, the
lookup's own `>>> path/vN#anchor` frames count as evidence and rows already expanded are not
fetched again. Evidence = an expected `path#anchor` fetched or framed, or its whole document.

Reported per question set and strategy: hit rate, the share answered by the first call, mean
calls to evidence (hits only), and tool-result bytes per answered question (all result bytes of
the set / hits), with bytes/4 as approximate tokens.

    tests/bench/run agent   # or: python tests/bench/bench_agent.py [--questions F ...]

Writes the ``Agent evidence cost`` section of docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perfkit
from support import SHARED

from markproto.protocol import bodies
from markproto.protocol.metadata import with_type_default
from markproto.server.storage.store import Store

HERE = Path(__file__).resolve().parent
MAX_FETCHES = 5
BYTES_PER_TOKEN = 4
REFERENCE_TOKENS = 772.75
"""Tool-result tokens per correct answer, the reference's best reader policy (surfaces.md §7.3)."""


@dataclass(frozen=True, slots=True)
class Strategy:
    name: str
    limit: int
    budget: int | None = None


STRATEGIES = (
    Strategy("lookup-fetch, limit 10 (the reference's)", 10),
    Strategy("lookup-fetch, limit 3", 3),
    Strategy("budget 800, limit 3", 3, 800),
    Strategy("budget 1200, limit 3", 3, 1200),
    Strategy("budget 3000, limit 5", 5, 3000),
)


@dataclass
class Outcome:
    hit: bool = False
    first_call: bool = False
    calls: int = 0
    calls_to_evidence: int | None = None
    bytes: int = 0
    texts: list[str] = field(default_factory=list)


def publish(corpus: Path, root: Path) -> int:
    store = Store(root)
    files = sorted(corpus.rglob("*.md"))
    for file in files:
        path = f"/{file.relative_to(corpus)}"
        store.publish(path, file.read_bytes(), with_type_default(path, {}), None)
    return len(files)


def table_rows(text: str) -> list[tuple[str, str]]:
    """``(path, anchor)`` of each row of a lookup result's table."""
    _, _, body = text.partition("\n\n")
    table = body.split("\n>>> ", 1)[0]
    return [(row.path, row.anchor) for row in bodies.parse_lookup(b"\n" + table.encode())]


def framed(text: str) -> set[str]:
    """What a budgeted result carries: ``path#anchor`` per section frame, ``path`` per whole
    document frame."""
    found = set()
    for match in re.finditer(r"^>>> (/\S*?)/v\d+(#\S+)?$", text, re.M):
        found.add(match[1] + (match[2] or ""))
    return found


def in_hand(have: set[str], expected: set[str]) -> bool:
    return bool(have & expected) or any(e.split("#")[0] in have for e in expected)


async def ask(session: Any, outcome: Outcome, tool: str, **args: Any) -> str:
    result = await session.call_tool(tool, args)
    text = result.content[0].text
    if result.is_error:
        raise RuntimeError(f"{tool} {args}: {text}")
    outcome.calls += 1
    outcome.bytes += len(text.encode())
    outcome.texts.append(text)
    return text


async def answer(session: Any, strategy: Strategy, query: str, expected: set[str]) -> Outcome:
    outcome = Outcome()
    args: dict[str, Any] = {"url": "/", "query": query, "match": "body", "limit": strategy.limit}
    if strategy.budget:
        args["budget"] = strategy.budget
    text = await ask(session, outcome, "mark_lookup", **args)
    have = framed(text)
    if in_hand(have, expected):
        outcome.hit = outcome.first_call = True
        outcome.calls_to_evidence = 1
        return outcome
    fetches = 0
    for path, anchor in table_rows(text):
        location = f"{path}#{anchor}" if anchor else path
        if fetches == MAX_FETCHES:
            break
        if location in have:
            continue
        fetched = await ask(session, outcome, "mark_fetch", url=location)
        fetches += 1
        if "the outline follows" in fetched.split("\n\n", 1)[0]:
            wanted = next((e for e in expected if e.split("#")[0] == path and "#" in e), None)
            if wanted is None or fetches == MAX_FETCHES:
                continue
            await ask(session, outcome, "mark_fetch", url=wanted)
            fetches += 1
            location = wanted
        have.add(location)
        if in_hand(have, expected):
            outcome.hit = True
            outcome.calls_to_evidence = outcome.calls
            return outcome
    return outcome


@dataclass(frozen=True, slots=True)
class Summary:
    questions: int
    hits: int
    first: int
    calls: float
    bytes_per_hit: float
    median_bytes: float


def summarize(outcomes: list[Outcome]) -> Summary:
    hits = [o for o in outcomes if o.hit]
    total = sum(o.bytes for o in outcomes)
    return Summary(
        len(outcomes),
        len(hits),
        sum(o.first_call for o in outcomes),
        statistics.fmean(o.calls_to_evidence or 0 for o in hits) if hits else 0.0,
        total / len(hits) if hits else float("inf"),
        statistics.median(o.bytes for o in outcomes),
    )


async def run_set(questions: list[dict[str, Any]], port: int, home: Path) -> dict[str, Summary]:
    from mcp import Client as MCPClient
    from mcp.client.stdio import StdioServerParameters

    env = {"MARK_HOME": str(home), "PATH": os.environ.get("PATH", "")}
    bridge = StdioServerParameters(
        command=sys.executable,
        args=["-m", "markproto.client.cli", "mcp", "-host", f"mark://127.0.0.1:{port}"],
        env=env,
    )
    results: dict[str, Summary] = {}
    async with MCPClient(bridge) as session:
        for strategy in STRATEGIES:
            outcomes = []
            for question in questions:
                expected = set(question["expected"])
                outcomes.append(await answer(session, strategy, question["query"], expected))
            results[strategy.name] = summarize(outcomes)
    return results


def measure(file: Path) -> tuple[str, int, int, dict[str, Summary]]:
    spec = json.loads(file.read_text())
    corpus = SHARED / "corpus" / spec["corpus"]
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        documents = publish(corpus, root)
        # index_workers=0: the bench child is a daemon process, which may not start workers.
        with perfkit.child_server(root, log_level="warn", index_workers=0) as child:
            results = asyncio.run(run_set(spec["questions"], child.port, Path(scratch) / "home"))
    return spec["corpus"], documents, len(spec["questions"]), results


NOTES = """\
Calls to evidence count the lookup as one call (hits only). Bytes are the UTF-8 size of every
tool result's text, summed over the whole question set and divided by the questions answered
(the reference's "tool-result tokens per correct answer", here with bytes/4 standing in for its
o200k tokenizer); a miss costs bytes and answers nothing. The reference reports about
{reference:,.0f} such tokens per correct answer on its own corpus with its best reader policy, so
the figures compare in kind, not question for question. `budget` frames a section's own text (its
heading to the next heading); a fetched `path#anchor` brings the heading's whole subtree.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=Path, nargs="*", help="question files (JSON)")
    args = parser.parse_args()
    files = args.questions or sorted(HERE.glob("questions_*.json"))
    lines = [perfkit.stamp("agent"), ""]
    rows = []
    for file in files:
        started = time.perf_counter()
        corpus, documents, count, results = measure(file)
        elapsed = time.perf_counter() - started
        print(f"{file.name}: {count} questions over {documents} documents in {elapsed:.0f} s")
        for name, s in results.items():
            rows.append(
                [
                    f"{corpus} ({count})",
                    name,
                    f"{s.hits}/{s.questions} ({s.hits / s.questions:.0%})",
                    f"{s.first / s.questions:.0%}",
                    f"{s.calls:.2f}",
                    f"{s.bytes_per_hit:,.0f}",
                    f"{s.bytes_per_hit / BYTES_PER_TOKEN:,.0f}",
                    f"{s.median_bytes:,.0f}",
                ]
            )
    headers = [
        "questions",
        "strategy",
        "hits",
        "answered by the first call",
        "calls to evidence",
        "result bytes per answered question",
        "≈ tokens",
        "median bytes per question",
    ]
    lines += [
        f"`lookup-fetch` through `mark mcp` over stdio (SDK client), at most {MAX_FETCHES} "
        "fetches per question:",
        "",
        perfkit.table(headers, rows),
        "",
        NOTES.format(reference=REFERENCE_TOKENS),
    ]
    print("\n".join(lines))
    perfkit.write_section("Agent evidence cost", "\n".join(lines))


if __name__ == "__main__":
    main()
