"""The LIST cursor codec and each of its wire error messages (SPEC §5.2)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from markproto.protocol import cursor, status
from markproto.protocol.cursor import decode_cursor, encode_cursor
from markproto.protocol.errors import InvalidCursor


def raw_cursor(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_the_reference_example() -> None:
    assert encode_cursor("/docs", False, "a.md") == "AQAABS9kb2NzYS5tZA"
    assert base64.urlsafe_b64decode("AQAABS9kb2NzYS5tZA==") == b"\x01\x00\x00\x05/docsa.md"
    assert decode_cursor("AQAABS9kb2NzYS5tZA", "/docs", False) == "a.md"


def test_include_archived_sets_the_flag() -> None:
    token = encode_cursor("/docs", True, "a.md")
    assert base64.urlsafe_b64decode(token + "==")[:2] == b"\x01\x01"
    assert decode_cursor(token, "/docs", True) == "a.md"


def test_the_encoding_is_url_safe_without_padding() -> None:
    token = encode_cursor("/d", False, "\xff\xfe?>")
    assert "=" not in token
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_an_empty_cursor_means_the_first_page() -> None:
    assert decode_cursor("", "/docs", False) == ""


def test_line_breaks_are_ignored_as_go_does() -> None:
    assert decode_cursor("AQAABS9k\nb2NzYS5tZA\r\n", "/docs", False) == "a.md"


def test_encode_refuses_what_could_never_decode() -> None:
    with pytest.raises(ValueError, match="entry name"):
        encode_cursor("/docs", False, "")
    with pytest.raises(ValueError, match="path"):
        encode_cursor("/" + "x" * 4087, False, "a")


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("AQAABS9kb2NzYS5tZA==", status.INVALID_CURSOR),
        ("AQAABS9kb2NzYS5tZA+/", status.INVALID_CURSOR),
        ("AQAABS9kb2NzYS5tZ", status.INVALID_CURSOR),
        ("AQAA!S9kb2NzYS5tZA", status.INVALID_CURSOR),
        (raw_cursor(b"\x01\x00\x00\x01"), status.INVALID_CURSOR),
        (raw_cursor(b"\x01\x00\x00\x00ab"), status.INVALID_CURSOR),
        (raw_cursor(b"\x01\x00\x00\x05/docs"), status.INVALID_CURSOR),
        (raw_cursor(b"\x01\x00\x00\x09/docsa.md"), status.INVALID_CURSOR),
        (raw_cursor(b"\x02\x00\x00\x05/docsa.md"), status.UNSUPPORTED_CURSOR),
        (raw_cursor(b"\x01\x02\x00\x05/docsa.md"), status.UNSUPPORTED_CURSOR),
        (raw_cursor(b"\x01\x00\x00\x04/doca.md"), status.CURSOR_MISMATCH),
        (raw_cursor(b"\x01\x01\x00\x05/docsa.md"), status.CURSOR_MISMATCH),
        (raw_cursor(b"\x01\x00\x00\x06/docs/a.md"), status.CURSOR_MISMATCH),
        ("A" * 10906, status.CURSOR_TOO_LONG),
        ("!" * 10906, status.CURSOR_TOO_LONG),
    ],
)
def test_each_error_message(token: str, message: str) -> None:
    with pytest.raises(InvalidCursor) as caught:
        decode_cursor(token, "/docs", False)
    assert str(caught.value) == message


def test_the_limit_is_twice_the_longest_path_plus_the_header() -> None:
    assert cursor.MAX_DECODED == 8178
    fits = raw_cursor(b"\x01\x00\x00\x05/docs" + b"n" * (8178 - 9))
    assert decode_cursor(fits, "/docs", False) == "n" * 8169
    with pytest.raises(InvalidCursor, match="exceeds limit"):
        decode_cursor(raw_cursor(b"\x01\x00\x00\x05/docs" + b"n" * (8178 - 8)), "/docs", False)


PATHS = st.text(st.characters(exclude_categories=["Cs"]), max_size=40).map(lambda p: "/" + p)
NAMES = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)


@given(PATHS, st.booleans(), NAMES)
def test_decode_inverts_encode(path: str, archived: bool, name: str) -> None:
    token = encode_cursor(path, archived, name)
    assert decode_cursor(token, path, archived) == name
    with pytest.raises(InvalidCursor, match="does not match"):
        decode_cursor(token, path, not archived)


@given(st.one_of(st.text(), st.binary().map(raw_cursor)), PATHS, st.booleans())
def test_arbitrary_cursors_raise_only_invalid_cursor(token: str, path: str, flag: bool) -> None:
    try:
        decode_cursor(token, path, flag)
    except InvalidCursor as exc:
        message = str(exc)
    else:
        return
    assert message in {
        status.INVALID_CURSOR,
        status.UNSUPPORTED_CURSOR,
        status.CURSOR_MISMATCH,
        status.CURSOR_TOO_LONG,
    }
