"""Server logging: text and JSON lines, and request records a client cannot forge."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.server import logsetup
from markproto.server.logsetup import configure, log_request, sanitize


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    yield out
    for handler in [h for h in root.handlers if h.get_name() == "markproto"]:
        root.removeHandler(handler)
    root.setLevel(level)


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_json_lines_parse(stream: io.StringIO) -> None:
    configure("json", "info", stream)
    log_request("FETCH", "/docs/a.md", "ok", 1.23456, "::1")
    logging.getLogger("markproto.auth").warning("auth: %s", "tokens reloaded", extra={"count": 3})
    first, second = (json.loads(line) for line in lines(stream))
    assert first["level"] == "INFO"
    assert first["logger"] == "markproto.request"
    assert first["message"] == "request"
    assert first["time"].endswith("Z")
    assert (first["verb"], first["path"], first["status"], first["peer"]) == (
        "FETCH",
        "/docs/a.md",
        "ok",
        "::1",
    )
    assert first["duration_ms"] == 1.235
    assert second["message"] == "auth: tokens reloaded"
    assert second["count"] == 3


def test_text_format(stream: io.StringIO) -> None:
    configure("text", "info", stream)
    log_request("LIST", "/my docs/", "not-found", 0.5, "10.0.0.1")
    (line,) = lines(stream)
    assert " INFO markproto.request: request verb=LIST " in line
    assert 'path="/my docs/" status=not-found duration_ms=0.5 peer=10.0.0.1' in line


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize(
    "path",
    ["/a\nINFO forged: request verb=PUBLISH", '/a\r\n{"level": "ERROR"}', "/a\u2028b\x85c\x1b[2J"],
)
def test_a_path_cannot_produce_two_log_lines(stream: io.StringIO, fmt: str, path: str) -> None:
    configure(fmt, "info", stream)
    log_request("FETCH", path, "not-found", 1.0, "::1")
    output = stream.getvalue()
    assert output.count("\n") == 1
    assert len(output.splitlines()) == 1  # str.splitlines also splits on \x85 and \u2028
    assert "\x1b" not in output


def test_path_is_escaped_and_capped(stream: io.StringIO) -> None:
    configure("json", "info", stream)
    log_request("FETCH", "/a\nb" + "x" * 5000, "ok", 1.0, "::1")
    record = json.loads(stream.getvalue())
    assert record["path"].startswith("/a\\x0ab")
    assert len(record["path"]) == logsetup.MAX_PATH_CHARS + 1
    assert record["path"].endswith("…")


def test_request_record_holds_no_body_or_token(stream: io.StringIO) -> None:
    configure("json", "debug", stream)
    log_request("PUBLISH", "/a.md", "created", 2.0, "::1")
    record = json.loads(stream.getvalue())
    assert set(record) == {
        "time",
        "level",
        "logger",
        "message",
        "verb",
        "path",
        "status",
        "duration_ms",
        "peer",
    }


def test_other_messages_are_escaped_in_text(stream: io.StringIO) -> None:
    configure("text", "info", stream)
    logging.getLogger("markproto").info("bad name %r\nnext", "x", extra={"file": "a\nb"})
    (line,) = lines(stream)
    assert "bad name 'x'\\x0anext file=a\\x0ab" in line


def test_level_filters_and_reconfigure_replaces_handler(stream: io.StringIO) -> None:
    configure("text", "warn", stream)
    logging.getLogger("markproto").info("hidden")
    configure("json", "info", stream)
    logging.getLogger("markproto").info("shown")
    assert [json.loads(line)["message"] for line in lines(stream)] == ["shown"]


def test_exceptions_stay_inside_one_json_line(stream: io.StringIO) -> None:
    configure("json", "info", stream)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("markproto").exception("failed")
    (line,) = lines(stream)
    assert "RuntimeError: boom" in json.loads(line)["exc"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="log format"):
        configure("xml", "info")
    with pytest.raises(ValueError, match="log level"):
        configure("text", "loud")


@settings(max_examples=200)
@given(st.text())
def test_sanitize_is_printable_and_idempotent(text: str) -> None:
    clean = sanitize(text)
    assert clean.isprintable()
    assert sanitize(clean) == clean
    assert len(sanitize(text, 40)) <= 41


def test_aioquic_connection_chatter_is_kept_out_below_debug() -> None:
    import io
    import logging

    out = io.StringIO()
    configure("text", "info", out)
    logging.getLogger("quic").info("[abc] connection established")
    assert out.getvalue() == ""
    configure("text", "debug", out)
    logging.getLogger("quic").info("[abc] connection established")
    assert "connection established" in out.getvalue()
    configure("text", "info", out)
