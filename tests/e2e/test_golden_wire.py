"""The reference's golden scenario replayed over real QUIC: every response byte-identical."""

from __future__ import annotations

import json
import re
from pathlib import Path

from support.server import TokenSpec, running_server

from markproto.client.connection import Pool
from markproto.client.trust import Trust
from markproto.protocol import wire

STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def normalize(data: bytes) -> bytes:
    return STAMP.sub(b"2026-01-01T00:00:00Z", data)


async def test_scenario_matches_every_golden(tmp_path: Path, golden_dir: Path) -> None:
    steps = [json.loads(line) for line in (golden_dir / "scenario.jsonl").read_text().splitlines()]
    tokens = {"storetest": TokenSpec("storetest-write-token", ("/**",), ("publish",))}
    compared = 0
    async with (
        running_server(tmp_path / "root", tokens=tokens) as server,
        Pool(Trust(cafile=str(server.cert))) as pool,
    ):
        for step in steps:
            raw = await pool.request(f"localhost:{server.port}", step["request"].encode())
            if step["golden"] is None:
                assert wire.parse_response(raw).status == "created"
                continue
            expected = (golden_dir / f"{step['golden']}.golden").read_bytes()
            assert normalize(raw) == expected, step["golden"]
            compared += 1
    assert compared == 16
