"""The request-stream assembler as a pure state machine: stream events and a fake clock in,
decisions out (no socket, no loop, no sleep). The transport tests check that each decision is
carried out over real QUIC."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol.limits import MAX_REQUEST_LINE
from markproto.server.streams import (
    Budget,
    Cancel,
    Counts,
    Dispatch,
    Expire,
    Refuse,
    RequestStreams,
    Reset,
)

IDLE = Counts(0, 0, 0)


def streams(
    max_request: int = 10_000, limit: int = 1 << 30, timeout: float | None = 10.0
) -> tuple[RequestStreams, Budget]:
    budget = Budget(limit)
    return RequestStreams(max_request, budget, timeout), budget


# -- whole requests -------------------------------------------------------------------------------


def test_a_whole_request_with_its_fin_keeps_no_state() -> None:
    s, budget = streams()
    assert s.receive(0, b"FETCH /a.md\n", True, 0.0) == Dispatch(0, b"FETCH /a.md\n")
    assert s.receive(4, b"", True, 0.0) == Dispatch(4, b"")  # an empty stream is a request too
    assert s.counts() == IDLE and budget.used == 0 and not s.busy


def test_a_request_in_pieces_is_dispatched_whole_at_its_fin() -> None:
    s, budget = streams()
    assert s.receive(0, b"PUBLISH /a.md\n", False, 0.0) is None
    assert s.receive(0, b"body", False, 1.0) is None
    assert budget.used == 18 and s.counts() == Counts(1, 0, 0)
    assert s.receive(0, b"", True, 2.0) == Dispatch(0, b"PUBLISH /a.md\nbody")
    assert budget.used == 0 and s.counts() == IDLE


def test_unidirectional_streams_are_ignored() -> None:
    s, budget = streams()
    for sid in (2, 3, 6):
        assert s.receive(sid, b"FETCH /uni.md\n" * 400, False, 0.0) is None
        assert s.receive(sid, b"FETCH /uni.md\n", True, 0.0) is None
    assert s.counts() == IDLE and budget.used == 0


# -- caps while bytes arrive ----------------------------------------------------------------------


def test_over_the_request_cap_is_refused_at_once_and_the_rest_discarded() -> None:
    s, budget = streams(max_request=100)
    assert s.receive(0, b"x" * 100, True, 0.0) == Dispatch(0, b"x" * 100)
    assert s.receive(4, b"x" * 101, True, 0.0) == Refuse(4, stop=False)  # finished: nothing to stop
    assert s.receive(8, b"y" * 60, False, 0.0) is None
    assert s.receive(8, b"y" * 60, False, 0.0) == Refuse(8, stop=True)
    assert s.counts() == Counts(0, 0, 1) and budget.used == 0
    assert s.receive(8, b"y" * 5000, False, 0.0) is None  # discarded
    assert s.receive(8, b"", True, 0.0) is None
    assert s.counts() == IDLE


def test_the_line_cap_counts_exactly_4096_bytes_before_the_newline() -> None:
    s, _ = streams()
    line = b"x" * MAX_REQUEST_LINE
    for sid in (0, 4):
        assert s.receive(sid, line, False, 0.0) is None
    assert s.receive(0, b"\n", False, 0.0) is None
    assert s.receive(4, b"y", False, 0.0) == Refuse(4, stop=True)
    assert s.receive(0, b"", True, 0.0) == Dispatch(0, line + b"\n")
    assert s.receive(8, b"z" * (MAX_REQUEST_LINE + 1), True, 0.0) == Refuse(8, stop=False)


def test_the_shared_budget_resets_the_stream_that_would_pass_it() -> None:
    budget = Budget(100)
    one, two = RequestStreams(10_000, budget), RequestStreams(10_000, budget)  # two connections
    assert one.receive(0, b"a" * 60, False, 0.0) is None
    assert two.receive(0, b"b" * 60, False, 0.0) == Reset(0)
    assert budget.used == 60 and two.counts() == Counts(0, 0, 1)
    assert two.receive(0, b"b", True, 0.0) is None  # what it still sends is discarded
    assert one.receive(0, b"\n", True, 0.0) == Dispatch(0, b"a" * 60 + b"\n")
    assert budget.used == 0 and one.counts() == two.counts() == IDLE


# -- timeouts -------------------------------------------------------------------------------------


def test_an_incomplete_request_is_reset_at_the_timeout_and_not_before() -> None:
    s, budget = streams(timeout=10.0)
    s.receive(0, b"PUBLISH /half.md\n", False, 100.0)
    s.receive(0, b"more", False, 109.0)  # new bytes do not move the deadline
    assert s.expire(110.0) == []
    assert s.expire(110.5) == [Reset(0)]
    assert budget.used == 0 and s.counts() == Counts(0, 0, 1)
    assert s.receive(0, b"late", True, 111.0) is None
    assert s.counts() == IDLE


def test_a_handler_past_the_timeout_is_expired_and_its_late_answer_dropped() -> None:
    s, _ = streams(timeout=10.0)
    assert s.receive(0, b"LOOKUP /\n", True, 100.0) == Dispatch(0, b"LOOKUP /\n")
    s.running(0, 100.0)
    s.running(4, 105.0)
    assert s.busy and s.expire(110.0) == []
    assert s.expire(112.0) == [Expire(0)]
    assert not s.answered(0)  # expired: the timeout response was the answer
    assert s.answered(4)
    assert s.counts() == IDLE


def test_without_a_timeout_nothing_expires() -> None:
    s, _ = streams(timeout=None)
    s.receive(0, b"half", False, 0.0)
    s.running(4, 0.0)
    assert s.expire(1e9) == []


# -- the peer goes away ---------------------------------------------------------------------------


def test_a_peer_reset_drops_the_partial_request() -> None:
    s, budget = streams()
    s.receive(0, b"z" * 1500, False, 0.0)
    s.peer_reset(0)
    assert budget.used == 0 and s.counts() == IDLE
    s.receive(4, b"z" * 200, False, 0.0)
    s.receive(4, b"z" * 200, False, 0.0)
    assert s.receive(4, b"", True, 0.0) == Dispatch(4, b"z" * 400)


def test_a_peer_that_stops_reading_cancels_its_handler() -> None:
    s, budget = streams()
    s.running(0, 0.0)
    assert s.peer_stopped(0) == Cancel(0)
    assert not s.answered(0)
    s.receive(4, b"half", False, 0.0)
    assert s.peer_stopped(4) is None  # nothing runs yet: the request is just dropped
    assert s.receive(4, b"rest", True, 0.0) is None
    assert s.peer_stopped(8) is None
    assert budget.used == 0 and s.counts() == IDLE


def test_close_releases_every_buffer_and_names_the_handlers_to_cancel() -> None:
    s, budget = streams(max_request=100)
    s.receive(0, b"a" * 50, False, 0.0)
    s.receive(4, b"b" * 200, False, 0.0)  # refused, discarding
    s.running(8, 0.0)
    assert s.close() == [8]
    assert budget.used == 0 and s.counts() == IDLE and not s.answered(8)


# -- any chunking, any interleaving ---------------------------------------------------------------


def outcome(events: list[tuple[bytes, bool]], end: str, max_request: int) -> tuple[str, bool]:
    """What must become of one stream: ("served" | "refused" | "reset" | "open", and whether the
    peer is asked to stop sending)."""
    seen = b""
    for data, fin in events:
        seen += data
        over = len(seen) > max_request
        line = len(seen) > MAX_REQUEST_LINE and b"\n" not in seen[: MAX_REQUEST_LINE + 1]
        if over or line:
            return "refused", not fin
    return {"fin": "served", "reset": "reset", "open": "open"}[end], False


payloads = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda head, n, tail: head + b"x" * n + tail,
        st.binary(max_size=8),
        st.integers(MAX_REQUEST_LINE - 8, MAX_REQUEST_LINE + 8),
        st.binary(max_size=8),
    ),
)


@st.composite
def stream_events(draw: st.DrawFn) -> tuple[list[tuple[bytes, bool]], str]:
    """One stream's data events as aioquic delivers them (never empty without FIN), and its end."""
    payload = draw(payloads)
    cuts = draw(st.sets(st.integers(1, max(len(payload) - 1, 1)), max_size=6))
    bounds = [0, *sorted(c for c in cuts if c < len(payload)), len(payload)]
    events = [(payload[a:b], False) for a, b in itertools.pairwise(bounds) if b > a]
    end = draw(st.sampled_from(["fin", "reset", "open"]))
    fin_on_data = draw(st.booleans())  # FIN with the last bytes, or in an empty frame of its own
    if end == "fin" and events and fin_on_data:
        events[-1] = (events[-1][0], True)
    elif end == "fin":
        events.append((b"", True))
    return events, end


@settings(max_examples=200, deadline=None)
@given(st.lists(stream_events(), min_size=1, max_size=4), st.integers(40, 5000), st.randoms())
def test_any_chunking_and_interleaving_gives_whole_requests(
    plan: list[tuple[list[tuple[bytes, bool]], str]], max_request: int, rnd: random.Random
) -> None:
    s, budget = streams(max_request=max_request)
    queues: list[list[tuple[int, bytes, bool] | tuple[int, None, None]]] = []
    for index, (events, end) in enumerate(plan):
        queue: list[tuple[int, bytes, bool] | tuple[int, None, None]] = [
            (index * 4, data, fin) for data, fin in events
        ]
        if end == "reset":
            queue.append((index * 4, None, None))
        queues.append(queue)
    decided: dict[int, Dispatch | Refuse | Reset] = {}
    while any(queues):
        sid, data, fin = rnd.choice([q for q in queues if q]).pop(0)
        if data is None:
            s.peer_reset(sid)
            continue
        assert fin is not None
        decision = s.receive(sid, data, fin, 0.0)
        if decision is not None:
            assert sid not in decided  # one decision per stream
            decided[sid] = decision

    partial = discarding = 0
    for index, (events, end) in enumerate(plan):
        sid, payload = index * 4, b"".join(data for data, _ in events)
        what, stop = outcome(events, end, max_request)
        if what == "served":
            assert decided[sid] == Dispatch(sid, payload)
        elif what == "refused":
            assert decided[sid] == Refuse(sid, stop=stop)
        else:
            assert sid not in decided
            partial += what == "open" and payload != b""
        discarding += stop and end == "open"  # refused mid-stream, and never finished or reset
    assert s.counts() == Counts(partial, 0, discarding)
    assert budget.used == sum(
        len(b"".join(d for d, _ in events))
        for events, end in plan
        if outcome(events, end, max_request)[0] == "open"
    )
    s.close()
    assert budget.used == 0 and s.counts() == IDLE
