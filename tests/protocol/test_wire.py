"""Requests and responses on the wire (SPEC §2, §3.1, §3.4)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from markproto.protocol.errors import (
    MalformedRequest,
    MalformedResponse,
    RequestTooLarge,
)
from markproto.protocol.limits import MAX_BODY, MAX_FRONTMATTER, MAX_PATH, MAX_PAYLOAD
from markproto.protocol.wire import (
    VERBS,
    Request,
    Response,
    emit_request,
    emit_response,
    error_response,
    parse_request,
    parse_response,
    split_frontmatter,
)

# --- frontmatter split ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "block", "body"),
    [
        (b"", None, b""),
        (b"# doc\n", None, b"# doc\n"),
        (b"--- \nx", None, b"--- \nx"),
        (b"---\nk: v\n---\nbody", b"k: v", b"body"),
        (b"---\n\n---\n", b"", b""),
        (b"---\n\n---\n---\nmore", b"", b"---\nmore"),
        (b"---\nk: v\n---", b"k: v", b""),
        (b"---\n\n---", b"", b""),
        (b"---\nk: v\n---\nb\n---\nc", b"k: v", b"b\n---\nc"),
        (b"---\nk: v\n----\n---\n", b"k: v\n----", b""),
    ],
)
def test_split_frontmatter(data: bytes, block: bytes | None, body: bytes) -> None:
    assert split_frontmatter(data) == (block, body)


@pytest.mark.parametrize("data", [b"---\n", b"---\n---\n", b"---\n---", b"---\nk: v\n", b"---\nk"])
def test_an_unclosed_block_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedRequest):
        split_frontmatter(data)


def test_the_block_limit_applies_to_requests_only() -> None:
    big = b"---\n" + b"#" * (MAX_FRONTMATTER + 1) + b"\n---\n"
    with pytest.raises(RequestTooLarge):
        split_frontmatter(big)
    assert split_frontmatter(big, None)[0] == b"#" * (MAX_FRONTMATTER + 1)
    exact = b"---\n" + b"#" * MAX_FRONTMATTER + b"\n---\n"
    assert split_frontmatter(exact)[0] == b"#" * MAX_FRONTMATTER


# --- requests ---------------------------------------------------------------------------------


def test_parse_a_bare_fetch() -> None:
    assert parse_request(b"FETCH /docs/a.md\n") == Request("FETCH", "/docs/a.md", {}, b"")


def test_parse_a_publish() -> None:
    data = b'PUBLISH /a.md\n---\nauth: t\nexpected-version: "0"\n---\n# A\n\n  body  \n'
    assert parse_request(data) == Request(
        "PUBLISH", "/a.md", {"auth": "t", "expected-version": "0"}, b"# A\n\n  body  \n"
    )


def test_every_verb_parses() -> None:
    assert {
        "FETCH",
        "LIST",
        "VERSIONS",
        "PUBLISH",
        "ARCHIVE",
        "APPEND",
        "LOOKUP",
        "WATCH",
    } == VERBS
    for verb in VERBS:
        assert parse_request(f"{verb} /x\n".encode()).verb == verb


@pytest.mark.parametrize(
    ("data", "request_"),
    [
        (b"FETCH /a.md\r\n", Request("FETCH", "/a.md", {}, b"")),
        (b"FETCH /a.md", Request("FETCH", "/a.md", {}, b"")),
        (b"LIST /docs/sub/c d.md\n", Request("LIST", "/docs/sub/c d.md", {}, b"")),
        (b"FETCH /a\tb\n", Request("FETCH", "/a\tb", {}, b"")),
        (b"FETCH /\xc3\xa9\n", Request("FETCH", "/é", {}, b"")),
        (b"PUBLISH /a.md\n---\n\n---\n", Request("PUBLISH", "/a.md", {}, b"")),
        (b"PUBLISH /a.md\n---\nk: v\n---", Request("PUBLISH", "/a.md", {"k": "v"}, b"")),
        (b"PUBLISH /a.md\n---\nk: ~\n---\n", Request("PUBLISH", "/a.md", {"k": ""}, b"")),
        (b"PUBLISH /a.md\n---\n# c\n---\nx", Request("PUBLISH", "/a.md", {}, b"x")),
        (
            b"PUBLISH /a.md\nbody\n---\nk: v\n",
            Request("PUBLISH", "/a.md", {}, b"body\n---\nk: v\n"),
        ),
    ],
)
def test_parse_request_edge_cases(data: bytes, request_: Request) -> None:
    assert parse_request(data) == request_


@pytest.mark.parametrize(
    "data",
    [
        b"\n",
        b"FETCH\n",
        b"FETCH\t/a\n",
        b" /a\n",
        b"fetch /a\n",
        b"Fetch /a\n",
        b"Watch /a\n",
        b"WRITE /a\n",
        b"FETCH \n",
        b"FETCH a.md\n",
        b"FETCH  /a\n",
        b"FETCH /a\x00\n",
        b"FETCH /a\x01b\n",
        b"FETCH /a\x1f\n",
        b"FETCH /a\x7f\n",
        b"FETCH /a\rb\n",
        b"FETCH /\xff\n",
        b"FETCH /a\n---\n---\n",
        b"FETCH /a\n---\nk: v\n",
        b"FETCH /a\n---\nk: 1\nk: 2\n---\n",
        b"FETCH /a\n---\nk: [1, 2]\n---\n",
        b"FETCH /a\n---\nk:\n  - 1\n---\n",
        b"FETCH /a\n---\nk: 'open\n---\n",
        b"FETCH /a\n---\nk: \xff\n---\n",
    ],
)
def test_malformed_requests(data: bytes) -> None:
    with pytest.raises(MalformedRequest):
        parse_request(data)


def test_the_request_line_cap_is_4096_bytes_before_the_newline() -> None:
    line = b"VERSIONS /" + b"a" * 4086
    assert len(line) == 4096
    assert parse_request(line + b"\n").path == line[9:].decode()
    assert parse_request(line).path == line[9:].decode()
    with pytest.raises(RequestTooLarge):
        parse_request(line + b"a\n")
    with pytest.raises(RequestTooLarge):
        parse_request(line + b"a")
    with pytest.raises(RequestTooLarge):
        parse_request(line + b"\r\n")


def test_the_path_cap_is_4087_bytes() -> None:
    assert parse_request(b"FETCH /" + b"a" * 4086 + b"\n").path == "/" + "a" * 4086
    with pytest.raises(MalformedRequest):
        parse_request(b"FETCH /" + b"a" * 4087 + b"\n")


def test_an_empty_stream_is_a_read_failure() -> None:
    with pytest.raises(RequestTooLarge):
        parse_request(b"")


def test_size_limits() -> None:
    assert parse_request(b"PUBLISH /a.md\n" + b"x" * MAX_BODY).body == b"x" * MAX_BODY
    with pytest.raises(RequestTooLarge):
        parse_request(b"PUBLISH /a.md\n" + b"x" * (MAX_BODY + 1))
    with pytest.raises(RequestTooLarge):
        parse_request(b"PUBLISH /a.md\n" + b"x" * (MAX_PAYLOAD + 1))
    block = b"#" * (MAX_FRONTMATTER + 1)
    with pytest.raises(RequestTooLarge):
        parse_request(b"PUBLISH /a.md\n---\n" + block + b"\n---\nbody")
    full = b"---\n" + b"#" * MAX_FRONTMATTER + b"\n---\n" + b"x" * MAX_BODY
    assert parse_request(b"PUBLISH /a.md\n" + full).body == b"x" * MAX_BODY


def test_emit_request_writes_what_the_reference_client_writes() -> None:
    assert emit_request(Request("FETCH", "/a.md", {}, b"")) == b"FETCH /a.md\n"
    publish = Request("PUBLISH", "/a.md", {"type": "Note", "expected-version": "0"}, b"# A\n")
    assert emit_request(publish) == (
        b'PUBLISH /a.md\n---\nexpected-version: "0"\ntype: Note\n---\n# A\n'
    )


def test_a_body_that_starts_with_a_fence_gets_an_empty_block() -> None:
    request = Request("PUBLISH", "/a.md", {}, b"---\ntitle: x\n---\n# A\n")
    data = emit_request(request)
    assert data == b"PUBLISH /a.md\n---\n\n---\n---\ntitle: x\n---\n# A\n"
    assert parse_request(data) == request
    assert emit_request(Request("PUBLISH", "/a.md", {}, b"--- x")) == b"PUBLISH /a.md\n--- x"


KEYS = st.from_regex(r"[a-z0-9-]{1,10}", fullmatch=True)
VALUES = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
    st.text(alphabet="ab1:-# '\"|>@`%!&*?,[]{}~.0x", max_size=6),
    st.sampled_from(["", "~", "null", "yes", "0x1F", "1e3", "2026-01-01T00:00:00Z", "0.7"]),
)
META = st.dictionaries(KEYS, VALUES, max_size=6)
PATHS = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x7f"), max_size=30
).map(lambda p: "/" + "".join(c for c in p if c == "\t" or c >= " "))
BODIES = st.one_of(st.binary(max_size=60), st.binary(max_size=20).map(lambda b: b"---\n" + b))


@pytest.mark.parametrize(
    ("verb", "path", "meta"),
    [
        ("fetch", "/a.md", {}),
        ("Watch", "/a.md", {}),
        ("FETCH", "a.md", {}),
        ("FETCH", "", {}),
        ("FETCH", "/a.md\nFETCH /b.md", {}),  # would emit a second request line
        ("FETCH", "/a\rb", {}),
        ("FETCH", "/a\x00", {}),
        ("FETCH", "/a\x7f", {}),
        ("FETCH", "/\udcff", {}),
        ("FETCH", "/" + "a" * MAX_PATH, {}),
        ("FETCH", "/a.md", {"k": "\ud800"}),
        ("FETCH", "/a.md", {"\ud800": "v"}),
        ("FETCH", "/a.md", {"k": 1}),
    ],
)
def test_a_request_that_cannot_be_emitted_cannot_be_made(
    verb: str, path: str, meta: dict[str, str]
) -> None:
    with pytest.raises(MalformedRequest):
        Request(verb, path, meta, b"")


def test_the_longest_path_and_a_tab_can_be_made() -> None:
    for path in ("/" + "a" * (MAX_PATH - 1), "/a\tb", "/é" * 100):
        request = Request("VERSIONS", path, {}, b"")
        assert parse_request(emit_request(request)) == request


ANY_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from("\n\r\t\x00\x7f/"), max_size=12)


@given(
    st.sampled_from([*sorted(VERBS), "fetch", "X"]),
    ANY_TEXT,
    st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=3),
)
@example("APPEND", "", {"<<": ""})  # found by this test: a merge key is refused at construction
def test_whatever_can_be_made_parses_back_as_itself(
    verb: str, path: str, meta: dict[str, str]
) -> None:
    """The property construction guarantees: no Request emits bytes that read differently."""
    try:
        request = Request(verb, "/" + path, meta, b"body")
    except MalformedRequest:
        return
    assert parse_request(emit_request(request)) == request


@given(st.sampled_from(sorted(VERBS)), PATHS, META, BODIES)
@example("PUBLISH", "/a.md", {}, b"---\n")
@example("PUBLISH", "/a.md", {"k": "v"}, b"---\n---\n")
def test_parse_request_inverts_emit_request(
    verb: str, path: str, meta: dict[str, str], body: bytes
) -> None:
    request = Request(verb, path, meta, body)
    assert parse_request(emit_request(request)) == request


REQUEST_BYTES = st.one_of(
    st.binary(max_size=80),
    st.tuples(
        st.sampled_from([b"FETCH /a\n", b"PUBLISH /a.md\n---\n", b"LIST /\r\n---\nk: ", b"X /"]),
        st.binary(max_size=60),
    ).map(b"".join),
    st.text(alphabet="FETCH /\n-:k v'\"[]{}#\t\r", max_size=60).map(str.encode),
)


@settings(max_examples=300)
@given(REQUEST_BYTES)
def test_arbitrary_bytes_raise_only_protocol_errors(data: bytes) -> None:
    try:
        request = parse_request(data)
    except (MalformedRequest, RequestTooLarge):
        return
    assert request.verb in VERBS
    assert request.path.startswith("/")


# --- responses --------------------------------------------------------------------------------


def test_status_is_a_sorted_key() -> None:
    response = Response("created", {"version": "1", "modified": "2026-01-01T00:00:00Z"}, b"")
    data = b'---\nmodified: "2026-01-01T00:00:00Z"\nstatus: created\nversion: "1"\n---\n'
    assert emit_response(response) == data
    assert parse_response(data) == response


def test_a_body_follows_the_closing_fence_verbatim() -> None:
    response = Response("ok", {}, b"\n# x\n\n")
    assert emit_response(response) == b"---\nstatus: ok\n---\n\n# x\n\n"
    assert parse_response(emit_response(response)) == response


@pytest.mark.parametrize(
    ("status", "meta"),
    [("", {}), ("ok", {"status": "bad"}), ("\ud800", {}), ("ok", {"k": "\udcff"})],
)
def test_a_response_that_cannot_be_emitted_cannot_be_made(
    status: str, meta: dict[str, str]
) -> None:
    with pytest.raises(MalformedResponse):
        Response(status, meta, b"")


def test_error_response() -> None:
    response = error_response("not-found", "/docs/missing.md not found")
    assert response == Response("not-found", {}, b"\n# Not found\n\n/docs/missing.md not found\n")
    assert emit_response(response) == (
        b"---\nstatus: not-found\n---\n\n# Not found\n\n/docs/missing.md not found\n"
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"# no frontmatter\n",
        b"---\nstatus: ok\n",
        b"---\n---\n",
        b"---\n\n---\nbody",
        b"---\n  \n---\n",
        b"---\nversion: 1\n---\n",
        b'---\nstatus: ""\n---\n',
        b"---\nstatus: [ok]\n---\n",
        b"---\nstatus: ok\nstatus: ok\n---\n",
        b"---\nstatus: \xff\n---\n",
    ],
)
def test_malformed_responses(data: bytes) -> None:
    with pytest.raises(MalformedResponse):
        parse_response(data)


def test_a_response_with_an_eof_fence_parses() -> None:
    assert parse_response(b"---\nstatus: ok\n---") == Response("ok", {}, b"")


@given(st.sampled_from(["ok", "not-found", "conflict", "odd status: x"]), META, BODIES)
def test_parse_response_inverts_emit_response(
    status: str, meta: dict[str, str], body: bytes
) -> None:
    meta.pop("status", None)
    response = Response(status, meta, body)
    assert parse_response(emit_response(response)) == response


@settings(max_examples=300)
@given(
    st.one_of(
        st.binary(max_size=80),
        st.binary(max_size=60).map(lambda b: b"---\nstatus: ok\n" + b),
        st.text(alphabet="-\nstau: ok'\"[]#", max_size=40).map(str.encode),
    )
)
def test_arbitrary_responses_raise_only_malformed_response(data: bytes) -> None:
    try:
        response = parse_response(data)
    except MalformedResponse:
        return
    assert response.status
