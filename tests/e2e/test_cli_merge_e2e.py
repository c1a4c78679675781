"""``mark publish -on-conflict merge`` against a live server: the same three-way merge the MCP
bridge uses, printed the command line's way. The command runs in click's runner on a thread of
its own (it runs its own event loop), while the server serves on the test's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.server import WRITE_TOKEN, RunningServer, running_server

from markproto.client.cli import main
from markproto.server.devcert import fingerprint

BASE = "# Notes\n\nalpha\n\nbeta\n\ngamma\n"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root") as running:
        yield running


@pytest.fixture
def home(tmp_path: Path, server: RunningServer) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "known_hosts").write_text(
        f"{server.authority} {fingerprint(server.cert.read_bytes())}\n"
    )
    return home


async def mark(home: Path, *args: str) -> tuple[int, str, str]:
    env = {"MARK_HOME": str(home), "MARK_HOST": None, "MARK_AUTH": None}
    result = await asyncio.to_thread(CliRunner(env=env).invoke, main, list(args))
    return result.exit_code, result.stdout, result.stderr


async def publish(home: Path, url: str, body: str, *options: str) -> tuple[int, str, str]:
    return await mark(home, "publish", "-auth", WRITE_TOKEN, *options, "-body", body, url)


async def test_a_clean_merge_is_published_and_an_overlap_printed_to_resolve(
    server: RunningServer, home: Path
) -> None:
    url = f"{server.url}/n.md"
    assert (await publish(home, url, BASE, "-expected-version", "0"))[0] == 0
    assert (await publish(home, url, BASE.replace("alpha", "ALPHA"), "-expected-version", "1"))[
        0
    ] == 0
    clean = await publish(
        home, url, BASE.replace("gamma", "GAMMA"), "-expected-version", "1", "-on-conflict", "merge"
    )
    assert clean == (0, "", "mark: merged your edit of v1 and v2: clean, published\n")
    code, text, _ = await mark(home, "fetch", url)
    assert (code, text) == (0, "# Notes\n\nALPHA\n\nbeta\n\nGAMMA\n")

    mine = BASE.replace("alpha", "mine")  # where the server changed it too
    overlap = await publish(home, url, mine, "-expected-version", "1", "-on-conflict", "merge")
    assert overlap == (
        1,
        "# Notes\n\n<<<<<<< yours (v1 + your edit)\nmine\n=======\nALPHA\n"
        ">>>>>>> server v3\n\nbeta\n\nGAMMA\n",
        "mark: 1 overlapping region(s) between your edit of v1 and v3; the merged text is on "
        "stdout: resolve the <<<<<<< markers and publish it with -expected-version 3\n"
        "mark: conflict\n",
    )
    code, out, _ = await publish(
        home,
        url,
        mine,
        "-json",
        "-expected-version",
        "1",
        "-on-conflict",
        "merge",
    )
    document = json.loads(out)
    assert (code, document["status"], document["merge"]) == (
        1,
        "conflict",
        {"conflicts": 1, "clashes": []},
    )
    assert document["body"].startswith("# Notes\n\n<<<<<<< yours")


async def test_merge_needs_the_version_it_started_from(server: RunningServer, home: Path) -> None:
    code, _, err = await publish(home, f"{server.url}/n.md", "x", "-force", "-on-conflict", "merge")
    assert code == 2
    assert "-on-conflict merge needs -expected-version N (the version you started from)" in err
