"""Server logging: stdlib ``logging`` to stderr as text or JSON lines, and the per-request record.

Request paths come from the network, so everything a client controls is escaped before it reaches
a log line: a path holding ``\\n`` or a terminal escape can never forge or hide a record. Bodies,
metadata values and tokens are never passed to the log at all.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS = ("text", "json")
MAX_PATH_CHARS = 512
"""Longest sanitized path kept in a request record; the rest is cut and marked with ``…``."""

request_log = logging.getLogger("markproto.request")

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def sanitize(text: str, limit: int | None = None) -> str:
    """Escape every non-printable character (``\\n`` -> ``\\x0a``), keeping at most ``limit``.

    Idempotent: the output holds only printable characters, so escaping it again changes nothing.
    """
    if text.isprintable() and (limit is None or len(text) <= limit):
        return text
    out: list[str] = []
    size = 0
    for char in text:
        if char.isprintable():
            piece = char
        else:
            code = ord(char)
            piece = (
                f"\\x{code:02x}"
                if code < 0x100
                else f"\\u{code:04x}"
                if code < 0x10000
                else f"\\U{code:08x}"
            )
        if limit is not None and size + len(piece) > limit:
            out.append("…")
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {
        k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
    }


_second: tuple[datetime | None, str] = (None, "")
"""The last whole second a record was stamped in and its text: records come many a second (one
a request), and ``strftime`` was a fifth of formatting one. One tuple, read once, so a thread
never pairs one second with another's text."""


def _timestamp(record: logging.LogRecord) -> str:
    global _second
    moment = datetime.fromtimestamp(record.created, UTC)
    whole = moment.replace(microsecond=0)
    seen, text = _second
    if whole != seen:
        text = whole.strftime("%Y-%m-%dT%H:%M:%S.")
        _second = (whole, text)
    return f"{text}{moment.microsecond // 1000:03d}Z"


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _extras(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str).translate(_JSON_BREAKS)


_JSON_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})
"""Line separators JSON leaves raw but some line-oriented tools split on."""


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...`` with every value escaped onto one line."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            _timestamp(record),
            record.levelname,
            f"{record.name}:",
            sanitize(record.getMessage()),
        ]
        parts += [f"{key}={_text_value(value)}" for key, value in _extras(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: object) -> str:
    text = sanitize(str(value))
    if not text or " " in text or '"' in text or "=" in text:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def configure(fmt: str, level: str, stream: TextIO | None = None) -> None:
    """Send the root logger to ``stream`` (stderr) as ``text`` or ``json`` at ``level``.

    Calling it again replaces the handler it installed before and leaves others alone.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    handler.set_name("markproto")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "markproto"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[level.lower()])
    # Neither format prints a record's process or thread, which every record (one a request)
    # otherwise looks up, a system call among them.
    logging.logProcesses = logging.logThreads = logging.logMultiprocessing = False
    # aioquic logs every connection at INFO (per-connection noise a journal need not hold).
    quiet = LEVELS[level.lower()] > logging.DEBUG
    logging.getLogger("quic").setLevel(logging.WARNING if quiet else logging.NOTSET)


def log_request(verb: str, path: str, status: str, duration_ms: float, peer_ip: str) -> None:
    """Record one answered request; only the fields below, never its metadata or body.

    The record is made and handed to the handlers directly: `Logger.info` would also walk the
    stack for the caller's file and line, which is always this function (a request's record
    costs the event loop before its answer goes out)."""
    if not request_log.isEnabledFor(logging.INFO):
        return
    extra = {
        "verb": sanitize(verb, 16),
        "path": sanitize(path, MAX_PATH_CHARS),
        "status": sanitize(status, 32),
        "duration_ms": round(duration_ms, 3),
        "peer": sanitize(peer_ip, 64),
    }
    request_log.handle(
        request_log.makeRecord(
            request_log.name, logging.INFO, __file__, 0, "request", (), None, None, extra
        )
    )
