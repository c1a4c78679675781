"""``Client.from_environment``: MARK_HOME, MARK_HOST and MARK_AUTH read the way ``mark`` reads
them, checked through the client it returns and end to end against a real server, with the
token stored by ``mark token add``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.server import WRITE_TOKEN, RunningServer, running_server

from markproto.client import Cache, Client, InvalidURL, TokenStore, Trust, UsageError, environment
from markproto.client.cli import main
from markproto.protocol.url import parse_url
from markproto.server import devcert


def environ(home: Path, **variables: str) -> dict[str, str]:
    return {"MARK_HOME": str(home), **{f"MARK_{k.upper()}": v for k, v in variables.items()}}


def test_state_lives_in_mark_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    client = Client.from_environment(environ=environ(home))
    assert client.pool.trust.known_hosts == home / "known_hosts"
    assert client.cache is not None and client.cache.directory == home / "cache"
    assert client.tokens.store is not None and client.tokens.store.path == home / "tokens.toml"
    assert client.default_host is None
    assert Client.from_environment(cache=False, environ=environ(home)).cache is None


def test_the_defaults_of_the_parts_follow_mark_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARK_HOME", str(tmp_path / "elsewhere"))
    assert Trust().known_hosts == tmp_path / "elsewhere" / "known_hosts"
    assert TokenStore().path == tmp_path / "elsewhere" / "tokens.toml"
    assert Cache().directory == tmp_path / "elsewhere" / "cache"
    assert Client().pool.trust.known_hosts == tmp_path / "elsewhere" / "known_hosts"
    monkeypatch.delenv("MARK_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert Trust().known_hosts == tmp_path / "user/.config/markproto/known_hosts"
    assert Cache().directory == tmp_path / "user/.cache/markproto"


def test_state_goes_to_mark_home_then_an_existing_dot_mark_then_xdg(tmp_path: Path) -> None:
    user = tmp_path / "user"
    xdg = {"HOME": str(user), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    xdg["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    assert environment.home(xdg) == tmp_path / "cfg/markproto"
    assert environment.cache_dir(xdg) == tmp_path / "cache/markproto"
    relative = {"HOME": str(user), "XDG_CONFIG_HOME": "cfg", "XDG_CACHE_HOME": "c"}
    assert environment.home(relative) == user / ".config/markproto"  # relative XDG is ignored
    assert environment.cache_dir(relative) == user / ".cache/markproto"
    (user / ".mark").mkdir(parents=True)  # the reference client's home, shared with it
    assert environment.home(xdg) == user / ".mark"
    assert environment.cache_dir(xdg) == user / ".mark/cache"
    explicit = {**xdg, "MARK_HOME": str(tmp_path / "explicit")}
    assert environment.home(explicit) == tmp_path / "explicit"
    assert environment.cache_dir(explicit) == tmp_path / "explicit/cache"
    client = Client.from_environment(environ=xdg)
    assert client.cache is not None
    assert client.cache.directory == user / ".mark/cache"


def test_an_explicit_token_goes_to_the_named_server_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    TokenStore(home / "tokens.toml").add("stored.example:6309", "stored-token")
    variables = environ(home, host="mark://named.example:7000", auth="env-token")
    client = Client.from_environment(environ=variables)
    assert client.default_host == "mark://named.example:7000"
    assert client.url("/a.md").authority == "named.example:7000"
    assert client.tokens.for_authority("named.example:7000") == "env-token"
    assert client.tokens.for_authority("other.example:6309") is None
    assert client.tokens.for_authority("stored.example:6309") == "stored-token"
    given = Client.from_environment("mark://given.example", token="own", environ=variables)
    assert given.tokens.for_authority("given.example:6309") == "own"
    assert given.tokens.for_authority("named.example:7000") is None
    document = parse_url("mark://given.example/a/b.md")  # as the CLI passes its URL argument
    via_env = Client.from_environment(document, environ=variables)
    assert via_env.tokens.for_authority("given.example:6309") == "env-token"


def test_mark_auth_without_a_server_is_sent_nowhere(tmp_path: Path) -> None:
    for token in ("env-token", "not even a token"):
        client = Client.from_environment(environ=environ(tmp_path, auth=token))
        assert client.tokens.overrides == {}


@pytest.mark.parametrize(
    ("kwargs", "variables", "message"),
    [
        ({"token": "two words", "host": "mark://h"}, {}, "one word"),
        ({}, {"host": "mark://h", "auth": "bad\ttoken"}, "one word"),
        ({"token": "secret"}, {}, "needs the host it is for"),
        ({}, {"host": "mark://h/with/path"}, "without a path"),
        ({"host": "ftp://h"}, {}, "unsupported scheme"),
    ],
)
def test_what_cannot_be_set_up_is_a_usage_error(
    tmp_path: Path, kwargs: dict[str, str], variables: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        Client.from_environment(environ=environ(tmp_path, **variables), **kwargs)  # type: ignore[arg-type]


def test_a_bad_host_is_an_invalid_url(tmp_path: Path) -> None:
    with pytest.raises(InvalidURL):
        Client.from_environment(environ=environ(tmp_path, host="mark://[bad"))


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root") as running:
        yield running


async def test_the_token_mark_stores_is_the_one_the_library_sends(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("MARK_HOME", str(home))
    monkeypatch.setenv("MARK_HOST", server.url)
    monkeypatch.delenv("MARK_AUTH", raising=False)
    added = CliRunner().invoke(main, ["token", "add", server.url, WRITE_TOKEN])
    assert added.exit_code == 0, added.output
    notes: list[str] = []
    async with Client.from_environment(note=notes.append) as client:
        created = await client.publish("/a.md", b"# A\n", expected_version=0)
        assert created.raise_for_status().version == 1
    pin = devcert.fingerprint(server.cert.read_bytes())
    assert notes == [
        f"{server.authority}: pinned certificate {pin} in {home}/known_hosts (loopback)"
    ]
    async with Client.from_environment(environ={"MARK_HOME": str(tmp_path / "empty")}) as bare:
        refused = await bare.publish(server.url + "/b.md", b"# B\n", expected_version=0)
        assert refused.status == "unauthorized"
