"""Fuzzing, short: every parser of untrusted bytes (requests, version files, responses and the
bodies and WATCH streams a client reads) raises nothing but the protocol's own errors on random and
mutated inputs, the section splitter and link extraction take any body, and the live server
answers a few thousand random and mutated requests each with a well-formed response (the bench
does over a million)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from reliability.fuzzing import (
    MARKDOWN,
    REQUESTS,
    RESPONSES,
    VERSION_FILES,
    WATCH_STREAMS,
    fuzz_live,
    read_markdown,
    read_response,
    read_stream,
)
from support.quicclient import connect
from support.server import WRITE_TOKEN, running_server

from markproto.protocol import storefmt, wire
from markproto.protocol.errors import ProtocolError

QUICK = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@QUICK
@given(REQUESTS)
def test_the_request_parser_raises_only_protocol_errors(data: bytes) -> None:
    try:
        request = wire.parse_request(data)
    except ProtocolError:
        return
    assert request.verb in wire.VERBS and request.path.startswith("/")


@QUICK
@given(VERSION_FILES)
def test_the_version_file_parser_raises_only_protocol_errors(data: bytes) -> None:
    try:
        version = storefmt.parse_version(data)
    except ProtocolError:
        return
    assert data.endswith(version.body)


@QUICK
@given(RESPONSES)
def test_responses_and_their_bodies_raise_only_protocol_errors(data: bytes) -> None:
    try:
        read_response(data)
    except ProtocolError:
        return


@QUICK
@given(WATCH_STREAMS)
def test_a_watch_stream_in_pieces_raises_only_protocol_errors(data: bytes) -> None:
    try:
        read_stream(data)
    except ProtocolError:
        return


@QUICK
@given(MARKDOWN)
def test_any_body_splits_into_sections_and_gives_its_links(data: bytes) -> None:
    read_markdown(data)


async def test_the_live_server_answers_every_fuzzed_request_well_formed(tmp_path: Path) -> None:
    async with running_server(tmp_path / "root") as server:
        client = await connect("127.0.0.1", server.port, cafile=server.cert)
        try:
            statuses, problems = await fuzz_live(client, 2_000, WRITE_TOKEN)
        finally:
            client.hang_up()
    assert problems == []
    assert sum(statuses.values()) == 2_000
    assert {"ok", "bad-request", "not-found"} <= set(statuses)  # valid, broken and missing alike
