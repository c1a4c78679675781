"""Workloads shared by the reliability tests (seconds) and the benchmarks (minutes): the same code
at two sizes, so what the quick test asserts is what the bench measures at length."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from support.exchange import Remote, ask, seed
from support.quicclient import QuicClient
from support.server import WRITE_TOKEN, running_server

from markproto.client import Pool, TransportError, Trust
from markproto.protocol import wire
from markproto.server.storage.store import Store

LOAD_DOCS = 40
WRITE_DOCS = 8
"""PUBLISH targets, few on purpose: clients race on them with expected versions."""
MIX = (("FETCH", 55), ("LIST", 15), ("LOOKUP", 20), ("PUBLISH", 10))
EXPECTED = {
    "FETCH": {"ok"},
    "LIST": {"ok"},
    "LOOKUP": {"ok"},
    "PUBLISH": {"created", "conflict"},
}
"""What each verb of the mix may answer; anything else is an error."""

_WORDS = (  # noqa: SIM905 - a sentence of words reads better than 23 quoted ones
    "alpha beta gamma delta quic stream version markdown catalog index section anchor"
    " publish fetch lookup latency budget server client token archive append history"
).split()


def seed_load_root(root: Path, docs: int = LOAD_DOCS) -> None:
    """A content root the mixed load reads: ``docs`` documents under /load/ with a few sections."""
    rng = random.Random(7)

    def doc(i: int) -> tuple[str, str, dict[str, str]]:
        parts = [f"# Document {i}\n"]
        for s in range(4):
            words = " ".join(rng.choice(_WORDS) for _ in range(60))
            parts.append(f"\n## Section {s} {rng.choice(_WORDS)}\n\n{words}\n")
        return f"/load/doc{i}.md", "".join(parts), {}

    seed(root, [doc(i) for i in range(docs)])


SOAK_ROTATION = [
    wire.emit_request(wire.Request(verb, path, meta, b""))
    for verb, path, meta in [
        ("FETCH", "/load/doc3.md", {}),
        ("FETCH", "/load/missing.md", {}),
        ("LIST", "/load/", {}),
        ("VERSIONS", "/load/doc0.md", {}),
        ("LOOKUP", "/", {"query": "quic stream"}),
        ("LOOKUP", "/load/", {"query": "catalog anchor", "match": "body"}),
        ("FETCH", "/health", {}),
    ]
]
"""The soak's requests, sent in turn: every read verb, a miss (logged at INFO) and the health
check, over a root made by `seed_load_root`."""


async def sequential(client: QuicClient, n: int, statuses: Counter[str]) -> None:
    """``n`` requests of the soak rotation, one at a time on one connection."""
    for i in range(n):
        data = await client.request(SOAK_ROTATION[i % len(SOAK_ROTATION)])
        statuses[wire.parse_response(data).status] += 1


@dataclass
class LoadReport:
    """Per-verb latencies (ms) and statuses, and every unexpected outcome."""

    latency: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def record(self, verb: str, status: str, ms: float) -> None:
        self.latency.setdefault(verb, []).append(ms)
        self.statuses.setdefault(verb, Counter())[status] += 1
        if status not in EXPECTED[verb]:
            self.errors.append(f"{verb}: {status}")

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.latency.values())


def _request(rng: random.Random, verb: str, versions: dict[str, int], token: str) -> wire.Request:
    if verb == "FETCH":
        return wire.Request("FETCH", f"/load/doc{rng.randrange(LOAD_DOCS)}.md", {}, b"")
    if verb == "LIST":
        return wire.Request("LIST", "/load/", {}, b"")
    if verb == "LOOKUP":
        meta = {"query": " ".join(rng.sample(_WORDS, 2))}
        if rng.random() < 0.5:
            meta["match"] = "body"
        return wire.Request("LOOKUP", "/", meta, b"")
    path = f"/load/w{rng.randrange(WRITE_DOCS)}.md"
    body = f"# {path}\n\n{rng.random()} {' '.join(rng.sample(_WORDS, 8))}\n".encode()
    meta = {"auth": token, "expected-version": str(versions.get(path, 0))}
    return wire.Request("PUBLISH", path, meta, body)


async def _client(
    pool: Pool,
    authority: str,
    seed: int,
    done: Callable[[], bool],
    token: str,
    report: LoadReport,
) -> None:
    rng = random.Random(seed)
    verbs = [verb for verb, _ in MIX]
    weights = [weight for _, weight in MIX]
    versions: dict[str, int] = {}  # this client's idea of each write target's version
    while not done():
        verb = rng.choices(verbs, weights)[0]
        request = _request(rng, verb, versions, token)
        started = time.perf_counter()
        try:
            data = await pool.request(authority, wire.emit_request(request))
        except TransportError as exc:
            report.errors.append(f"{verb}: {type(exc).__name__}: {exc}")
            continue
        response = wire.parse_response(data)
        report.record(verb, response.status, (time.perf_counter() - started) * 1000)
        if response.status == "created":
            versions[request.path] = int(response.meta["version"])
        elif response.status == "conflict":
            versions[request.path] = int(response.meta["server-version"])


async def mixed_load(
    authority: str,
    cert: Path,
    *,
    clients: int,
    seconds: float,
    token: str,
    seed: int = 1,
    until: Callable[[LoadReport], bool] | None = None,
) -> LoadReport:
    """``clients`` concurrent clients, each its own `Pool` (its own connection), each sending
    the FETCH / LIST / LOOKUP / PUBLISH mix one request at a time for ``seconds``, or until
    ``until`` holds for the report so far (``seconds`` then only bounds a broken server)."""
    report = LoadReport()
    pools = [Pool(Trust(cafile=str(cert)), request_timeout=30.0) for _ in range(clients)]
    deadline = time.monotonic() + seconds

    def done() -> bool:
        return time.monotonic() >= deadline or (until is not None and until(report))

    try:
        await asyncio.gather(
            *(
                _client(pool, authority, seed * 1000 + i, done, token, report)
                for i, pool in enumerate(pools)
            )
        )
    finally:
        await asyncio.gather(*(pool.close() for pool in pools))
    return report


def summary_rows(
    report: LoadReport, pct: Callable[[Sequence[float], float], float]
) -> list[list[object]]:
    """Rows of verb, count, p50 ms, p99 ms and statuses, for a table."""
    rows: list[list[object]] = []
    for verb, _ in MIX:
        values = report.latency.get(verb, [])
        if not values:
            continue
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(report.statuses[verb].items()))
        rows.append(
            [
                verb,
                len(values),
                f"{pct(values, 50):.1f}",
                f"{pct(values, 99):.1f}",
                statuses,
            ]
        )
    return rows


# -- faults -------------------------------------------------------------------------------------


def mount_refusal() -> str | None:
    """Why this process cannot mount a small tmpfs (not root, no CAP_SYS_ADMIN), or None."""
    if os.geteuid() != 0:
        return "mounting a filesystem needs root"
    with tempfile.TemporaryDirectory() as probe:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe], capture_output=True
        )
        if done.returncode != 0:
            return f"mount refused: {done.stderr.decode().strip()}"
        subprocess.run(["umount", probe], check=True)
    return None


@contextlib.contextmanager
def mounted(target: Path, *args: str) -> Iterator[Path]:
    """``mount <args> <target>`` for the duration; unmounted (lazily, if still busy) after."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *args, str(target)], check=True, capture_output=True)
    try:
        yield target
    finally:
        if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(target)], capture_output=True)


def tmpfs(target: Path, size: str) -> contextlib.AbstractContextManager[Path]:
    return mounted(target, "-t", "tmpfs", "-o", f"size={size}", "tmpfs")


def resize(target: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(target)], check=True)


@contextlib.contextmanager
def read_only_view(source: Path, target: Path) -> Iterator[Path]:
    """``source`` seen read-only at ``target`` (a bind mount remounted ro): root cannot write
    there either, unlike a ``chmod``."""
    with mounted(target, "--bind", str(source)):
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        yield target


def temporaries(root: Path) -> list[Path]:
    """Files an interrupted write leaves behind (the store's ``.tmp-`` names)."""
    return list(root.rglob(".tmp-*"))


@dataclass
class DiskReport:
    acknowledged: dict[tuple[str, int], bytes] = field(default_factory=dict)
    """Every (path, version) the server answered ``created`` for, with its body."""
    refusals: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    left_while_running: int = 0
    left_after_restart: int = 0
    created_after_space_returned: int = 0


async def check_acknowledged(pool: Pool, authority: str, report: DiskReport, when: str) -> None:
    """Every acknowledged version is served byte for byte, and each document's current version
    is its last acknowledged one: nothing half-written is ever served."""
    latest: dict[str, int] = {}
    for (path, number), body in report.acknowledged.items():
        latest[path] = max(latest.get(path, 0), number)
        got = await ask(Remote(pool, authority), "FETCH", f"{path}/v{number}")
        if got.status != "ok" or got.body != body:
            report.problems.append(f"{when}: {path}/v{number} answered {got.status}")
    for path, number in latest.items():
        got = await ask(Remote(pool, authority), "FETCH", path)
        if got.status != "ok" or got.meta.get("version") != str(number):
            report.problems.append(
                f"{when}: {path} serves {got.meta.get('version')}, not v{number}"
            )
        elif got.body != report.acknowledged[(path, number)]:
            report.problems.append(f"{when}: {path} serves other bytes than v{number}")


async def full_disk(
    base: Path, *, size: str = "2m", doc_bytes: int = 150_000, refusals: int = 6
) -> DiskReport:
    """Fill a ``size`` tmpfs content root with PUBLISH (new documents and new versions of one)
    until ``refusals`` writes were refused; check reads while full, give space back, write
    again, then restart (startup recovery) and check everything acknowledged again."""
    report = DiskReport()
    rng = random.Random(5)
    with tmpfs(base / "disk", size) as root:
        async with running_server(root) as server, Pool(Trust(cafile=str(server.cert))) as pool:
            authority = server.authority
            i = 0
            while sum(report.refusals.values()) < refusals and i < 10_000:
                path = "/full/busy.md" if i % 3 == 0 else f"/full/doc{i}.md"
                text = " ".join(rng.choice(_WORDS) for _ in range(doc_bytes // 7))
                body = f"# {path} {i}\n\n{text}\n".encode()
                got = await ask(
                    Remote(pool, authority), "PUBLISH", path, {"auth": WRITE_TOKEN}, body
                )
                if got.status == "created":
                    report.acknowledged[(path, int(got.meta["version"]))] = body
                elif got.status == "server-error":
                    report.refusals[got.body.decode().strip().rsplit("\n", 1)[-1]] += 1
                else:
                    report.problems.append(f"PUBLISH {path}: {got.status}")
                i += 1
            await check_acknowledged(pool, authority, report, "while full")
            resize(root, "64m")
            for j in range(3):
                body = f"# after {j}\n".encode()
                got = await ask(
                    Remote(pool, authority),
                    "PUBLISH",
                    f"/full/after{j}.md",
                    {"auth": WRITE_TOKEN},
                    body,
                )
                if got.status == "created":
                    report.acknowledged[(f"/full/after{j}.md", 1)] = body
                    report.created_after_space_returned += 1
            report.left_while_running = len(temporaries(root))
        async with running_server(root) as server, Pool(Trust(cafile=str(server.cert))) as pool:
            await check_acknowledged(pool, server.authority, report, "after restart")
            report.left_after_restart = len(temporaries(root))
    return report


async def read_only_root(base: Path) -> list[str]:
    """A content root on a read-only mount: the server starts (a stray temporary it cannot
    remove included), serves reads and refuses each write with a clear ``server-error``; with
    ``--read-only`` too, writes get ``not-permitted``. Returns the problems found."""
    problems: list[str] = []
    source = base / "rw"
    source.mkdir()
    store = Store(source)
    store.publish("/ro/a.md", b"# A\n\nread me\n", {}, None)
    store.publish("/ro/a.md", b"# A\n\nread me again\n", {}, None)
    stray = source / "ro" / "versions" / "a.md" / ".tmp-v3-0123456789ab"
    stray.write_bytes(b"half a version")
    writes = [
        ("PUBLISH", "/ro/a.md", b"# A\n\nnew\n"),
        ("PUBLISH", "/ro/new.md", b"# New\n"),
        ("APPEND", "/ro/a.md", b"more\n"),
        ("ARCHIVE", "/ro/a.md", b""),
    ]
    with read_only_view(source, base / "ro-view") as root:
        for read_only, status, message in [
            (False, "server-error", "storage is not writable"),
            (True, "not-permitted", "server is read-only"),
        ]:
            async with (
                running_server(root, read_only=read_only) as server,
                Pool(Trust(cafile=str(server.cert))) as pool,
            ):
                got = await ask(Remote(pool, server.authority), "FETCH", "/ro/a.md")
                if got.status != "ok" or got.body != b"# A\n\nread me again\n":
                    problems.append(f"read-only={read_only}: FETCH answered {got.status}")
                for verb, path, body in writes:
                    meta = {"auth": WRITE_TOKEN}
                    if verb == "APPEND":
                        meta["expected-version"] = "2"
                    got = await ask(Remote(pool, server.authority), verb, path, meta, body)
                    said = got.body.decode(errors="replace")
                    if got.status != status or message not in said:
                        problems.append(
                            f"read-only={read_only}: {verb} {path}: {got.status} {said!r}"
                        )
    if not stray.exists():
        problems.append("the stray temporary vanished from a read-only mount")
    return problems
