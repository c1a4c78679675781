"""The codec against the reference's 16 golden responses and the requests behind them (SPEC §11).

Each golden must survive parse then emit byte for byte, and so must each scenario request, which
is what the reference client wrote: together they pin key order, quoting and body layout.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support import shared_path

from markproto.protocol import bodies, cursor
from markproto.protocol.bodies import HistoryEntry, IndexEntry, LookupRow
from markproto.protocol.wire import (
    Request,
    emit_request,
    emit_response,
    error_response,
    parse_request,
    parse_response,
)

NAMES = [
    "append",
    "archive",
    "fetch",
    "fetch-archived",
    "fetch-not-found",
    "fetch-version",
    "list",
    "list-first-page",
    "list-not-found",
    "lookup",
    "lookup-body",
    "lookup-empty",
    "publish-conflict",
    "publish-created",
    "publish-updated",
    "versions",
]


def golden(name: str) -> bytes:
    return shared_path("golden", f"{name}.golden").read_bytes()


def scenario() -> list[dict[str, str | None]]:
    lines = shared_path("golden", "scenario.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_the_golden_set_is_complete(golden_dir: Path) -> None:
    assert sorted(p.stem for p in golden_dir.glob("*.golden")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_each_golden_round_trips_byte_for_byte(name: str) -> None:
    data = golden(name)
    assert emit_response(parse_response(data)) == data


def test_fetch_golden_values() -> None:
    response = parse_response(golden("fetch"))
    assert response.status == "ok"
    assert response.meta == {
        "content-hash": "sha256-050018a246d303b7fd8806eb84e88535b6cc8510e829715f87b7337158e05919",
        "etag": "693067c46c892c9ff8b035c8b3848fb3a8b74a1f5787f5bc960688ce678573dd",
        "importance": "0.7",
        "modified": "2026-01-01T00:00:00Z",
        "tags": "alpha,wire",
        "type": "Note",
        "version": "3",
    }
    assert response.body.startswith(b"# Alpha\n\nSecond body.\n")


@pytest.mark.parametrize(
    ("name", "status", "meta"),
    [
        ("append", "created", {"modified": "2026-01-01T00:00:00Z", "version": "3"}),
        ("archive", "ok", {"archived": "true", "version": "1"}),
        ("fetch-version", "ok", {"current-version": "3", "version": "1"}),
        ("list", "ok", {"complete": "true", "entries": "3"}),
        ("list-first-page", "ok", {"next-cursor": "AQAABS9kb2NzYS5tZA", "entries": "1"}),
        ("lookup-body", "ok", {"match": "body", "matches": "1"}),
        ("lookup-empty", "ok", {"matches": "0"}),
        ("publish-conflict", "conflict", {"server-version": "2", "your-version": "1"}),
        ("versions", "ok", {"chain-valid": "true", "current": "3", "total": "3"}),
    ],
)
def test_golden_statuses_and_keys(name: str, status: str, meta: dict[str, str]) -> None:
    response = parse_response(golden(name))
    assert response.status == status
    assert meta.items() <= response.meta.items()
    assert "status" not in response.meta


@pytest.mark.parametrize(
    ("name", "status", "message"),
    [
        ("fetch-not-found", "not-found", "/docs/missing.md not found"),
        ("list-not-found", "not-found", "/nowhere not found"),
        ("fetch-archived", "archived", "/docs/b.md is archived"),
    ],
)
def test_error_goldens_are_error_responses(name: str, status: str, message: str) -> None:
    assert emit_response(error_response(status, message)) == golden(name)


def test_conflict_golden_body() -> None:
    assert parse_response(golden("publish-conflict")).body == bodies.conflict_body(1, 2)


def test_list_goldens_parse_and_render_back() -> None:
    listing = parse_response(golden("list")).body
    entries = bodies.parse_index(listing)
    assert entries == [
        IndexEntry("a.md", False),
        IndexEntry("b.md", False),
        IndexEntry("sub", True),
    ]
    assert bodies.index_heading("/docs") + b"".join(map(bodies.index_line, entries)) == listing

    first = parse_response(golden("list-first-page"))
    assert bodies.parse_index(first.body) == [IndexEntry("a.md", False)]
    rendered = bodies.index_heading("/docs") + bodies.index_line(IndexEntry("a.md", False))
    assert rendered + bodies.TRUNCATED_NOTE == first.body
    assert cursor.encode_cursor("/docs", False, "a.md") == first.meta["next-cursor"]


def test_versions_golden_parses_and_renders_back() -> None:
    body = parse_response(golden("versions")).body
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    entries = bodies.parse_history(body)
    assert entries == [HistoryEntry(3, moment), HistoryEntry(2, moment), HistoryEntry(1, moment)]
    assert bodies.render_history("/docs/a.md", entries) == body


@pytest.mark.parametrize(
    ("name", "query", "body_mode", "rows"),
    [
        (
            "lookup",
            "alpha beta",
            False,
            [
                LookupRow("/docs/a.md", "", 0.7, "Alpha", ("alpha", "wire"), None),
                LookupRow("/docs/b.md", "", 0.4, "Beta | piped", ("beta",), None),
            ],
        ),
        (
            "lookup-body",
            "appended",
            True,
            [
                LookupRow(
                    "/docs/a.md", "appended", 0.7, "Alpha › Appended", ("alpha", "wire"), "More."
                )
            ],
        ),
        ("lookup-empty", "zzznothing", False, []),
    ],
)
def test_lookup_goldens_parse_and_render_back(
    name: str, query: str, body_mode: bool, rows: list[LookupRow]
) -> None:
    body = parse_response(golden(name)).body
    assert bodies.parse_lookup(body) == rows
    assert bodies.render_lookup(query, "/", rows, body_mode=body_mode) == body


def test_every_scenario_request_parses_and_emits_back() -> None:
    steps = scenario()
    assert len(steps) == 18
    for step in steps:
        raw = str(step["request"]).encode()
        assert emit_request(parse_request(raw)) == raw


def test_scenario_request_values() -> None:
    first = parse_request(str(scenario()[0]["request"]).encode())
    assert first == Request(
        "PUBLISH",
        "/docs/a.md",
        {
            "auth": "storetest-write-token",
            "expected-version": "0",
            "importance": "0.7",
            "tags": "alpha, wire",
            "type": "Note",
        },
        b"# Alpha\n\nFirst body.\n",
    )
    spaced = parse_request(str(scenario()[5]["request"]).encode())
    assert spaced.path == "/docs/sub/c d.md"
