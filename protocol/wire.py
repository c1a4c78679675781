"""Requests and responses as bytes (SPEC §2 and §3): parse, emit, and the frontmatter split.

A ``Request`` or ``Response`` is valid by construction, as h11's events are: the constructor
refuses what the wire cannot carry (an unknown verb, a path that is not a request path, metadata
that is not UTF-8 text, a ``status`` key beside the status), so whatever is emitted parses back
to the value it came from. The parser checks the raw bytes first, in the reference's order, so
malformed input keeps its exact error.

Size failures and grammar failures are different exceptions because the reference answers them
differently: ``RequestTooLarge`` gets ``server-error`` ``could not read request`` and
``MalformedRequest`` gets ``bad-request`` ``bad request``. A request line that is not valid UTF-8
is malformed (the reference would carry the raw bytes into a path that can never exist).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from markproto.protocol import yamlfm
from markproto.protocol.chars import PATH_CONTROL_BYTES, has_control
from markproto.protocol.errors import (
    MalformedRequest,
    MalformedResponse,
    ProtocolError,
    RequestTooLarge,
)
from markproto.protocol.limits import (
    MAX_BODY,
    MAX_FRONTMATTER,
    MAX_PATH,
    MAX_PAYLOAD,
    MAX_REQUEST_LINE,
)
from markproto.protocol.status import title

VERBS: Final = frozenset(
    {"FETCH", "LIST", "VERSIONS", "PUBLISH", "ARCHIVE", "APPEND", "LOOKUP", "WATCH"}
)
"""The verbs this project parses; any other is malformed."""

_VERB_BY_BYTES = {verb.encode(): verb for verb in VERBS}
_FENCE = b"---\n"
_CLOSE = b"\n---\n"
_CLOSE_AT_EOF = b"\n---"
_EMPTY_BLOCK = b"---\n\n---\n"
_PLAIN_PATH = re.compile(r"/[ -~]*")
"""A path of printable ASCII: no control character, and as many bytes as characters."""
_INVALID_PATH = "invalid request path"
_PATH_NOT_UTF8 = "request path is not valid UTF-8"


@dataclass(frozen=True, slots=True)
class Request:
    """One request. Raises ``MalformedRequest`` for a verb outside ``VERBS``, a path that does
    not start with ``/``, holds a control character other than TAB, is not UTF-8 text or is
    over ``MAX_PATH`` bytes, and metadata that is not UTF-8 text or has the key ``<<``."""

    verb: str
    path: str
    """The raw request path, before canonicalization."""
    meta: dict[str, str]
    body: bytes

    def __post_init__(self) -> None:
        if self.verb not in VERBS:
            raise MalformedRequest(f"unknown verb {self.verb!r}")
        if _PLAIN_PATH.fullmatch(self.path) is None or len(self.path) > MAX_PATH:
            _check_path(self.path)
        if self.meta:
            _check_meta(self.meta, MalformedRequest)
            if yamlfm.MERGE_KEY in self.meta:  # emitted plain, it would read back as a merge
                raise MalformedRequest(yamlfm.MERGE_KEY_REFUSED)


@dataclass(frozen=True, slots=True)
class Response:
    """One response. Raises ``MalformedResponse`` for an empty status, a ``status`` key in
    ``meta`` (the status field is that key on the wire) and metadata that is not UTF-8 text."""

    status: str
    meta: dict[str, str]
    """Every frontmatter key except ``status``."""
    body: bytes

    def __post_init__(self) -> None:
        if not self.status or "status" in self.meta:
            raise MalformedResponse("a response has one non-empty status, outside its metadata")
        _check_meta(self.meta, MalformedResponse)
        try:
            self.status.encode()
        except UnicodeEncodeError:
            raise MalformedResponse("the status is not valid UTF-8 text") from None


def _check_path(path: str) -> None:
    """The full path rule, for paths that are not plain printable ASCII."""
    if not path.startswith("/") or has_control(path, tab_ok=True):
        raise MalformedRequest(_INVALID_PATH)
    try:
        size = len(path.encode())
    except UnicodeEncodeError:
        raise MalformedRequest(_PATH_NOT_UTF8) from None
    if size > MAX_PATH:
        raise MalformedRequest(_INVALID_PATH)


def _check_meta(meta: dict[str, str], error: type[ProtocolError]) -> None:
    """Keys and values are ``str`` and encode as UTF-8 (a lone surrogate does not)."""
    try:
        "".join(meta).encode()
        "".join(meta.values()).encode()
    except TypeError:
        raise error("metadata keys and values must be strings") from None
    except UnicodeEncodeError:
        raise error("metadata is not valid UTF-8 text") from None


def split_frontmatter(
    data: bytes, max_block: int | None = MAX_FRONTMATTER
) -> tuple[bytes | None, bytes]:
    """Split ``data`` into (metadata block or None, body) at the fences.

    A block opens only with ``---\\n`` at offset 0 and closes at the first ``\\n---\\n`` after
    that fence, or with ``\\n---`` at the very end; so ``---\\n---\\n`` is unclosed and the
    shortest block is ``---\\n\\n---\\n``. Unclosed is ``MalformedRequest``; a block over
    ``max_block`` bytes is ``RequestTooLarge``.
    """
    if not data.startswith(_FENCE):
        return None, data
    end = data.find(_CLOSE, len(_FENCE))
    if end >= 0:
        block, body = data[len(_FENCE) : end], data[end + len(_CLOSE) :]
    elif len(data) >= len(_FENCE) + len(_CLOSE_AT_EOF) and data.endswith(_CLOSE_AT_EOF):
        block, body = data[len(_FENCE) : -len(_CLOSE_AT_EOF)], b""
    else:
        raise MalformedRequest("unclosed frontmatter")
    if max_block is not None and len(block) > max_block:
        raise RequestTooLarge(f"metadata block exceeds {max_block} bytes")
    return block, body


def parse_request(data: bytes) -> Request:
    """Parse one whole request stream."""
    if not data:
        raise RequestTooLarge("empty request")
    newline = data.find(b"\n", 0, MAX_REQUEST_LINE + 1)
    if newline < 0:
        if len(data) > MAX_REQUEST_LINE:
            raise RequestTooLarge(f"request line exceeds {MAX_REQUEST_LINE} bytes")
        line, payload = data, b""
    else:
        line, payload = data[:newline], data[newline + 1 :]
    if line.endswith(b"\r"):
        line = line[:-1]
    raw_verb, space, raw_path = line.partition(b" ")
    verb = _VERB_BY_BYTES.get(raw_verb)
    if not space or verb is None:
        raise MalformedRequest("request line is not '<VERB> <path>' with a known verb")
    if (
        not raw_path.startswith(b"/")
        or len(raw_path) > MAX_PATH
        or PATH_CONTROL_BYTES.search(raw_path) is not None
    ):
        raise MalformedRequest(_INVALID_PATH)
    try:
        path = raw_path.decode()
    except UnicodeDecodeError as exc:
        raise MalformedRequest(_PATH_NOT_UTF8) from exc
    if len(payload) > MAX_PAYLOAD:
        raise RequestTooLarge(f"request exceeds {MAX_PAYLOAD} bytes after the request line")
    block, body = split_frontmatter(payload)
    if len(body) > MAX_BODY:
        raise RequestTooLarge(f"request body exceeds {MAX_BODY} bytes")
    return Request(verb, path, {} if block is None else yamlfm.load(block), body)


def emit_request(request: Request) -> bytes:
    """The request as the reference client writes it. With no metadata, a body that itself
    starts with a fence gets an empty block first, or it would be read as frontmatter."""
    head = f"{request.verb} {request.path}\n".encode()
    if request.meta:
        head += _FENCE + yamlfm.emit(request.meta).encode() + _FENCE
    elif request.body.startswith(_FENCE):
        head += _EMPTY_BLOCK
    return head + request.body


def parse_response(data: bytes) -> Response:
    """Parse one whole response; ``MalformedResponse`` when it has no readable status."""
    try:
        block, body = split_frontmatter(data, None)
        meta = {} if block is None else yamlfm.load(block)
    except ProtocolError as exc:
        raise MalformedResponse(f"unreadable response frontmatter: {exc}") from exc
    status = meta.pop("status", "")
    if not status:
        raise MalformedResponse("response has no status")
    return Response(status, meta, body)


def emit_response(response: Response) -> bytes:
    """The response bytes: ``status`` is one more key in the sorted frontmatter."""
    meta = {**response.meta, "status": response.status}
    return _FENCE + yamlfm.emit(meta).encode() + _FENCE + response.body


def error_response(status: str, message: str) -> Response:
    """An error reply: no metadata, body ``\\n# <Title>\\n\\n<message>\\n`` (SPEC §3.4)."""
    return Response(status, {}, f"\n# {title(status)}\n\n{message}\n".encode())
