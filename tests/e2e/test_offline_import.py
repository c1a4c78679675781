"""``mark-server import`` beside a server running on the same root: while clients publish to the
same documents, imports run again and again; no document or chain is ever corrupt, every write
is answered ``created`` or ``conflict``, and the server sees the imported documents by its
change scan."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.server import DEFAULT_TOKENS, WRITE_TOKEN, server_process, write_tokens

from markproto.client import Client, Pool, Tokens, Trust
from markproto.protocol import storefmt
from markproto.server.storage.store import Store

SHARED = 8
"""Documents both the clients and the imports write."""


def folder_of(base: Path, round_: int) -> Path:
    folder = base / f"src-{round_}"
    (folder / "shared").mkdir(parents=True)
    (folder / "own").mkdir()
    for n in range(SHARED):
        (folder / f"shared/{n}.md").write_text(f"# Shared {n}\n\nimport round {round_}\n")
    for n in range(20):
        (folder / f"own/{n}.md").write_text(f"---\ntags: [r{round_ % 2}]\n---\n# Own {n}\n")
    return folder


@pytest.mark.slow
async def test_imports_and_a_running_server_never_corrupt_a_document(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    state.mkdir()
    tokens = write_tokens(state / "tokens.toml", DEFAULT_TOKENS)
    folders = [folder_of(tmp_path, r) for r in range(3)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
    with server_process(root, state, tokens_file=tokens, args=["--scan-interval", "0.5"]) as srv:
        client = Client(
            Pool(Trust(cafile=str(srv.cert))),
            tokens=Tokens(None, {f"127.0.0.1:{srv.port}": WRITE_TOKEN}),
        )
        statuses: list[str] = []
        stop = asyncio.Event()

        async def publisher(n: int) -> None:
            url = f"{srv.url}/shared/{n}.md"
            round_ = 0
            while not stop.is_set():
                current = await client.fetch(url)
                expected = current.version if current.status == "ok" else 0
                body = f"# Shared {n}\n\nclient round {round_}\n".encode()
                result = await client.publish(url, body, expected_version=expected)
                statuses.append(result.status)
                round_ += 1

        async with client:
            writers = [asyncio.create_task(publisher(n)) for n in range(SHARED)]
            for folder in folders:
                done = await asyncio.to_thread(
                    subprocess.run,
                    [
                        sys.executable,
                        "-m",
                        "markproto.server.cli",
                        "import",
                        str(folder),
                        "--root",
                        str(root),
                    ],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=120,
                    check=False,
                )
                assert "0 refused" in done.stdout or "changed meanwhile" in done.stdout, done
            stop.set()
            await asyncio.gather(*writers)
            for _ in range(40):  # the change scan runs every 0.5 s
                seen = await client.fetch(f"{srv.url}/own/19.md")
                # the last round's version (round 0's has the same tags: the scan may not
                # have seen the later rounds yet)
                if seen.status == "ok" and seen.version == 3:
                    break
                await asyncio.sleep(0.25)
            assert (seen.status, seen.meta.get("tags"), seen.version) == ("ok", "r0", 3)
            for n in range(SHARED):
                history = await client.versions(f"{srv.url}/shared/{n}.md")
                assert history.meta["chain-valid"] == "true", n
        assert set(statuses) <= {"created", "conflict"} and "created" in statuses
        srv.terminate()
    store = Store(root)
    for kind, path in store.layout.walk():
        if kind == "doc":
            history = store.history(path)
            assert history is not None and store.chain_valid(history), path
            for file in history.files:
                storefmt.parse_version((root / file).read_bytes())
    assert not list(root.rglob(".tmp-*"))
