"""The tests' one set of request helpers: build a request, send it, read the response.

A target is a ``Dispatcher`` (in process, handed raw bytes as the transport hands them, so the
parser and every refusal run) or a ``Remote`` (a client pool and an authority: real QUIC).
Metadata is a mapping of wire keys, and keyword arguments add more in Python spelling:
``publish(d, "/a.md", b"# A\\n", AUTH, expected_version="1")`` sends ``expected-version: "1"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from markproto.protocol import metadata, wire
from markproto.server.storage.store import Store, Written
from markproto.server.transport import Peer

if TYPE_CHECKING:
    from markproto.client.connection import Pool
    from markproto.server.dispatch import Dispatcher

__all__ = ["PEER", "Remote", "ask", "error", "fetch", "publish", "request", "seed", "send"]

PEER = Peer("192.0.2.1", 4433)
"""The peer in-process requests come from (a documentation address)."""


@dataclass(frozen=True)
class Remote:
    """A server reached over QUIC: a client pool and the authority it dials."""

    pool: Pool
    authority: str


def request(
    verb: str, path: str, meta: Mapping[str, str] | None = None, body: bytes = b"", **keys: str
) -> bytes:
    """A request as the client writes it."""
    wire_keys = {k.replace("_", "-"): v for k, v in keys.items()}
    return wire.emit_request(wire.Request(verb, path, {**(meta or {}), **wire_keys}, body))


async def send(target: Dispatcher | Remote, data: bytes, peer: Peer = PEER) -> wire.Response:
    """Raw request bytes to ``target``; the parsed response."""
    if isinstance(target, Remote):
        return wire.parse_response(await target.pool.request(target.authority, data))
    out = target.handle(data, peer)
    return wire.parse_response(out if isinstance(out, bytes) else await out)


async def ask(
    target: Dispatcher | Remote,
    verb: str,
    path: str,
    meta: Mapping[str, str] | None = None,
    body: bytes = b"",
    **keys: str,
) -> wire.Response:
    return await send(target, request(verb, path, meta, body, **keys))


async def publish(
    target: Dispatcher | Remote,
    path: str,
    body: bytes,
    meta: Mapping[str, str] | None = None,
    **keys: str,
) -> wire.Response:
    return await ask(target, "PUBLISH", path, meta, body, **keys)


async def fetch(
    target: Dispatcher | Remote, path: str, meta: Mapping[str, str] | None = None, **keys: str
) -> wire.Response:
    return await ask(target, "FETCH", path, meta, **keys)


def error(status: str, message: str) -> wire.Response:
    """The error response a server sends, as a client reads it back."""
    return wire.parse_response(wire.emit_response(wire.error_response(status, message)))


def seed(root: Path, docs: Iterable[tuple[str, bytes | str, Mapping[str, str]]]) -> None:
    """Write documents straight into a store at ``root``, with the metadata a PUBLISH would
    persist (tags normalized, the type default), before a server or ``Content`` opens it."""
    store = Store(root)
    try:
        for path, body, meta in docs:
            data = body.encode() if isinstance(body, str) else body
            written = store.publish(path, data, metadata.for_publish(path, meta), None)
            assert isinstance(written, Written), (path, written)
    finally:
        store.close()
