"""The reference's golden wire scenario, replayed through the dispatcher on a fresh content root:
every response must equal its golden byte for byte (timestamps normalized as the goldens are)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from markproto.protocol import wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content
from markproto.server.transport import Peer

_TIMESTAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def normalize(data: bytes) -> bytes:
    return _TIMESTAMP.sub(b"2026-01-01T00:00:00Z", data)


async def test_golden_scenario(tmp_path: Path, golden_dir: Path) -> None:
    steps = [json.loads(line) for line in (golden_dir / "scenario.jsonl").read_text().splitlines()]
    lookup = Lookup()
    content = Content.open(tmp_path, [lookup])
    token = Grant(
        "storetest", hash_token("storetest-write-token"), ("/**",), frozenset({"publish"})
    )
    dispatcher = Dispatcher(Context(content, lookup=lookup, grants=Grants([token])))
    compared: list[str] = []
    try:
        for step in steps:
            out = dispatcher.handle(step["request"].encode(), Peer("127.0.0.1", 1))
            data = out if isinstance(out, bytes) else await out
            name = step["golden"]
            if name is None:
                assert wire.parse_response(data).status == "created", step["request"]
                continue
            want = (golden_dir / f"{name}.golden").read_bytes()
            assert normalize(data) == want, name
            compared.append(name)
    finally:
        content.close()
    assert len(compared) == 16
