"""Server-generated bodies, rendered byte-exact and parsed back (SPEC §3.5, §5.2-5.7)."""

from __future__ import annotations

import contextlib
import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import bodies
from markproto.protocol.bodies import (
    HistoryEntry,
    IndexEntry,
    LookupRow,
    conflict_body,
    exists_conflict_body,
    index_heading,
    index_line,
    parse_history,
    parse_index,
    parse_lookup,
    render_history,
    render_lookup,
)
from markproto.protocol.errors import MalformedResponse

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_conflict_bodies() -> None:
    assert conflict_body(1, 2) == (
        b"# Version Conflict\n\nThe document has been modified since you last fetched it.\n\n"
        b"Your version: 1\nServer version: 2\n\n"
        b"Please fetch the latest version and reapply your edits.\n"
    )
    assert conflict_body(2, 3, append=True) == (
        b"# Version Conflict\n\nThe document has been modified since you last fetched it.\n\n"
        b"Your version: 2\nServer version: 3\n\n"
        b"Fetch the latest version and verify whether your append was applied before retrying.\n"
    )
    assert exists_conflict_body(4) == (
        b"# Version Conflict\n\nA document already exists at this path (version 4).\n\n"
        b"Fetch the current version and publish with the correct expected-version to update it.\n"
    )


def test_health_body() -> None:
    assert bodies.HEALTH_BODY == b"# Health Check\n\nServer is healthy.\n"


# --- LIST -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        ("/", b"\n# Index of /\n\n"),
        ("/docs", b"\n# Index of /docs/\n\n"),
        ("/docs/", b"\n# Index of /docs/\n\n"),
        ("/my_dir", b"\n# Index of /my\\_dir/\n\n"),
    ],
)
def test_index_heading(path: str, heading: bytes) -> None:
    assert index_heading(path) == heading


@pytest.mark.parametrize(
    ("entry", "line"),
    [
        (IndexEntry("a.md", False), b"- [a.md](a.md)\n"),
        (IndexEntry("sub", True), b"- [sub/](sub/)\n"),
        (IndexEntry("c d.md", False), b"- [c d.md](c%20d.md)\n"),
        (IndexEntry("my_file(1).md", False), b"- [my\\_file\\(1\\).md](my_file%281%29.md)\n"),
        (IndexEntry("é#", True), "- [é\\#/](%C3%A9%23/)\n".encode()),
    ],
)
def test_index_line(entry: IndexEntry, line: bytes) -> None:
    assert index_line(entry) == line
    assert parse_index(index_heading("/x") + line) == [entry]


def test_an_undecodable_name_is_written_as_its_raw_bytes() -> None:
    name = b"a\xffb".decode("utf-8", "surrogateescape")
    assert index_line(IndexEntry(name, False)) == b"- [a\xffb](a%FFb)\n"


def test_truncation_note() -> None:
    assert bodies.TRUNCATED_NOTE == b"\n*...truncated, too many entries*\n"
    page = index_heading("/docs") + index_line(IndexEntry("a.md", False)) + bodies.TRUNCATED_NOTE
    assert parse_index(page) == [IndexEntry("a.md", False)]


def test_an_empty_listing() -> None:
    assert parse_index(index_heading("/")) == []


NAMES = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\n"), min_size=1)


@given(st.lists(st.builds(IndexEntry, NAMES, st.booleans()), max_size=6), st.booleans())
def test_parse_index_inverts_the_renderer(entries: list[IndexEntry], truncated: bool) -> None:
    page = index_heading("/d") + b"".join(index_line(e) for e in entries)
    page += bodies.TRUNCATED_NOTE if truncated else b""
    assert parse_index(page) == entries


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"# Index of /\n\n",
        b"\n# Index of /\n",
        b"\n# Index of /\n\nplain text\n",
        b"\n# Index of /\n\n- [a.md](b.md)\n",
        b"\n# Index of /\n\n- [a.md](a.md)",
        b"\n# Index of /\n\n- [a_b](a_b)\n",
        b"\n# Index of /\n\n- [a/](a)\n",
        b"\n# Index of /\n\n- [%ff](%ff)\n",
        b"\n# Index of /\n\n- [\xff](%FF)\n",
        b"\n# Lookup of /\n\n",
    ],
)
def test_parse_index_refuses(body: bytes) -> None:
    with pytest.raises(MalformedResponse):
        parse_index(body)


# --- VERSIONS ---------------------------------------------------------------------------------


def test_render_history() -> None:
    entries = [HistoryEntry(n, T0) for n in (3, 2, 1)]
    assert render_history("/docs/a.md", entries) == (
        b"\n# Version History: /docs/a.md\n\n"
        b"- [v3](%2Fdocs%2Fa.md/v3) - 2026-01-01T00:00:00Z\n"
        b"- [v2](%2Fdocs%2Fa.md/v2) - 2026-01-01T00:00:00Z\n"
        b"- [v1](%2Fdocs%2Fa.md/v1) - 2026-01-01T00:00:00Z\n"
    )


def test_history_escapes_the_heading_and_path_escapes_the_link() -> None:
    body = render_history("/my_docs/c d.md", [HistoryEntry(1, T0)])
    assert body == (
        b"\n# Version History: /my\\_docs/c d.md\n\n"
        b"- [v1](%2Fmy_docs%2Fc%20d.md/v1) - 2026-01-01T00:00:00Z\n"
    )


MOMENTS = st.datetimes(min_value=datetime(1, 1, 1), timezones=st.just(UTC)).map(
    lambda d: d.replace(microsecond=0)
)
DOC_PATHS = NAMES.map(lambda p: "/" + p)


@given(DOC_PATHS, st.lists(st.builds(HistoryEntry, st.integers(1, 10**6), MOMENTS), max_size=5))
def test_parse_history_inverts_the_renderer(path: str, entries: list[HistoryEntry]) -> None:
    assert parse_history(render_history(path, entries)) == entries


@pytest.mark.parametrize(
    "body",
    [
        b"\n# Version History: /a\n\n- [v1](%2Fa/v1) - 2026-01-01T00:00:00Z",
        b"\n# Version History: /a\n\n- [v1](%2Fb/v1) - 2026-01-01T00:00:00Z\n",
        b"\n# Version History: /a\n\n- [v1](%2Fa/v2) - 2026-01-01T00:00:00Z\n",
        b"\n# Version History: /a\n\n- [v01](%2Fa/v01) - 2026-01-01T00:00:00Z\n",
        b"\n# Version History: /a\n\n- [v1](%2Fa/v1) - 2026-13-01T00:00:00Z\n",
        b"\n# Version History: /a\n\n- [v1](%2Fa/v1) - 2026-01-01T00:00:00+00:00\n",
        b"\n# Version History: /a\n\n- [v1](%2Fa/v1) - 2026-01-01T 0:00:00Z\n",
        b"\n# Version History: /a\n- [v1](%2Fa/v1) - 2026-01-01T00:00:00Z\n",
        b"\n# Version History: /a\\b\n\n",
    ],
)
def test_parse_history_refuses(body: bytes) -> None:
    with pytest.raises(MalformedResponse):
        parse_history(body)


# --- LOOKUP -----------------------------------------------------------------------------------


def test_render_lookup_catalog() -> None:
    rows = [
        LookupRow("/docs/a.md", "", 0.7, "Alpha", ("alpha", "wire"), None),
        LookupRow("/docs/b.md", "", 0.4, "Beta | piped", ("beta",), None),
    ]
    body = render_lookup("alpha beta", "/", rows, body_mode=False)
    assert body == (
        b'\n# Lookup matches for "alpha beta" in /\n\n'
        b"| Path | Importance | Title | Tags |\n|------|------------|-------|------|\n"
        b"| /docs/a.md | 0.70 | Alpha | alpha, wire |\n"
        b"| /docs/b.md | 0.40 | Beta \\| piped | beta |\n"
    )
    assert parse_lookup(body) == rows


def test_render_lookup_body_mode() -> None:
    rows = [LookupRow("/docs/a.md", "appended", 0.7, "Alpha › Appended", ("alpha",), "More.")]
    body = render_lookup("appended", "/", rows, body_mode=True)
    assert (
        body
        == (
            '\n# Lookup matches for "appended" in /\n\n'
            "| Path | Importance | Title | Tags | Snippet |\n"
            "|------|------------|-------|------|---------|\n"
            "| /docs/a.md#appended | 0.70 | Alpha › Appended | alpha | More. |\n"
        ).encode()
    )
    assert parse_lookup(body) == rows


def row_line(row: LookupRow, *, body_mode: bool = True) -> str:
    """The table line a row renders to."""
    return render_lookup("q", "/", [row], body_mode=body_mode).decode().split("\n")[-2]


def test_lookup_cells_are_escaped_but_the_anchor_is_not() -> None:
    row = LookupRow("/my_docs/a#1.md", "sec_1", 0.125, "T\r\nx|y", ("a_b", "c"), "s\nnip|pet")
    line = row_line(row)
    assert line == "| /my\\_docs/a\\#1.md#sec_1 | 0.12 | T x\\|y | a\\_b, c | s nip\\|pet |"
    parsed = parse_lookup(render_lookup("q", "/", [row], body_mode=True))
    assert parsed == [
        LookupRow("/my_docs/a#1.md", "sec_1", 0.12, "T x|y", ("a_b", "c"), "s nip|pet")
    ]


def test_lookup_heading_escapes_query_and_scope() -> None:
    body = render_lookup("a_b [c]", "/my_dir", [], body_mode=False)
    assert body.startswith(b'\n# Lookup matches for "a\\_b \\[c\\]" in /my\\_dir\n\n')
    assert parse_lookup(body) == []


def test_a_query_with_a_line_break_still_parses() -> None:
    row = LookupRow("/a.md", "", 0.5, "A", (), None)
    assert parse_lookup(render_lookup("x\ny", "/", [row], body_mode=False)) == [row]


@pytest.mark.parametrize(
    ("value", "text"), [(0.7, "0.70"), (1.0, "1.00"), (0.005, "0.01"), (-0.0, "-0.00")]
)
def test_importance_has_two_decimals(value: float, text: str) -> None:
    assert importance_cell(value) == text


def importance_cell(value: float) -> str:
    return row_line(LookupRow("/a", "", value, "t", (), None), body_mode=False).split(" | ")[1]


def test_importance_special_values_are_written_as_go_does() -> None:
    assert importance_cell(math.nan) == "NaN"
    assert importance_cell(math.inf) == "+Inf"
    assert importance_cell(-math.inf) == "-Inf"
    row = LookupRow("/a", "", math.inf, "t", (), None)
    assert parse_lookup(render_lookup("q", "/", [row], body_mode=False)) == [row]


CELL_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"))
ANCHORS = st.text(st.characters(categories=["L", "Nd"], include_characters="-_"))
TAGS = st.lists(
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n,"), min_size=1),
    max_size=3,
).map(tuple)
IMPORTANCE = st.integers(0, 100).map(lambda n: n / 100)


@given(
    st.booleans(),
    st.lists(st.tuples(CELL_TEXT, ANCHORS, IMPORTANCE, CELL_TEXT, TAGS, CELL_TEXT), max_size=5),
)
def test_parse_lookup_inverts_the_renderer(
    body_mode: bool, raw: list[tuple[str, str, float, str, tuple[str, ...], str]]
) -> None:
    rows = [
        LookupRow("/" + path, anchor, imp, title, tags, snip if body_mode else None)
        for path, anchor, imp, title, tags, snip in raw
    ]
    assert parse_lookup(render_lookup("query", "/", rows, body_mode=body_mode)) == rows


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b'\n# Lookup matches for "q" in /\n\n',
        b'\n# Lookup matches for "q" in /\n\n| Path | Importance | Title | Tags |\n',
        b'\n# Lookup matches for "q" in /\n\n| Path | Importance | Title | Tags |\n'
        b"|------|------------|-------|------|\n| /a | 0.5 | t | x |\n",
        b'\n# Lookup matches for "q" in /\n\n| Path | Importance | Title | Tags |\n'
        b"|------|------------|-------|------|\n| /a | 0.50 | t |\n",
        b'\n# Lookup matches for "q" in /\n\n| Path | Importance | Title | Tags |\n'
        b"|------|------------|-------|------|\n| /a | 0.50 | t | x | y |\n",
        b'\n# Lookup matches for "q" in /\n\n| Path | Importance | Title | Tags |\n'
        b"|------|------------|-------|------|\n| /a# | 0.50 | t | x |\n",
        b'\n# Lookup matches for "q" in /\n\n| Path | Importance | Title | Tags |\n'
        b"|------|------------|-------|------|\n| /a | nan | t | x |\n",
        b'\n# Lookup matches for "q" in /\n\n| Path | Importance | Title | Tags |\n'
        b"|------|------------|-------|------|\n| /a | 0.50 | t_ | x |\n",
    ],
)
def test_parse_lookup_refuses(body: bytes) -> None:
    with pytest.raises(MalformedResponse):
        parse_lookup(body)


BODY_BYTES = st.one_of(
    st.binary(max_size=120),
    st.text(alphabet="| -#\\\n01.aP", max_size=80).map(
        lambda t: (
            b'\n# Lookup matches for "q" in /\n\n| Path | Importance | Title | Tags |\n'
            b"|------|------------|-------|------|\n" + t.encode()
        )
    ),
)


@settings(max_examples=300)
@given(BODY_BYTES)
def test_arbitrary_bodies_raise_only_malformed_response(body: bytes) -> None:
    for parse in (parse_lookup, parse_index, parse_history):
        with contextlib.suppress(MalformedResponse):
            parse(body)
