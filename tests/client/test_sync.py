"""``SyncClient`` against a real ``mark-server`` process on loopback: from plain code and from
inside a running event loop (a notebook, an async framework), with the signatures and docstrings
of the coroutines it runs."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.server import DEFAULT_TOKENS, WRITE_TOKEN, ServerProcess, server_process, write_tokens

from markproto.client import (
    AnchorNotFound,
    Client,
    LookupResult,
    Result,
    StatusError,
    SyncClient,
    Unreachable,
    UsageError,
)

DOC = b"# Alpha\n\nFirst body.\n\n## Details\n\nThe papaya reverts.\n"
VERBS = ("fetch", "manifest", "list", "versions", "lookup", "publish", "append", "archive")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server in its own process: a SyncClient blocks the calling thread, and in the running
    loop test that thread is the test's event loop, which an in-process server would share."""
    base = tmp_path_factory.mktemp("sync")
    state = base / "state"
    state.mkdir()
    (base / "root").mkdir()
    tokens = write_tokens(state / "tokens.toml", DEFAULT_TOKENS)
    with server_process(base / "root", state, tokens_file=tokens) as running:
        yield running


def sync_client(server: ServerProcess, home: Path) -> SyncClient:
    """As ``mark`` sets itself up: loopback certificates are pinned in ``home``."""
    environ = {"MARK_HOME": str(home), "MARK_HOST": server.url}
    client = Client.from_environment(token=WRITE_TOKEN, environ=environ, note=lambda _: None)
    return SyncClient(client)


def verbs_in_turn(client: SyncClient, path: str) -> None:
    created = client.publish(path, DOC, expected_version=0, meta={"tags": "fruit"})
    assert isinstance(created, Result)
    assert (created.status, created.version) == ("created", 1)
    assert client.fetch(path).body == DOC
    assert client.fetch(path + "#details").body == b"## Details\n\nThe papaya reverts.\n"
    assert client.append(path, b"More.\n").version == 2
    assert client.versions(path).meta["total"] == "2"
    folder = path.rsplit("/", 1)[0] + "/"
    assert client.list(folder).status == "ok"
    found = client.lookup(folder, "papaya", match="body")
    assert isinstance(found, LookupResult)
    assert [(row.path, row.anchor) for row in found.rows] == [(path, "details")]
    assert client.archive(path).meta["archived"] == "true"
    assert client.manifest(path).status == "not-found"
    with pytest.raises(StatusError, match=r"^archived: "):
        client.fetch(path).raise_for_status()


def test_from_plain_code(server: ServerProcess, tmp_path: Path) -> None:
    threads = threading.active_count()
    with sync_client(server, tmp_path / "home") as client:
        verbs_in_turn(client, "/plain/a.md")
    assert threading.active_count() == threads
    assert (tmp_path / "home" / "known_hosts").exists()


async def test_inside_a_running_event_loop(server: ServerProcess, tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    with sync_client(server, tmp_path / "home") as client:
        verbs_in_turn(client, "/looped/a.md")
    assert asyncio.get_running_loop() is loop and loop.is_running()


def test_failures_raise_in_the_calling_thread(server: ServerProcess, tmp_path: Path) -> None:
    with sync_client(server, tmp_path / "home") as client:
        client.publish("/f/a.md", DOC, expected_version=None)
        with pytest.raises(AnchorNotFound, match="no section #nope"):
            client.fetch("/f/a.md#nope")
        with pytest.raises(Unreachable, match="connection refused"):
            client.fetch("mark://127.0.0.1:1/a.md")
        with pytest.raises(UsageError, match="page size"):
            client.list("/", page_size=0)
    with pytest.raises(UsageError, match="closed"):
        client.fetch("/f/a.md")
    client.close()  # a second close is harmless


@pytest.mark.parametrize("verb", VERBS)
def test_methods_keep_the_signature_and_docstring(verb: str) -> None:
    blocking, coroutine = getattr(SyncClient, verb), getattr(Client, verb)
    assert inspect.signature(blocking) == inspect.signature(coroutine)
    assert blocking.__doc__ == coroutine.__doc__
    assert blocking.__doc__
    assert not inspect.iscoroutinefunction(blocking)
