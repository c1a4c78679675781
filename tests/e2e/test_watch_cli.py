"""``mark watch`` as a user runs it: a real ``mark`` process against a real ``mark-server``
process, one tab-separated line (or JSON object) per change, resumes with ``-since``, and Ctrl-C
ends it with status 130 and no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue

import pytest
from support.server import DEFAULT_TOKENS, WRITE_TOKEN, ServerProcess, server_process, write_tokens

from markproto.client import Client, Pool, SyncClient, Tokens, Trust


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    (tmp_path / "root").mkdir()
    state = tmp_path / "state"
    state.mkdir()
    tokens = write_tokens(state / "tokens.toml", DEFAULT_TOKENS)
    with server_process(tmp_path / "root", state, tokens_file=tokens) as running:
        yield running


@pytest.fixture
def writer(server: ServerProcess) -> Iterator[SyncClient]:
    authority = f"127.0.0.1:{server.port}"
    client = Client(
        Pool(Trust(cafile=str(server.cert))), tokens=Tokens(overrides={authority: WRITE_TOKEN})
    )
    with SyncClient(client) as sync:
        yield sync


class Watching:
    """A ``mark watch`` process whose stdout lines are collected as they come."""

    def __init__(self, args: list[str], home: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
        env["MARK_HOME"] = str(home)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "markproto.client.cli", "watch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: Queue[str] = Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def line(self, timeout: float = 15.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except Empty:
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"no line from mark watch; stderr: {err}") from None

    def change(self) -> list[str]:
        """The fields of the next line that is not about a readiness marker."""
        while True:
            fields = self.line().split("\t")
            if not fields[2].startswith("/ready/"):
                return fields

    def interrupt(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=15)
        return self.proc.returncode, err


def wait_subscribed(server: ServerProcess, writer: SyncClient, watching: Watching) -> None:
    """The watch is up once a change made now reaches it: publish a marker until one does."""
    for attempt in range(50):
        writer.publish(f"{server.url}/ready/{attempt}.md", b"x\n", expected_version=0)
        try:
            watching.lines.get(timeout=0.3)
            return
        except Empty:
            continue
    raise AssertionError("mark watch never saw a change")


def test_mark_watch_prints_one_line_per_change_and_ctrl_c_exits_130(
    server: ServerProcess, writer: SyncClient, tmp_path: Path
) -> None:
    watching = Watching([f"{server.url}/"], tmp_path / "home")
    wait_subscribed(server, writer, watching)
    writer.publish(f"{server.url}/docs/a.md", b"# A\n", expected_version=0, meta={"agent": "bot"})
    writer.append(f"{server.url}/docs/a.md", b"more\n")
    writer.archive(f"{server.url}/docs/a.md")
    lines = [watching.change() for _ in range(3)]
    assert [fields[1:4] for fields in lines] == [
        ["publish", "/docs/a.md", "1"],
        ["append", "/docs/a.md", "2"],
        ["archive", "/docs/a.md", "2"],
    ]
    assert all(len(fields) == 6 for fields in lines)
    assert lines[0][4].startswith("sha256-") and lines[0][5] == "bot" and lines[1][5] == "bot"
    code, err = watching.interrupt()
    assert code == 130
    assert "Traceback" not in err

    # -since resumes exactly after a line; -json prints one object per line.
    resumed = Watching(["-json", "-since", lines[0][0], f"{server.url}/docs"], tmp_path / "home")
    objects = [json.loads(resumed.line()) for _ in range(2)]
    assert [(o["op"], o["path"], o["version"]) for o in objects] == [
        ("append", "/docs/a.md", 2),
        ("archive", "/docs/a.md", 2),
    ]
    assert set(objects[0]) == {"cursor", "op", "path", "version", "hash", "agent"}
    assert resumed.interrupt()[0] == 130


def test_a_stale_cursor_prints_a_resync_line(server: ServerProcess, tmp_path: Path) -> None:
    watching = Watching(["-since", "oldepoch:7", f"{server.url}/"], tmp_path / "home")
    fields = watching.line().split("\t")
    assert fields[1:] == ["resync", "", "", "", ""] and fields[0].endswith(":0")
    assert watching.interrupt()[0] == 130


def test_a_bad_cursor_is_a_usage_error(server: ServerProcess, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
    env["MARK_HOME"] = str(tmp_path / "home")
    result = subprocess.run(
        [sys.executable, "-m", "markproto.client.cli", "watch", "-since", "nope", server.url],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert result.returncode == 2
    assert "is not a cursor" in result.stderr and "Traceback" not in result.stderr
