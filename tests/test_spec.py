"""docs/SPEC.md against the code, so the spec cannot drift from what markproto speaks.

Checked mechanically: every status and fixed message (the wire messages the server actually sends,
produced here by real requests, each with its status), every constant in the limits and weights
tables, the key sets, the verbs, and every golden exchange and stored file the spec quotes.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from support import REPO, shared_path
from support.exchange import request, send

from markproto.protocol import bodies, cursor, limits, metadata, status, storefmt, wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.protocol.watch import Control, WatchEvent, WatchReader, emit_control, emit_event
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content
from markproto.server.watch import Hub

SPEC = REPO / "docs" / "SPEC.md"
WRITER, READER = "writer-token", "reader-token"
HASH = "sha256-" + "0" * 64
_BLOCK = re.compile(r"<!-- (golden|request|stored|watch): ([^>]+?) -->\n```\n(.*?)```\n", re.DOTALL)


@pytest.fixture(scope="module")
def spec() -> str:
    return SPEC.read_text(encoding="utf-8")


def table(text: str, header: str) -> list[list[str]]:
    """The body rows of every table whose header row starts with ``| <header> |``."""
    rows: list[list[str]] = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith(f"| {header} |"):
            continue
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            rows.append([cell.strip() for cell in row.strip().strip("|").split(" | ")])
    assert rows, f"no table headed {header!r} in SPEC.md"
    return rows


def code(cell: str) -> str:
    """The text of a cell that is one code span."""
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


def resolve(dotted: str) -> object:
    """``limits.MAX_BODY`` or ``config.ServerConfig.rate_limit`` (a dataclass field's default),
    looked up in markproto.protocol, then markproto.server (and its subpackages), then
    markproto.client."""
    module_name, *attrs = dotted.split(".")
    for package in ("protocol", "server", "server.search", "server.storage", "client"):
        name = f"markproto.{package}.{module_name}"
        if importlib.util.find_spec(name) is not None:
            obj: object = importlib.import_module(name)
            break
    else:
        raise AssertionError(f"{dotted}: no module {module_name!r} in markproto")
    for attr in attrs:
        if isinstance(obj, type) and dataclasses.is_dataclass(obj):
            found = {f.name: f.default for f in dataclasses.fields(obj)}
            if attr in found:
                obj = found[attr]
                continue
        obj = getattr(obj, attr)
    return obj


def check_constants(rows: list[list[str]]) -> set[str]:
    names = set()
    for row in rows:
        name, stated = code(row[0]), row[1]
        actual = resolve(name)
        if stated.startswith("`"):
            assert actual == code(stated), f"{name} is {actual!r}, SPEC.md says {stated}"
        else:
            assert isinstance(actual, int | float) and not isinstance(actual, bool), name
            assert actual == float(stated), f"{name} is {actual!r}, SPEC.md says {stated}"
        names.add(name)
    return names


# --- vocabulary -------------------------------------------------------------------------------


def test_statuses_are_exactly_the_status_table(spec: str) -> None:
    rows = table(spec, "Status | Success")
    assert {code(row[0]) for row in rows} == {s.value for s in status.Status}
    assert {code(row[0]) for row in rows if row[1] == "yes"} == set(status.SUCCESS)


PLACEHOLDERS: dict[str, object] = {
    "path": "<path>",
    "canonical": "<canonical>",
    "content_hash": "<hash>",
    "verb": "<verb>",
    "quoted_key": '"<key>"',
    "quoted_value": '"<value>"',
    "quoted_mode": '"<value>"',
    "name": "versions",
    "limit": 255,
    "terms": 33,
}
"""What SPEC.md writes for each argument of a message template in protocol/status.py."""


def test_every_fixed_message_of_the_code_is_stated(spec: str) -> None:
    constants = [
        value for name, value in vars(status).items() if name.isupper() and isinstance(value, str)
    ]
    templates = [
        fn(*(PLACEHOLDERS[name] for name in inspect.signature(fn).parameters))
        for name, fn in vars(status).items()
        if inspect.isfunction(fn) and fn.__module__ == status.__name__ and name != "title"
    ]
    assert len(constants) >= 30 and len(templates) >= 15
    for message in [*constants, *templates]:
        assert f"`{message}`" in spec, f"{message!r} is not in SPEC.md"


def test_generated_bodies_are_quoted(spec: str) -> None:
    assert bodies.TRUNCATED_NOTE.decode().strip() in spec
    health = bodies.HEALTH_BODY.decode()
    assert f"---\nstatus: ok\n---\n{health}```" in spec


def test_verbs_are_exactly_the_verb_table(spec: str) -> None:
    assert {code(row[0]) for row in table(spec, "Verb")} == wire.VERBS


def test_key_sets_match_the_metadata_rules(spec: str) -> None:
    stated = {row[0]: {code(cell) for cell in row[1].split(", ")} for row in table(spec, "Kind")}
    assert stated == {
        "Control keys": metadata.CONTROL_KEYS,
        "Reserved keys": metadata.RESERVED_KEYS,
        "Store-reserved keys": metadata.STORE_RESERVED_KEYS,
        "OKF keys": metadata.OKF_KEYS,
    }


# --- numbers ----------------------------------------------------------------------------------


def test_limits_table_matches_the_code(spec: str) -> None:
    names = check_constants(table(spec, "Constant"))
    public = {f"limits.{name}" for name in vars(limits) if name.isupper()}
    assert public <= names, f"limits missing from SPEC.md: {sorted(public - names)}"


def test_ranking_weights_match_the_code(spec: str) -> None:
    names = check_constants(table(spec, "Weight"))
    weights = resolve("bodyindex.Weights")
    assert isinstance(weights, type) and dataclasses.is_dataclass(weights)
    assert {f"bodyindex.Weights.{f.name}" for f in dataclasses.fields(weights)} == names


# --- quoted exchanges -------------------------------------------------------------------------


def quoted(spec: str, kind: str) -> Iterator[tuple[str, str]]:
    for found_kind, name, text in _BLOCK.findall(spec):
        if found_kind == kind:
            yield name, text


def test_quoted_goldens_are_byte_exact(spec: str) -> None:
    golden = shared_path("golden")
    blocks = list(quoted(spec, "golden"))
    assert len(blocks) >= 10
    for name, text in blocks:
        assert text == (golden / f"{name}.golden").read_text(encoding="utf-8"), name


def test_quoted_requests_are_the_scenario_requests(spec: str) -> None:
    lines = shared_path("golden", "scenario.jsonl").read_text(encoding="utf-8").splitlines()
    requests = {step["golden"]: step["request"] for step in map(json.loads, lines)}
    blocks = list(quoted(spec, "request"))
    assert len(blocks) >= 7
    for name, text in blocks:
        sent = requests[name]
        assert text == (sent if sent.endswith("\n") else sent + "\n"), name


def test_quoted_version_file_is_what_the_store_writes(spec: str) -> None:
    (name, text), *_ = quoted(spec, "stored")
    assert name == "/docs/a.md v1"
    data = storefmt.emit_version(
        1,
        None,
        {"importance": "0.7", "tags": "alpha,wire", "type": "Note"},
        b"# Alpha\n\nFirst body.\n",
    )
    assert text.encode() == data
    version_golden = dict(quoted(spec, "golden"))["fetch-version"]
    etag = re.search(r"^etag: ([0-9a-f]{64})$", version_golden, re.MULTILINE)
    assert etag is not None and hashlib.sha256(data).hexdigest() == etag[1]


def test_quoted_watch_blocks_are_what_the_codec_writes(spec: str) -> None:
    (_, text), *_ = quoted(spec, "watch")
    reader = WatchReader()
    blocks = reader.feed(text.encode())
    assert reader.end() is None and len(blocks) == 2
    ack, event = blocks
    assert isinstance(ack, Control) and isinstance(event, WatchEvent)
    assert emit_control(ack.status, ack.cursor) + emit_event(event) == text.encode()


# --- the messages a running server sends ------------------------------------------------------


def write(verb: str, path: str, keys: Mapping[str, str] | None = None, body: bytes = b"x") -> bytes:
    return request(verb, path, {"auth": WRITER, **(keys or {})}, body)


def raw_cursor(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# (request, substitutions turning the actual message into the spec's placeholder form)
CASES: list[tuple[bytes, dict[str, str]]] = [
    (b"BOGUS /x\n", {}),
    (b"", {}),
    (b"FETCH /a/../b\n", {"/a/../b": "<path>"}),
    (request("FETCH", "/docs/missing.md"), {"/docs/missing.md": "<path>"}),
    (request("FETCH", "/docs/gone.md"), {"/docs/gone.md": "<path>"}),
    (request("FETCH", "/" + HASH), {HASH: "<hash>"}),
    (request("FETCH", "/secret/x.md"), {}),
    (request("FETCH", "/secret/x.md", {"auth": WRITER}), {}),
    (write("PUBLISH", "/" + HASH), {}),
    (write("PUBLISH", "/docs/x"), {}),
    (write("PUBLISH", "/docs/x.md", body=b"\xff"), {}),
    (write("PUBLISH", "/docs/x.md", {"expected-version": "x"}), {}),
    (write("PUBLISH", "/docs/gone.md"), {}),
    (write("PUBLISH", "/docs/x.md", {"version": "1"}), {'"version"': '"<key>"'}),
    (write("PUBLISH", "/docs/x.md", {"Bad": "1"}), {'"Bad"': '"<key>"'}),
    (write("PUBLISH", "/docs/x.md", {"k": "a\nb"}), {'"k"': '"<key>"'}),
    (write("PUBLISH", "/docs/x.md", {f"k{i}": "v" for i in range(51)}), {}),
    (write("PUBLISH", "/docs/x.md", {"k": "v" * 1100}), {}),
    (write("PUBLISH", "/docs/x.md", {"previous-hash": "x"}), {'"previous-hash"': '"<key>"'}),
    (write("PUBLISH", "/docs/x.md", {"retention": "0"}), {'"0"': '"<value>"'}),
    (write("APPEND", "/docs/a.md"), {}),
    (write("APPEND", "/docs/a.md", {"expected-version": "0"}), {}),
    (write("APPEND", "/docs/a.md", {"expected-version": "1"}, b""), {}),
    (write("PUBLISH", "/docs/a.md/b.md"), {"/docs/a.md": "<path>"}),
    (write("PUBLISH", "/docs/versions/x.md"), {}),
    (write("PUBLISH", "/docs/" + "n" * 256 + ".md"), {}),
    (write("PUBLISH", "/docs/.tmp-0123456789ab/x.md"), {"/docs/.tmp-0123456789ab/x.md": "<path>"}),
    (write("PUBLISH", "/docs/dir.md"), {"/docs/dir.md": "<path>"}),
    (request("VERSIONS", "/docs/missing.md"), {"/docs/missing.md": "<path>"}),
    (request("LIST", "/docs", {"page-size": "0"}), {}),
    (request("LIST", "/docs", {"include-archived": "maybe"}), {}),
    (request("LIST", "/docs", {"cursor": "!!"}), {}),
    (request("LIST", "/docs", {"cursor": raw_cursor(b"\x02\x00\x00\x05/docsx")}), {}),
    (request("LIST", "/docs", {"cursor": cursor.encode_cursor("/other", False, "x")}), {}),
    (request("LIST", "/docs", {"cursor": "A" * 11000}), {}),
    (request("LOOKUP", "/", {"query": "a"}), {}),
    (request("LOOKUP", "/", {"query": " ".join(f"w{i}" for i in range(40))}), {}),
    (request("LOOKUP", "/", {"query": "ab", "limit": "0"}), {}),
    (request("LOOKUP", "/", {"query": "ab", "filter": "tag"}), {'"tag"': '"<clause>"'}),
    (
        request("LOOKUP", "/", {"query": "ab", "filter": "modified-after=SOON"}),
        {"modified-after": "<key>", '"SOON"': '"<value>"'},
    ),
    (request("LOOKUP", "/", {"query": "ab", "match": "Body"}), {'"Body"': '"<value>"'}),
    (request("LOOKUP", "/nowhere", {"query": "ab"}), {"/nowhere": "<path>"}),
    (request("WATCH", "/" + HASH), {}),
    (request("WATCH", "/docs", {"since": "nope"}), {}),
    (request("WATCH", "/secret", {"auth": WRITER}), {}),
    (request("LOOKUP", "/", {"match": "links", "direction": "up"}), {'"up"': '"<value>"'}),
    (request("LOOKUP", "/", {"match": "links", "relations": "See-also"}), {}),
    (request("LOOKUP", "/", {"match": "links", "depth": "6"}), {}),
    (request("LOOKUP", "/", {"match": "links", "limit": "0"}), {}),
    (request("LOOKUP", "/", {"match": "links", "cursor": "-1"}), {}),
    (request("LOOKUP", "/nowhere.md", {"match": "links"}), {"/nowhere.md": "<path>"}),
    (request("LOOKUP", "/docs/gone.md", {"match": "links"}), {"/docs/gone.md": "<path>"}),
]


def grants() -> Grants:
    return Grants(
        [
            Grant("writer", hash_token(WRITER), ("/**",), frozenset({"publish"})),
            Grant("reader", hash_token(READER), ("/secret/**",), frozenset({"read"})),
        ]
    )


def message(response: wire.Response, substitutions: Mapping[str, str]) -> str:
    lines = response.body.decode().split("\n")
    assert response.meta == {} and lines[1] == f"# {status.title(response.status)}", response
    text = lines[3]
    for actual, placeholder in substitutions.items():
        assert actual in text, (actual, text)
        text = text.replace(actual, placeholder)
    return text


async def test_every_message_the_server_sends_is_in_the_table(spec: str, tmp_path: Path) -> None:
    rows = table(spec, "Status | Message")
    stated = {(code(row[0]), code(row[1])) for row in rows if row[1].startswith("`")}
    lookup = Lookup()
    content = Content.open(tmp_path, [lookup])
    try:
        ctx = Context(content, lookup=lookup, grants=grants())
        ctx.watch = Hub(ctx)
        server = Dispatcher(ctx)
        for path in ("/docs/a.md", "/docs/gone.md", "/docs/dir.md/x.md"):
            assert (await send(server, write("PUBLISH", path))).status == "created"
        assert (await send(server, write("ARCHIVE", "/docs/gone.md"))).status == "ok"

        sent: list[tuple[str, str]] = []
        for data, substitutions in CASES:
            response = await send(server, data)
            sent.append((response.status, message(response, substitutions)))
        for verb in ("PUBLISH", "APPEND", "ARCHIVE"):
            for other in (Context(content), Context(content, grants=grants(), read_only=True)):
                response = await send(Dispatcher(other), write(verb, "/docs/a.md"))
                sent.append((response.status, message(response, {})))
        limited = await send(Dispatcher(ctx, lambda ip: False), request("FETCH", "/docs/a.md"))
        sent.append((limited.status, message(limited, {})))
        unwatched = await send(Dispatcher(Context(content)), request("WATCH", "/docs"))
        sent.append((unwatched.status, message(unwatched, {"WATCH": "<verb>"})))
    finally:
        content.close()
    sent += [("server-error", status.INSUFFICIENT_STORAGE), ("server-error", status.NOT_WRITABLE)]
    # Sent when a subscription starts on its stream (tests/e2e/test_watch_e2e.py):
    sent += [
        ("rate-limited", status.WATCHES_IN_ALL),
        ("rate-limited", status.WATCHES_PER_CONNECTION),
    ]
    missing = [pair for pair in sent if pair not in stated]
    assert not missing, f"sent but not in the SPEC.md message table: {missing}"
    assert len(set(sent)) >= 30
