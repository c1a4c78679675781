"""A rule written once gives one answer wherever it is read: every reader of an RFC 3339 time (a
token's ``expires``, FETCH's ``if-modified-since``, LOOKUP's date filters, the token CLI) agrees
with ``protocol.times`` on the edge cases that once split them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.exchange import fetch, publish

from markproto.protocol.grants import Grant, Grants, InvalidGrant, grant_from_entry, hash_token
from markproto.protocol.times import parse_time
from markproto.server.cli import main as server_cli
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.search.catalog import FilterError, parse_filter
from markproto.server.storage.content import Content

HASH = "sha256-" + "0" * 64
EDGES = [
    "2999-01-01T00:00:00Z",
    "2999-01-01T00:00:00,5Z",  # a comma fraction
    "2999-01-01T00:00:00.123456789Z",
    "2999-01-01T12:00:00+05:60",  # offset minutes 60
    "2999-01-01T12:00:00-24:60",
    "2999-01-01T9:00:00Z",  # a one-digit hour
    "2999-01-01T24:00:00Z",  # hour 24
    "2999-01-01T23:59:60Z",  # a leap second
    "2999-01-01t00:00:00z",
    "2999-01-01T00:00:00",  # no zone
    "2999-01-01T00:00:00+25:00",
    "2999-02-29T00:00:00Z",
]


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[Dispatcher]:
    content = Content.open(tmp_path)
    grants = Grants([Grant("w", hash_token("w"), ("/**",), frozenset({"publish"}))])
    yield Dispatcher(Context(content, grants=grants))
    content.close()


@pytest.mark.parametrize("text", EDGES)
async def test_every_reader_of_a_time_agrees(text: str, dispatcher: Dispatcher) -> None:
    moment = parse_time(text)
    try:
        expires = grant_from_entry("x", {"hash": HASH, "expires": text}).expires
    except InvalidGrant:
        expires = None
    assert expires == moment
    if "," not in text:  # a filter splits its clauses at commas before any time is read
        try:
            (clause,) = parse_filter(f"modified-after={text}")
        except FilterError:
            clause = None
        assert (clause.moment if clause else None) == moment
    await publish(dispatcher, "/a.md", b"# A\n", {"auth": "w"})
    answer = await fetch(dispatcher, "/a.md", if_modified_since=text)
    assert answer.status == ("not-modified" if moment is not None else "ok")


@pytest.mark.parametrize("text", EDGES)
def test_the_token_cli_reads_expiry_alike(text: str, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    result = CliRunner().invoke(
        server_cli,
        ["token", "generate", "--label", "x", "--expires", text, "--tokens", str(tokens)],
    )
    assert (result.exit_code == 0) is (parse_time(text) is not None), result.output
