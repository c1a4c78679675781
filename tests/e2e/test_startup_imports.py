"""`mark-server serve` on an empty root answers its first FETCH without importing what only a
document, a LOOKUP or a write needs (issue 13: exec to the first answer is mostly imports), and
imports that once it is idle after answering (``app.WARM``), so what it holds settled is what it
holds serving documents.

The child runs with ``-X importtime`` (``PYTHONPROFILEIMPORTTIME``), which names every module on
stderr as it is imported, and logs every request there too (DEBUG): the import lines before the
FETCH's record are what the start and the first request cost. Behaviour, not timing: which
modules, and in what order, never how long they took.
"""

from __future__ import annotations

import time
from pathlib import Path

from support.server import start_server_process

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import wire
from markproto.server.app import WARM

NOT_BEFORE_A_DOCUMENT = (
    "markproto.protocol.links",  # the link rules: their patterns compile at import
    "markproto.protocol.mdoutline",
    "markproto.protocol.mdtokens",  # mistletoe's token classes (WARM does not import them)
    "markproto.protocol.document",
    "markproto.server.handlers.lookup",
    "markproto.server.handlers.links",
    "markproto.server.search.graph",
    "mistletoe",
    "yaml",
    "multiprocessing",  # the build's worker processes
)
NEEDED = ("aioquic.quic.connection", "markproto.server.transport", "markproto.server.dispatch")
"""Imported on the way to the answer: the probe sees the imports at all."""


def _imported(stderr: list[str]) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in list(stderr)
        if line.startswith("import time:") and "|" in line
    }


def _answered(line: str) -> bool:
    return " request " in line and "verb=FETCH" in line and "path=/health" in line


async def test_an_empty_root_answers_fetch_before_importing_the_index_rules(
    tmp_path: Path,
) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    env = {"PYTHONPROFILEIMPORTTIME": "1", "MARK_LOG_LEVEL": "debug"}
    server = start_server_process(root, state, env=env)
    try:
        async with Pool(Trust(cafile=str(server.cert))) as pool:
            data = wire.emit_request(wire.Request("FETCH", "/health", {}, b""))
            answer = wire.parse_response(await pool.request(f"127.0.0.1:{server.port}", data))
            assert answer.status == "ok"
        deadline = time.monotonic() + 60
        while not set(WARM) <= _imported(server.stderr_lines) and time.monotonic() < deadline:
            time.sleep(0.1)
        lines = list(server.stderr_lines)
    finally:
        assert server.terminate() == 0
    answered = next(at for at, line in enumerate(lines) if _answered(line))
    before = _imported(lines[:answered])
    assert set(NEEDED) <= before
    early = sorted(
        name
        for name in before
        if any(name == lazy or name.startswith(lazy + ".") for lazy in NOT_BEFORE_A_DOCUMENT)
    )
    assert early == []
    assert set(WARM) <= _imported(lines)  # warmed up once idle
    assert "multiprocessing" not in _imported(lines)  # an empty build starts no workers
