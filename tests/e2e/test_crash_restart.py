"""After a kill -9 (no save at stop), a start restores the lookup index the server saved while it
ran and analyses again only the documents changed since (issue 13: a crash must not cost a full
build), and LOOKUP answers from what is current."""

from __future__ import annotations

import re
import time
from pathlib import Path

from support.server import DEFAULT_TOKENS, WRITE_TOKEN, start_server_process, write_tokens

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import wire

BUILT = re.compile(r"lookup index built documents=(\d+) restored=(\d+) analysed=(\d+)")
DOCS = 12


async def _ask(port: int, cert: Path, request: wire.Request) -> wire.Response:
    async with Pool(Trust(cafile=str(cert))) as pool:
        data = await pool.request(f"127.0.0.1:{port}", wire.emit_request(request))
    return wire.parse_response(data)


def _publish(path: str, body: str) -> wire.Request:
    return wire.Request("PUBLISH", path, {"auth": WRITE_TOKEN}, body.encode())


def _wait_for(lines: list[str], pattern: str, seconds: float = 60.0) -> re.Match[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for line in list(lines):
            if found := re.search(pattern, line):
                return found
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} in the server's log:\n" + "".join(lines))


async def test_a_restart_after_kill_9_restores_and_analyses_only_what_changed(
    tmp_path: Path,
) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    tokens = write_tokens(tmp_path / "tokens.toml", DEFAULT_TOKENS)
    server = start_server_process(root, state, tokens_file=tokens)
    try:
        for i in range(DOCS):
            page = _publish(f"/p{i}.md", f"# Page {i}\n\nplain words {i}, alpha.\n")
            assert (await _ask(server.port, server.cert, page)).status == "created"
        _wait_for(server.stderr_lines, r"lookup index saved")  # once the writes paused
        changed = _publish("/p3.md", "# Page 3\n\nnow about zebras.\n")
        assert (await _ask(server.port, server.cert, changed)).status == "created"
        new = _publish("/new.md", "# New\n\nzebras\n")
        assert (await _ask(server.port, server.cert, new)).status == "created"
    finally:
        server.kill()  # no drain, no save at stop
    server = start_server_process(root, state, tokens_file=tokens)
    try:
        found = _wait_for(server.stderr_lines, BUILT.pattern)
        query = wire.Request("LOOKUP", "/", {"query": "zebras", "match": "body"}, b"")
        answer = await _ask(server.port, server.cert, query)
    finally:
        assert server.terminate() == 0
    documents, restored, analysed = map(int, found.groups())
    assert (documents, restored, analysed) == (DOCS + 1, DOCS - 1, 2)
    assert answer.status == "ok"
    assert b"/p3.md" in answer.body and b"/new.md" in answer.body
