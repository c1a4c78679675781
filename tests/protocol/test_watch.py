"""The WATCH codec (SPEC §5.8): cursors, blocks and the stream reader, with properties for the
round trips and the 8192-byte bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import wire
from markproto.protocol.limits import MAX_PATH
from markproto.protocol.watch import (
    MAX_BLOCK,
    MAX_SEQ,
    BlockTooLarge,
    Control,
    Cursor,
    InvalidWatchCursor,
    MalformedWatch,
    WatchEvent,
    WatchReader,
    emit_control,
    emit_event,
    parse_block,
)

EPOCH = "3f2a9c01b7de"
HASH = "sha256-" + "ab" * 32

epochs = st.text(st.sampled_from("abcXYZ019._-"), min_size=1, max_size=64)
seqs = st.integers(0, MAX_SEQ)
cursors = st.builds(Cursor, epochs, seqs)
# Paths a document may have: rooted, no control character but TAB, any other Unicode.
path_chars = st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\n\r\x00\x7f\x85\u2028\u2029"
).filter(lambda c: c == "\t" or ord(c) >= 0x20)
paths = st.builds(lambda s: "/" + s, st.text(path_chars, max_size=80))
values = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\x85"),
    min_size=1,
    max_size=40,
)
events = st.builds(
    WatchEvent,
    cursors,
    paths,
    st.integers(1, 10**9),
    st.sampled_from(["publish", "append", "archive", "rename"]),
    st.none() | st.just(HASH),
    st.none() | values,
    st.none() | values,
)


# -- cursors ---------------------------------------------------------------------------------------


@given(cursors)
def test_a_cursor_round_trips_through_its_text(cursor: Cursor) -> None:
    assert Cursor.parse(str(cursor)) == cursor


@pytest.mark.parametrize(
    "text",
    [
        "",
        ":",
        "e:",
        ":1",
        "e",
        "e:01",
        "e:+1",
        "e:-1",
        "e:1.0",
        "e: 1",
        "e:1 ",
        "é:1",
        "e/x:1",
        "e:1:2",
        "x" * 65 + ":1",
        f"e:{MAX_SEQ + 1}",
        "e:１",
    ],
)
def test_malformed_cursors_are_refused(text: str) -> None:
    with pytest.raises(InvalidWatchCursor):
        Cursor.parse(text)


def test_cursor_bounds() -> None:
    assert str(Cursor.parse("e:0")) == "e:0"
    assert Cursor.parse(f"{'x' * 64}:{MAX_SEQ}").seq == MAX_SEQ
    assert Cursor("a.b_c-D9", 7) < Cursor("a.b_c-D9", 10)
    with pytest.raises(InvalidWatchCursor):
        Cursor("", 1)
    with pytest.raises(InvalidWatchCursor):
        Cursor("e", -1)


# -- blocks ----------------------------------------------------------------------------------------


def test_blocks_are_emitted_like_response_frontmatter() -> None:
    assert (
        emit_control("ok", Cursor(EPOCH, 0))
        == (f"---\ncursor: {EPOCH}:0\nstatus: ok\n---\n").encode()
    )
    assert emit_control("closing") == b"---\nstatus: closing\n---\n"
    event = WatchEvent(Cursor(EPOCH, 12), "/docs/a b.md", 3, "append", HASH, "bot: one")
    assert (
        emit_event(event)
        == (
            "---\n"
            "agent: 'bot: one'\n"
            f"cursor: {EPOCH}:12\n"
            f"hash: {HASH}\n"
            "op: append\n"
            "path: /docs/a b.md\n"
            'version: "3"\n'
            "---\n"
        ).encode()
    )


@settings(max_examples=400)
@given(events)
def test_an_event_round_trips_through_its_block(event: WatchEvent) -> None:
    assert parse_block(emit_event(event)) == event


@given(cursors, st.sampled_from(["ok", "resync", "closing", "unauthorized", "not-permitted"]))
def test_a_control_block_round_trips(cursor: Cursor, status: str) -> None:
    assert parse_block(emit_control(status, cursor)) == Control(status, cursor)


long_paths = st.builds(
    lambda parts: "/" + "/".join(parts)[: MAX_PATH - 1],
    st.lists(st.text(st.sampled_from("\tab'\"#: é\u3000\U0001f600"), max_size=255), max_size=20),
)


@settings(max_examples=300)
@given(long_paths, st.none() | st.text(st.sampled_from("\tx: '\""), max_size=1000))
def test_every_event_block_fits_8192_bytes_or_is_refused(path: str, agent: str | None) -> None:
    event = WatchEvent(Cursor("e" * 64, MAX_SEQ), path, 10**12, "publish", HASH, agent or None)
    try:
        block = emit_event(event)
    except BlockTooLarge:
        bare = WatchEvent(event.cursor, path, event.version, event.op)
        with pytest.raises(BlockTooLarge):
            emit_event(bare)
        return
    assert len(block) <= MAX_BLOCK
    parsed = parse_block(block)
    assert isinstance(parsed, WatchEvent)
    assert (parsed.cursor, parsed.path, parsed.version, parsed.op) == (
        event.cursor,
        path,
        event.version,
        event.op,
    )
    assert parsed.agent in (event.agent, None) and parsed.hash in (HASH, None)


def test_optional_keys_go_first_when_an_event_does_not_fit() -> None:
    path = "/" + "\t" * 3000  # each TAB is written as two bytes, so the path alone takes ~6 KB
    event = WatchEvent(Cursor(EPOCH, 1), path, 1, "publish", HASH, "a" * 2500)
    parsed = parse_block(emit_event(event))
    assert isinstance(parsed, WatchEvent)
    assert parsed.path == path and parsed.agent is None and parsed.hash == HASH
    with pytest.raises(BlockTooLarge):
        emit_event(WatchEvent(Cursor(EPOCH, 1), "/" + "\t" * 4086, 1, "publish"))


def test_unknown_keys_are_ignored_and_unknown_ops_kept_for_the_reader_to_skip() -> None:
    block = f"---\ncolour: blue\ncursor: {EPOCH}:4\nop: rename\npath: /a.md\nversion: 2\n---\n"
    event = parse_block(block.encode())
    assert event == WatchEvent(Cursor(EPOCH, 4), "/a.md", 2, "rename")
    assert isinstance(event, WatchEvent) and not event.known
    control = parse_block(f"---\ncursor: {EPOCH}:4\nnext: x\nstatus: ok\n---\n".encode())
    assert control == Control("ok", Cursor(EPOCH, 4), {"next": "x"})


@pytest.mark.parametrize(
    "block",
    [
        b"cursor: e:1\n",
        b"---\ncursor: e:1\nstatus: ok\n",
        b"---\nstatus: \n---\n",
        b"---\nop: publish\npath: /a\nversion: 1\n---\n",
        b"---\ncursor: e:01\nop: publish\npath: /a\nversion: 1\n---\n",
        b"---\ncursor: e:1\nop: publish\npath: a\nversion: 1\n---\n",
        b"---\ncursor: e:1\nop: publish\npath: /a\nversion: 0\n---\n",
        b"---\ncursor: e:1\nop: publish\npath: /a\nversion: x\n---\n",
        b"---\ncursor: e:1\npath: /a\nversion: 1\n---\n",
        b"---\ncursor: e:1\nhash: md5-x\nop: publish\npath: /a\nversion: 1\n---\n",
        b"---\ncursor: e:1\nop: [a]\npath: /a\nversion: 1\n---\n",
        b"---\n" + b"k: " + b"x" * MAX_BLOCK + b"\n---\n",
    ],
)
def test_malformed_blocks_are_refused(block: bytes) -> None:
    with pytest.raises(MalformedWatch):
        parse_block(block)


# -- the reader ------------------------------------------------------------------------------------


def stream_of(blocks: list[bytes]) -> bytes:
    return b"".join(blocks)


@settings(max_examples=200)
@given(st.lists(events, max_size=6), st.data())
def test_the_reader_finds_the_same_blocks_however_the_bytes_are_cut(
    evs: list[WatchEvent], data: st.DataObject
) -> None:
    ack = emit_control("ok", Cursor(EPOCH, 0))
    end = emit_control("closing", Cursor(EPOCH, 9))
    raw = stream_of([ack, *map(emit_event, evs), end])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    reader = WatchReader()
    found = []
    for start, stop in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        found += reader.feed(raw[start:stop])
    assert reader.end() is None
    assert found == [Control("ok", Cursor(EPOCH, 0)), *evs, Control("closing", Cursor(EPOCH, 9))]


def test_a_refusal_in_the_acknowledgements_place_is_an_ordinary_response() -> None:
    refusal = wire.emit_response(wire.error_response("unauthorized", "authentication required"))
    reader = WatchReader()
    assert reader.feed(refusal[:10]) == []
    assert reader.feed(refusal[10:]) == []
    response = reader.end()
    assert response == wire.error_response("unauthorized", "authentication required")


def test_a_resync_may_take_the_acknowledgements_place() -> None:
    reader = WatchReader()
    assert reader.feed(emit_control("resync", Cursor(EPOCH, 3))) == [
        Control("resync", Cursor(EPOCH, 3))
    ]
    assert reader.end() is None


def test_a_server_without_watch_is_a_refusal() -> None:
    reader = WatchReader()
    reader.feed(wire.emit_response(wire.error_response("bad-request", "bad request")))
    response = reader.end()
    assert response is not None and response.status == "bad-request"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        emit_control("ok", Cursor(EPOCH, 0)) + b"---\ncursor: e:1\n",
        emit_control("ok", Cursor(EPOCH, 0)) + b"garbage\n",
    ],
)
def test_a_cut_or_garbled_stream_is_malformed(raw: bytes) -> None:
    def read() -> None:
        reader = WatchReader()
        reader.feed(raw)
        reader.end()

    with pytest.raises(MalformedWatch):
        read()


def test_the_reader_holds_at_most_one_block() -> None:
    reader = WatchReader()
    reader.feed(emit_control("ok", Cursor(EPOCH, 0)))
    with pytest.raises(MalformedWatch):
        reader.feed(b"---\n" + b"x" * MAX_BLOCK)


def test_a_refusal_body_is_kept_within_bounds() -> None:
    reader = WatchReader()
    reader.feed(b"---\nstatus: server-error\n---\n" + b"x" * 200_000)
    response = reader.end()
    assert response is not None and len(response.body) == 64 * 1024
