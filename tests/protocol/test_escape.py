"""Markdown escaping (SPEC §10.7), Go ``url.PathEscape``, and TOML basic strings."""

from __future__ import annotations

import re
import tomllib
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from markproto.protocol.escape import (
    ESCAPABLE,
    escape,
    escape_cell,
    path_escape,
    toml_string,
    unescape,
)

TEXT = st.text(st.characters(exclude_categories=["Cs"]))


@pytest.mark.parametrize("char", list(ESCAPABLE))
def test_escape_backslashes_each_markdown_character(char: str) -> None:
    assert escape(f"a{char}b") == f"a\\{char}b"


def test_escape_examples() -> None:
    assert escape("/docs/my_file.md") == "/docs/my\\_file.md"
    assert escape("Beta | piped") == "Beta \\| piped"
    assert escape("plain text, 100% safe: <>!{}") == "plain text, 100% safe: <>!{}"


def test_escape_replaces_each_character_once() -> None:
    assert escape("\\*") == "\\\\\\*"
    assert escape("[x](y)") == "\\[x\\]\\(y\\)"


@pytest.mark.parametrize(
    ("raw", "cell"),
    [
        ("a\r\nb", "a b"),
        ("a\rb", "a b"),
        ("a\nb", "a b"),
        ("a\n\nb", "a  b"),
        ("a|b\n_c", "a\\|b \\_c"),
    ],
)
def test_escape_cell_folds_each_line_break_to_one_space(raw: str, cell: str) -> None:
    assert escape_cell(raw) == cell


def test_unescape_keeps_backslashes_before_other_characters() -> None:
    assert unescape("a\\b\\") == "a\\b\\"
    assert unescape("\\\\\\#") == "\\#"


@given(TEXT)
def test_unescape_inverts_escape(s: str) -> None:
    assert unescape(escape(s)) == s


@given(TEXT)
def test_escape_cell_is_escape_after_folding(s: str) -> None:
    assert escape_cell(s) == escape(re.sub(r"\r\n|\r|\n", " ", s))
    assert "\n" not in escape_cell(s)


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        ("a.md", "a.md"),
        ("c d.md", "c%20d.md"),
        ("/docs/a.md", "%2Fdocs%2Fa.md"),
        ("a;b,c?d", "a%3Bb%2Cc%3Fd"),
        ("$&+:=@", "$&+:=@"),
        ("-_.~", "-_.~"),
        ("!*'()", "%21%2A%27%28%29"),
        ("é", "%C3%A9"),
        ("#%[]", "%23%25%5B%5D"),
    ],
)
def test_path_escape_is_go_path_escape(name: str, escaped: str) -> None:
    assert path_escape(name) == escaped


def test_path_escape_writes_undecodable_names_as_their_bytes() -> None:
    assert path_escape(b"a\xffb".decode("utf-8", "surrogateescape")) == "a%FFb"


@given(TEXT)
def test_path_escape_output_is_safe_and_reversible(s: str) -> None:
    escaped = path_escape(s)
    assert re.fullmatch(r"(?:[A-Za-z0-9\-_.~$&+:=@]|%[0-9A-F]{2})*", escaped)
    assert unquote(escaped) == s


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("plain", '"plain"'),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ("\b\t\n\f\r", '"\\b\\t\\n\\f\\r"'),
        ("\x00\x1f\x7f", '"\\u0000\\u001f\\u007f"'),
        ("\x85é€", '"\x85é€"'),  # C1 controls and any other text stay as they are
    ],
)
def test_toml_string(text: str, written: str) -> None:
    assert toml_string(text) == written


@given(TEXT)
def test_toml_string_reads_back_as_itself(text: str) -> None:
    assert tomllib.loads(f"x = {toml_string(text)}") == {"x": text}
    assert tomllib.loads(f"[{toml_string(text)}]\n") == {text: {}}
