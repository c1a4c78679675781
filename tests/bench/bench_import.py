"""Import: the FastAPI corpus five times over (775 documents) into an empty server, by `mark
import`'s pipeline and offline by `mark-server import`, against a baseline of one sequential
PUBLISH per file measured in the same run.

Online: the real server in its own process (CPU 0, token file, logs at INFO to a file), the client
on CPU 1. The baseline publishes each file and waits for the answer before the next (the body and
its frontmatter metadata, ``expected-version: 0``), which is what a loop over ``mark publish``
amounts to without the process start-ups. The import is `client.transfer.import_folder`: LIST of
the empty prefix, then the PUBLISHes 32 at a time on one connection, sent as the folder is read,
which the server commits in groups. Each measurement gets a fresh root and server, settled
first (`settle`); rounds alternate. A second import of the same folder (every file unchanged:
LISTs and FETCHes, no write) is timed too.

Offline: `server.importer.run` into a fresh root in this process, files walked and read included.

    tests/bench/run import        # or: python tests/bench/bench_import.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from pathlib import Path

import perfkit

TOKEN = "bench-import-token"
COPIES = 5
ONLINE_TARGET = 5.0
OFFLINE_TARGET = 500.0
ROUNDS = 5
"""Rounds by default: the import's round-to-round spread is the disk's (its fsyncs and other
work's), and 3 rounds left best and median each a round's luck."""
SETTLE_QUIET = 0.5
"""Seconds a settled server's CPU stays (nearly) idle."""
SETTLE_TIMEOUT = 20.0
REQUEST_TIMEOUT = 120.0
"""Seconds a request may take: a LOOKUP right after the import waits for its index work."""


def corpus_copies(base: Path) -> Path:
    corpus = perfkit.REPO.parent / "shared" / "corpus" / "fastapi-docs"
    if not corpus.is_dir():
        raise SystemExit(f"{corpus} is absent: the corpus lives beside the checkout")
    folder = base / "src"
    for n in range(COPIES):
        shutil.copytree(corpus, folder / f"copy{n}")
    return folder


def client(child: perfkit.Child):  # type: ignore[no-untyped-def]
    from markproto.client import Client, Pool, Tokens, Trust

    authority = f"127.0.0.1:{child.port}"
    pool = Pool(Trust(cafile=str(child.cert)), request_timeout=REQUEST_TIMEOUT)
    return Client(pool, tokens=Tokens(None, {authority: TOKEN}))


def settle(child: perfkit.Child) -> None:
    """Let a fresh server finish starting: one request, then wait until it has imported what its
    first write and LOOKUP need (`app.WARM`, once `app.WARM_DELAY` has passed since a first
    request; about 0.5 s of CPU without saved bytecode) and its CPU has stayed idle for a while.
    Without it that start-up work lands inside whichever measurement comes first."""
    from markproto.server.app import WARM_DELAY

    async def ask() -> None:
        async with client(child) as c:
            await c.fetch(f"mark://127.0.0.1:{child.port}/health")

    asyncio.run(ask())
    time.sleep(WARM_DELAY)
    deadline = time.monotonic() + SETTLE_TIMEOUT
    used = perfkit.cpu_seconds(child.pid)
    while time.monotonic() < deadline:
        time.sleep(SETTLE_QUIET)
        used, before = perfkit.cpu_seconds(child.pid), used
        if used - before <= 0.02:
            return


async def sequential(child: perfkit.Child, folder: Path) -> tuple[float, int]:
    from markproto.tree.source import Source, walk

    files = [item for item in walk(folder) if isinstance(item, Source)]
    async with client(child) as c:
        start = time.perf_counter()
        for item in files:
            url = f"mark://127.0.0.1:{child.port}{item.path}"
            result = await c.publish(url, item.body, expected_version=0, meta=item.meta)
            assert result.status == "created", result
        return time.perf_counter() - start, len(files)


async def pipelined(child: perfkit.Child, folder: Path) -> tuple[float, float, float, int]:
    from markproto.client.transfer import import_folder
    from markproto.protocol.url import parse_url

    target = parse_url(f"mark://127.0.0.1:{child.port}/")
    async with client(child) as c:
        start = time.perf_counter()
        first = await import_folder(c, folder, target)
        imported = time.perf_counter()
        await c.lookup(target, "FastAPI")  # waits for the import's held index work
        middle = time.perf_counter()
        second = await import_folder(c, folder, target)
        end = time.perf_counter()
    assert not first.refused and second.writes == 0, (first.refused, second.writes)
    return imported - start, middle - imported, end - middle, len(first.created)


def offline(base: Path, folder: Path, round_: int) -> tuple[float, int]:
    from markproto.server import importer

    root = base / f"offline-{round_}"
    root.mkdir()
    start = time.perf_counter()
    report = importer.run(root, folder)
    return time.perf_counter() - start, len(report.created)


def fresh_server(base: Path, name: str):  # type: ignore[no-untyped-def]
    """The server with its default limits (rate limiter and upload bucket on, as a user runs it)."""
    from markproto.server.config import ServerConfig

    defaults = ServerConfig(base, base)
    root = base / name
    root.mkdir()
    return perfkit.child_server(
        root,
        tokens=perfkit.token_file(base / f"{name}.toml", TOKEN),
        rate_limit=defaults.rate_limit,
        rate_burst=defaults.rate_burst,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    perfkit.pin(perfkit.CLIENT_CPU)
    base = perfkit.scratch("bench-import-")
    folder = corpus_copies(base)
    baseline: list[float] = []
    online: list[float] = []
    again: list[float] = []
    indexing: list[float] = []
    local: list[float] = []
    documents = 0
    cpus: dict[str, list[tuple[float, float]]] = {"baseline": [], "import": []}
    for round_ in range(args.rounds):
        with fresh_server(base, f"seq-{round_}") as child:
            settle(child)
            cpu, mine = perfkit.cpu_seconds(child.pid), time.process_time()
            seconds, documents = asyncio.run(sequential(child, folder))
            baseline.append(seconds)
            cpus["baseline"].append(
                (perfkit.cpu_seconds(child.pid) - cpu, time.process_time() - mine)
            )
        with fresh_server(base, f"imp-{round_}") as child:
            settle(child)
            cpu, mine = perfkit.cpu_seconds(child.pid), time.process_time()
            seconds, caught_up, second, created = asyncio.run(pipelined(child, folder))
            assert created == documents
            online.append(seconds)
            indexing.append(caught_up)
            again.append(second)
            cpus["import"].append(
                (perfkit.cpu_seconds(child.pid) - cpu, time.process_time() - mine)
            )
        seconds, created = offline(base, folder, round_)
        assert created == documents
        local.append(seconds)
        print(
            f"round {round_ + 1}: sequential {baseline[-1]:.2f} s, import {online[-1]:.2f} s,"
            f" then LOOKUP {indexing[-1]:.2f} s, again {again[-1]:.2f} s,"
            f" offline {local[-1]:.2f} s"
        )
    shutil.rmtree(base, ignore_errors=True)
    load.append(os.getloadavg()[0])
    best = min(baseline)

    def row(job: str, times: list[float], cpu: str = "") -> list[object]:
        return [
            job,
            f"{min(times):.2f}",
            f"{perfkit.median(times):.2f}",
            f"{documents / min(times):,.0f}",
            f"{best / min(times):.1f}x",
            cpu,
        ]

    def per_doc(job: str) -> str:
        server, client = min(cpus[job])
        return f"{1000 * server / documents:.1f} / {1000 * client / documents:.1f}"

    text = perfkit.table(
        [
            "job",
            "best s",
            "median s",
            "documents/s",
            "vs sequential PUBLISH",
            "CPU ms/doc server / client",
        ],
        [
            row("sequential PUBLISH, one per file (baseline)", baseline, per_doc("baseline")),
            row("`mark import` (pipelined, group-committed)", online, per_doc("import")),
            row("`mark import` again (unchanged: no write)", again),
            row("`mark-server import` (offline)", local),
        ],
    )
    speedup = best / min(online)
    typical = perfkit.median(baseline) / perfkit.median(online)
    rate = documents / min(local)
    verdict = (
        f"Online import {speedup:.1f}x the baseline by best times, {typical:.1f}x by medians"
        f" (target >= {ONLINE_TARGET:g}x); offline {rate:,.0f} documents/s"
        f" (target >= {OFFLINE_TARGET:g})."
    )
    print(text)
    print(verdict)
    if not args.no_doc:
        notes = f"""
The FastAPI corpus five times over ({documents} documents, {COPIES} x 155 files of about 1.5 MB)
into an empty content root (in `perfkit.scratch`: under {perfkit.SCRATCH}, flagged so ext4
spreads the roots over inode groups of their own; in the system's temporary folder, on this
sandbox's journal-less ext4, each new file cost 0.4-1 ms of kernel CPU stepping over inodes
other test suites had just deleted); best and median of {args.rounds} rounds, each
on a fresh root and server, settled before the clock starts (one request, then its start-up
imports done and its CPU idle for {SETTLE_QUIET:g} s: a start without saved bytecode compiles
for about 0.5 s of CPU one second after the first request, which otherwise fell inside the
import's 2 s). Online: the
server in its own process with its default limits (rate limiter 50 requests a second, upload
bucket 1 MiB a second, both per address, which a connection that showed a publish token leaves
behind: SPEC §1.3), CPU 0, token file, logs at INFO to a file; the client on CPU 1 (over
loopback, so it sends 16 KiB datagrams: SPEC §1.2).
The baseline publishes one file at a time and waits for each answer; `mark import`
(`client.transfer.import_folder`) lists the empty prefix, then reads the folder and sends its
PUBLISHes as it goes, 32 at a time on one connection, and the server commits each group of
queued writes with one filesystem sync (`Store.batch`) instead of four or five fsyncs per write.
Offline: `server.importer.run` in the bench process, batches of 256 writes per commit, the
folder's walk, reads and frontmatter parsing included. After the import, a LOOKUP waits for
the index work the burst held back ({min(indexing):.1f} s at best, median
{perfkit.median(indexing):.1f} s; not in the import's time), then the unchanged re-import runs
on the settled server (a LIST and a FETCH a document, each with the publish token, so the rate
limiter lets them by). The import's CPU column counts the server's whole round: the import, the
index work it held back, and the re-import. Requests may take {REQUEST_TIMEOUT:g} s here (the
client's default is 10 s). Load average {load[0]:.1f} at the start and {load[1]:.1f} at the end
(two cores shared with other work: the ratios, measured interleaved, are what carries over).
"""
        perfkit.write_section(
            "Import", f"{perfkit.stamp('import')}\n{notes}\n{text}\n\n{verdict}\n"
        )
    if speedup < ONLINE_TARGET or rate < OFFLINE_TARGET:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
