"""The kill -9 write storm: writers race a SIGKILL; after each restart every acknowledged version
must be there, byte for byte, and every chain must verify. Shared by the test suite (a few kills)
and the benchmark suite (many)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

from markproto.client import Pool, TransportError, Trust
from markproto.protocol import wire

from .server import WRITE_TOKEN, TokenSpec, start_server_process, write_tokens


@dataclass
class StormReport:
    kills: int = 0
    acknowledged: int = 0
    unknown: int = 0
    problems: list[str] = field(default_factory=list)


async def _exchange(pool: Pool, authority: str, request: wire.Request) -> wire.Response:
    return wire.parse_response(await pool.request(authority, wire.emit_request(request)))


async def _writer(
    pool: Pool,
    authority: str,
    path: str,
    acked: dict[str, dict[int, bytes]],
    report: StormReport,
    stop: asyncio.Event,
) -> None:
    versions = acked.setdefault(path, {})
    expected = max(versions, default=0)
    while not stop.is_set():
        body = f"# {path}\n\nversion {expected + 1}, {random.random()}\n".encode()
        meta = {"auth": WRITE_TOKEN, "expected-version": str(expected)}
        try:
            response = await _exchange(pool, authority, wire.Request("PUBLISH", path, meta, body))
        except TransportError:
            report.unknown += 1
            return
        if response.status == "created":
            expected = int(response.meta["version"])
            versions[expected] = body
            report.acknowledged += 1
        elif response.status == "conflict":
            expected = int(response.meta["server-version"])
        else:
            report.problems.append(f"{path}: unexpected {response.status}")
            return


async def _verify(
    pool: Pool, authority: str, acked: dict[str, dict[int, bytes]], report: StormReport
) -> None:
    for path, versions in acked.items():
        history = await _exchange(pool, authority, wire.Request("VERSIONS", path, {}, b""))
        if versions and history.status != "ok":
            report.problems.append(f"{path}: VERSIONS answered {history.status}")
            continue
        if versions and history.meta.get("chain-valid") != "true":
            report.problems.append(f"{path}: chain broken")
        for number, body in versions.items():
            got = await _exchange(
                pool, authority, wire.Request("FETCH", f"{path}/v{number}", {}, b"")
            )
            if got.status != "ok" or got.body != body:
                report.problems.append(f"{path}/v{number}: acknowledged but {got.status}")


async def write_storm(tmp: Path, kills: int, writers: int = 4, seed: int = 1) -> StormReport:
    """Run ``kills`` rounds of: start the server, write from ``writers`` clients, SIGKILL it at a
    random moment, restart, check every acknowledged version. Returns what it found."""
    rng = random.Random(seed)
    root, state = tmp / "root", tmp / "state"
    root.mkdir(parents=True, exist_ok=True)
    state.mkdir(exist_ok=True)
    tokens = write_tokens(state / "tokens.toml", {"writer": TokenSpec(WRITE_TOKEN)})
    acked: dict[str, dict[int, bytes]] = {}
    report = StormReport()
    paths = [f"/storm/doc{i}.md" for i in range(writers)]
    for _ in range(kills + 1):
        server = start_server_process(root, state, tokens_file=tokens)
        authority = f"127.0.0.1:{server.port}"
        try:
            async with Pool(Trust(cafile=str(server.cert)), request_timeout=5.0) as pool:
                await _verify(pool, authority, acked, report)
                if report.kills == kills:
                    break
                stop = asyncio.Event()
                tasks = [
                    asyncio.create_task(_writer(pool, authority, p, acked, report, stop))
                    for p in paths
                ]
                # the kill lands while writes are flowing: after the first one of the round is
                # acknowledged (a fresh server's first write loads the markdown parser)
                round_start = report.acknowledged
                for _ in range(200):
                    if report.acknowledged > round_start or all(t.done() for t in tasks):
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(rng.uniform(0.05, 0.5))
                server.kill()
                report.kills += 1
                stop.set()
                await asyncio.gather(*tasks)
        finally:
            if server.proc.poll() is None:
                server.kill()
    return report
