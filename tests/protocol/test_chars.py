"""Control characters: one set, C0 and DEL, and every rule that refuses them agrees on it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from markproto.protocol import chars, paths, url, wire
from markproto.protocol.errors import InvalidURL, MalformedRequest

CONTROLS = [chr(c) for c in range(0x20)] + ["\x7f"]


def test_the_set_is_c0_and_del() -> None:
    assert frozenset(CONTROLS) == chars.CONTROL
    assert not chars.has_control("\x80\x9f\x85 é")  # C1 controls are text


@given(st.characters(codec="utf-8"))
def test_every_spelling_agrees(ch: str) -> None:
    control = ch in chars.CONTROL
    assert chars.has_control(f"a{ch}b") is control
    assert chars.has_control(f"a{ch}b", tab_ok=True) is (control and ch != "\t")
    assert (chars.PATH_CONTROL_BYTES.search(ch.encode()) is not None) is (control and ch != "\t")


@pytest.mark.parametrize("ch", CONTROLS)
def test_the_rules_that_refuse_them(ch: str) -> None:
    """A request path, a document path and a URL path refuse each (TAB aside); a whole URL
    refuses TAB too."""
    if ch not in "\t\n":  # LF ends the request line
        with pytest.raises(MalformedRequest):
            wire.parse_request(f"FETCH /a{ch}b\n".encode())
    if ch != "\t":
        assert paths.writable_reason(f"/a{ch}b") == "path contains a control character"
        with pytest.raises(InvalidURL, match="control character"):
            url.parse_url("mark://h/a" + "%" + f"{ord(ch):02X}")
    with pytest.raises(InvalidURL, match="control character"):
        url.parse_url(f"mark://h/a{ch}b")
