"""Fuzz inputs shared by the quick tests and the bench: Hypothesis strategies (random bytes, and
valid inputs with mutations) for every parser of untrusted bytes — requests and version files on
the server, responses, generated bodies and WATCH streams on the client, markdown bodies for the
section splitter and link extraction on both — and a seeded generator of random and mutated
requests for the live server."""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from datetime import UTC, datetime

from hypothesis import strategies as st
from support.quicclient import QuicClient

from markproto.protocol import bodies, links, mdoutline, storefmt, watch, wire
from markproto.protocol.errors import MalformedResponse, ProtocolError
from markproto.protocol.status import Status

TOKENS = (
    b"---\n",
    b"\n---\n",
    b"\n---",
    b"\n",
    b"\r\n",
    b"\r",
    b"\x00",
    b"\x7f",
    b"\xff",
    b"\xc3\xa9",
    b": ",
    b":",
    b'"',
    b"'",
    b"#",
    b"- ",
    b"[",
    b"{",
    b"&a ",
    b"*a",
    b"!!str ",
    b"|\n",
    b">\n",
    b"\t",
    b" ",
    b"..",
    b"/",
    b"%2e",
    b"version: ",
    b"archived: true\n",
    b"previous-hash: sha256-",
    b"tags: [a, b]\n",
    b"0" * 64,
)
"""Bytes that mean something to one of the grammars: fences, line ends, YAML indicators."""

VERBS = [*sorted(wire.VERBS - {"WATCH"}), "Watch", "fetch", "DELETE", ""]
"""WATCH is left out: its answer is a stream that does not end, which tests/e2e/test_watch_e2e.py
fuzzes on its own terms."""
KEYS = (
    "auth",
    "expected-version",
    "if-none-match",
    "if-modified-since",
    "query",
    "match",
    "limit",
    "filter",
    "cursor",
    "page-size",
    "include-archived",
    "title",
    "tags",
    "importance",
    "retention",
    "type",
    "status",
    "version",
)


def mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """Apply edits in turn: (0) flip a bit, (1) truncate, (2) insert a token, (3) drop a byte."""
    out = bytearray(data)
    for op, at, token in edits:
        pos = at % (len(out) + 1)
        if op == 0 and out:
            out[pos % len(out)] ^= 1 << (at % 8)
        elif op == 1:
            del out[pos:]
        elif op == 2:
            out[pos:pos] = token
        elif out:
            del out[pos % len(out)]
    return bytes(out)


def _request_bytes(verb: str, path: str, meta: dict[str, str], body: bytes) -> bytes:
    try:
        return wire.emit_request(wire.Request(verb, path, meta, body))
    except Exception:  # a key or value the emitter cannot write: raw lines instead
        lines = "".join(f"{k}: {v}\n" for k, v in meta.items())
        return f"{verb} {path}\n---\n{lines}---\n".encode(errors="replace") + body


_HASH = "sha256-" + "ab" * 32
REQUEST_SEEDS = [
    _request_bytes(verb, path, meta, body)
    for verb, path, meta, body in [
        ("FETCH", "/a.md", {}, b""),
        ("FETCH", "/docs/a.md/v2", {"if-none-match": "ab" * 32}, b""),
        ("LIST", "/docs/", {"cursor": "abc", "page-size": "10", "include-archived": "true"}, b""),
        ("VERSIONS", "/a.md", {"auth": "token"}, b""),
        ("LOOKUP", "/docs/", {"query": "quic streams", "match": "body", "limit": "5"}, b""),
        ("LOOKUP", "/", {"query": "*", "filter": "tag=a,modified-after=2026-01-01"}, b""),
        ("PUBLISH", "/a.md", {"auth": "t", "title": "T", "tags": "[a, b]"}, b"# A\n\ntext\n"),
        ("PUBLISH", "/b.md", {"expected-version": "0", "importance": "0.9"}, b"---\nx: y\n"),
        ("APPEND", "/a.md", {"auth": "t", "expected-version": "3"}, b"more\n"),
        ("ARCHIVE", "/a.md", {"auth": "t"}, b""),
    ]
] + [b"FETCH /a.md\r\n", b"LIST /with space/\n---\n\n---\n", b"FETCH /\n---\n'q': \"v\"\n---"]
"""Valid requests of every verb, the starting points of the mutated inputs."""

VERSION_SEEDS = [
    storefmt.emit_version(1, None, {}, b""),
    storefmt.emit_version(1, None, {"title": "T", "tags": "a,b", "type": "Document"}, b"# T\n"),
    storefmt.emit_version(7, _HASH, {"importance": "0.5", "retention": "3"}, b"body\n---\n"),
    storefmt.emit_version(2, _HASH, {"description": "a: b", "x": "'q'"}, b"\xff\x00"),
]
"""Valid version files, the starting points of the mutated inputs."""


def inputs(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, or a seed with up to a dozen edits, decoded from one binary draw (a
    structured strategy costs Hypothesis three times as much per example)."""

    def decode(raw: bytes) -> bytes:
        if not raw or raw[0] & 1:
            return raw[1:]
        edits = [
            (a % 4, b | c << 8, TOKENS[(a >> 2) % len(TOKENS)])
            for a, b, c in zip(raw[2::3], raw[3::3], raw[4::3], strict=False)
        ][:12]
        return mutate(seeds[raw[1 % len(raw)] % len(seeds)], edits)

    return st.binary(max_size=400).map(decode)


REQUESTS = inputs(REQUEST_SEEDS)
"""Inputs for ``wire.parse_request``."""
VERSION_FILES = inputs(VERSION_SEEDS)
"""Inputs for ``storefmt.parse_version``."""

_WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
_CURSOR = watch.Cursor("e1", 7)
_ROW = bodies.LookupRow("/docs/a.md", "intro", 0.5, "A › Intro", ("x", "y"), "a | snippet")
_LINK = bodies.LinkRow(
    "/docs/a.md", "intro", 3, "/docs/b.md", "top", "b.md#top", "internal", "", "ok", "B"
)
_BODIES = [
    bodies.index_heading("/docs/")
    + bodies.index_line(bodies.IndexEntry("a.md", False))
    + bodies.index_line(bodies.IndexEntry("sub", True)),
    bodies.render_history("/docs/a.md", [bodies.HistoryEntry(2, _WHEN)]),
    bodies.render_lookup("quic", "/", [_ROW], body_mode=True),
    bodies.render_lookup("quic", "/", [_ROW], body_mode=False),
    bodies.render_links("/docs/a.md", [_LINK], [bodies.LinkDocument("/docs/b.md", "B", 1)]),
]
RESPONSE_SEEDS = [
    wire.emit_response(wire.Response("ok", {"version": "2", "modified": "x"}, b"# A\n")),
    wire.emit_response(wire.Response("not-found", {}, b"")),
    *(wire.emit_response(wire.Response("ok", {}, body)) for body in _BODIES),
]
"""Valid responses of each generated body, the starting points of the mutated inputs."""
RESPONSES = inputs(RESPONSE_SEEDS)
"""Inputs for ``wire.parse_response`` and the body parsers a client runs on what it gets."""
BODY_PARSERS = (bodies.parse_index, bodies.parse_history, bodies.parse_lookup, bodies.parse_links)

WATCH_SEEDS = [
    watch.emit_control("ok", _CURSOR)
    + watch.emit_event(watch.WatchEvent(_CURSOR, "/docs/a.md", 2, "publish", _HASH, "bot"))
    + watch.emit_control("heartbeat", _CURSOR),
    watch.emit_control("resync", _CURSOR) + watch.emit_control("closing"),
    watch.emit_control("unauthorized") + b"token revoked\n",
]
"""Valid WATCH streams (acknowledged, resynced, refused), the starting points of the inputs."""
WATCH_STREAMS = inputs(WATCH_SEEDS)
"""Inputs for ``watch.WatchReader``, fed in pieces."""

MARKDOWN_SEEDS = [
    b"---\ntitle: T\nrel-see-also: /b.md\n---\n# T { #top }\n\nSee [b](b.md#x) and [[Note#H|n]].\n",
    b"## A\n\n[ref][r] <https://x.example/> `[no](code)` mark://h/p.md\n\n[r]: /c/ 'T'\n",
    b"```\n[fenced](x.md)\n```\n\n| a | [t](t.md) |\n|---|---|\n\n"
    b"Setext\n===\n<a href='h.md'>h</a>\n",
]
"""Markdown with every kind of link and heading, the starting points of the inputs."""
MARKDOWN = inputs(MARKDOWN_SEEDS)
"""Inputs for the section splitter and link extraction, which must accept any body."""


def read_stream(data: bytes) -> None:
    """Feed a WATCH stream to a reader in two pieces (split where its first byte says), then
    end it."""
    cut = data[0] % (len(data) + 1) if data else 0
    reader = watch.WatchReader()
    reader.feed(data[:cut])
    reader.feed(data[cut:])
    reader.end()


def read_response(data: bytes) -> None:
    """Parse a response, then its body the way each body parser would."""
    response = wire.parse_response(data)
    for parse in BODY_PARSERS:
        with contextlib.suppress(ProtocolError):
            parse(response.body)


def read_markdown(data: bytes) -> None:
    """Split a body into sections and find its links; neither may refuse any body."""
    mdoutline.headings(data.decode("utf-8", "replace"))
    links.extract(data)


# -- the live server --------------------------------------------------------------------------

_PATHS = (
    "/",
    "/health",
    "/fuzz/",
    "/fuzz/a.md",
    "/fuzz/a.md/v1",
    "/fuzz/a.md/v+01",
    "/fuzz/../etc/passwd",
    "/sha256-" + "0" * 64,
    "/fuzz/ü space.md",
    "/fuzz//double.md",
    "/" + "x" * 300 + ".md",
)


def live_request(rng: random.Random, token: str) -> bytes:
    """One request for the live fuzz: random bytes now and then, else a request of a random verb,
    path and metadata (with the write token half the time), often mutated."""
    if rng.random() < 0.1:
        return rng.randbytes(rng.randrange(0, 300))
    verb = rng.choice(VERBS)
    path = rng.choice(_PATHS) if rng.random() < 0.8 else "/fuzz/" + rng.randbytes(8).hex()
    meta = {rng.choice(KEYS): rng.choice(["", "1", "0", "-1", "true", "body", "a b", "x" * 40])}
    if rng.random() < 0.5:
        meta["auth"] = token
    body = rng.randbytes(rng.randrange(0, 80)) if rng.random() < 0.3 else b"# fuzz\n\nbody\n"
    data = _request_bytes(verb, path, meta, body)
    if rng.random() < 0.6:
        edits = [
            (rng.randrange(4), rng.randrange(1 << 16), rng.choice(TOKENS))
            for _ in range(rng.randrange(1, 4))
        ]
        data = mutate(data, edits)
    return data


STATUSES = frozenset(Status)


async def fuzz_live(
    client: QuicClient, n: int, token: str, seed: int = 1, batch: int = 32
) -> tuple[Counter[str], list[str]]:
    """Send ``n`` fuzz requests, ``batch`` in flight at a time; every answer must parse, carry a
    known status, and never be ``internal error`` (a handler that raised). Returns the statuses
    and the problems."""
    rng = random.Random(seed)
    statuses: Counter[str] = Counter()
    problems: list[str] = []

    def check(request: bytes, data: bytes) -> None:
        try:
            response = wire.parse_response(data)
        except MalformedResponse as exc:
            problems.append(f"{request[:80]!r}: unparseable answer {data[:80]!r} ({exc})")
            return
        statuses[response.status] += 1
        if response.status not in STATUSES:
            problems.append(f"{request[:80]!r}: unknown status {response.status!r}")
        if b"internal error" in response.body:
            problems.append(f"{request[:120]!r}: internal error")

    for start in range(0, n, batch):
        requests = [live_request(rng, token) for _ in range(min(batch, n - start))]
        for request, data in zip(requests, await client.many(requests), strict=True):
            check(request, data)
    return statuses, problems
