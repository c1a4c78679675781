"""Stored tokens: the reference's tokens.toml format, strict edits, forgiving reads, selection."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto import durable
from markproto.client import Tokens, TokenStore, TokenStoreError
from markproto.client.tokenstore import (
    format_tokens,
    parse_tokens,
    valid_token,
)

authorities = st.builds(
    lambda h, p: f"{h}:{p}",
    st.one_of(
        st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True),
        st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
    ),
    st.integers(1, 65535),
)
tokens = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc")),
    min_size=1,
    max_size=80,
).filter(valid_token)


@settings(max_examples=200)
@given(st.dictionaries(authorities, tokens, max_size=6))
def test_format_parse_round_trip(pairs: dict[str, str]) -> None:
    assert parse_tokens(format_tokens(pairs)) == pairs


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_parser_raises_only_its_own_error(text: str) -> None:
    try:
        parsed = parse_tokens(text)
    except TokenStoreError:
        return
    assert all(valid_token(t) for t in parsed.values())


def test_reference_format_exactly() -> None:
    text = format_tokens({"localhost:6309": "abc123", "kb.example.com:7000": 'q"\\x'})
    assert text == (
        '["localhost:6309"]\ntoken = "abc123"\n\n["kb.example.com:7000"]\ntoken = "q\\"\\\\x"\n'
    )


def test_parse_lowercases_authorities() -> None:
    assert parse_tokens('["LocalHost:6309"]\ntoken = "t"\n') == {"localhost:6309": "t"}


@pytest.mark.parametrize(
    "text",
    [
        'token = "loose"\n',
        '["a:1"]\nlabel = "no token"\n',
        '["a:1"]\ntoken = 7\n',
        '["a:1"]\ntoken = "two words"\n',
        '["a:1"]\ntoken = ""\n',
        "[broken\n",
    ],
)
def test_malformed_files_are_refused(text: str) -> None:
    with pytest.raises(TokenStoreError):
        parse_tokens(text)


@pytest.mark.parametrize(
    ("token", "ok"),
    [("abc123", True), ("a" * 64, True), ("", False), ("ab c", False), ("abc\n", False)],
)
def test_valid_token(token: str, ok: bool) -> None:
    assert valid_token(token) is ok


def test_add_list_remove(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "home" / "tokens.toml")
    assert store.load() == {}
    store.add("localhost:6309", "first")
    store.add("Other:1", "second")
    store.add("localhost:6309", "third")
    assert store.load() == {"localhost:6309": "third", "other:1": "second"}
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.path.read_text() == (
        '["localhost:6309"]\ntoken = "third"\n\n["other:1"]\ntoken = "second"\n'
    )
    assert store.remove("localhost:6309") is True
    assert store.remove("localhost:6309") is False
    assert store.get("other:1") == "second"
    assert store.get("localhost:6309") is None


def test_add_refuses_a_bad_token(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.toml")
    with pytest.raises(TokenStoreError, match="one word"):
        store.add("a:1", "pasted with newline\n")
    assert not store.path.exists()


def test_broken_file_reads_empty_with_one_warning_and_is_never_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text("[broken\n")
    path.chmod(0o600)
    warnings: list[str] = []
    store = TokenStore(path, warn=warnings.append)
    assert store.load() == {}
    assert store.get("a:1") is None
    assert len(warnings) == 1
    assert str(path) in warnings[0]
    assert "no stored token is used" in warnings[0]
    with pytest.raises(TokenStoreError):
        store.add("a:1", "t")
    with pytest.raises(TokenStoreError):
        store.remove("a:1")
    assert path.read_text() == "[broken\n"


def test_loose_permissions_are_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text('["a:1"]\ntoken = "t"\n')
    path.chmod(0o644)
    warnings: list[str] = []
    assert TokenStore(path, warn=warnings.append).load() == {"a:1": "t"}
    assert warnings == [f"{path} is accessible by other users: chmod 600 it"]


def test_unreadable_or_unwritable_files_are_store_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(TokenStoreError, match="Not a directory"):
        TokenStore(blocker / "tokens.toml").add("a:1", "t")

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(durable, "create", disk_full)
    with pytest.raises(TokenStoreError, match="cannot write: No space left on device"):
        TokenStore(tmp_path / "tokens.toml").add("a:1", "t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_selection_sends_an_override_only_to_its_host(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.toml")
    store.add("stored:1", "from-file")
    store.add("named:1", "file-loses")
    tokens = Tokens(store, {"named:1": "from-flag"})
    assert tokens.for_authority("named:1") == "from-flag"
    assert tokens.for_authority("NAMED:1") == "from-flag"
    assert tokens.for_authority("stored:1") == "from-file"
    assert tokens.for_authority("other:1") is None
    assert Tokens().for_authority("named:1") is None
    assert Tokens(None, {"named:1": "x"}).for_authority("stored:1") is None
