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
    Limited,
    Queued,
    Refuse,
    RequestStreams,
    Reset,
    Rotation,
    Source,
)

IDLE = Counts(0, 0, 0, 0)


def streams(
    max_request: int = 10_000, limit: int = 1 << 30, timeout: float | None = 10.0
) -> tuple[RequestStreams, Budget]:
    budget = Budget(limit)
    return RequestStreams(max_request, budget, timeout), budget


def whole(s: RequestStreams, sid: int, data: bytes, now: float = 0.0) -> Dispatch | None:
    """Receive a whole request and take it out of the queue at once (its turn)."""
    assert s.receive(sid, data, True, now) == Queued(sid)
    return s.next(now)


def served(s: RequestStreams, sid: int) -> None:
    """The answer to ``sid`` was sent."""
    assert s.answered(sid)


# -- whole requests -------------------------------------------------------------------------------


def test_a_whole_request_with_its_fin_is_never_buffered() -> None:
    s, budget = streams()
    assert s.receive(0, b"FETCH /a.md\n", True, 0.0) == Queued(0)
    assert s.receive(4, b"", True, 0.0) == Queued(4)  # an empty stream is a request too
    assert budget.used == 0 and s.counts() == Counts(0, 2, 0, 0) and s.busy
    assert s.next(0.0) == Dispatch(0, b"FETCH /a.md\n")  # in arrival order
    assert s.next(0.0) == Dispatch(4, b"")
    assert s.next(0.0) is None and s.counts() == Counts(0, 0, 2, 0)
    served(s, 0)
    served(s, 4)
    assert s.counts() == IDLE and not s.busy


def test_a_request_in_pieces_is_queued_whole_at_its_fin() -> None:
    s, budget = streams()
    assert s.receive(0, b"PUBLISH /a.md\n", False, 0.0) is None
    assert s.receive(0, b"body", False, 1.0) is None
    assert budget.used == 18 and s.counts() == Counts(1, 0, 0, 0)
    assert s.receive(0, b"", True, 2.0) == Queued(0)
    assert budget.used == 0 and s.next(2.0) == Dispatch(0, b"PUBLISH /a.md\nbody")


def test_unidirectional_streams_are_ignored() -> None:
    s, budget = streams()
    for sid in (2, 3, 6):
        assert s.receive(sid, b"FETCH /uni.md\n" * 400, False, 0.0) is None
        assert s.receive(sid, b"FETCH /uni.md\n", True, 0.0) is None
    assert s.counts() == IDLE and budget.used == 0


# -- caps while bytes arrive ----------------------------------------------------------------------


def test_over_the_request_cap_is_refused_at_once_and_the_rest_discarded() -> None:
    s, budget = streams(max_request=100)
    assert whole(s, 0, b"x" * 100) == Dispatch(0, b"x" * 100)
    served(s, 0)
    assert s.receive(4, b"x" * 101, True, 0.0) == Refuse(4, stop=False)  # finished: nothing to stop
    assert s.receive(8, b"y" * 60, False, 0.0) is None
    assert s.receive(8, b"y" * 60, False, 0.0) == Refuse(8, stop=True)
    assert s.counts() == Counts(0, 0, 0, 1) and budget.used == 0
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
    assert s.receive(0, b"", True, 0.0) == Queued(0)
    assert s.next(0.0) == Dispatch(0, line + b"\n")
    assert s.receive(8, b"z" * (MAX_REQUEST_LINE + 1), True, 0.0) == Refuse(8, stop=False)


def test_the_shared_budget_resets_the_stream_that_would_pass_it() -> None:
    budget = Budget(100)
    one, two = RequestStreams(10_000, budget), RequestStreams(10_000, budget)  # two connections
    assert one.receive(0, b"a" * 60, False, 0.0) is None
    assert two.receive(0, b"b" * 60, False, 0.0) == Reset(0)
    assert budget.used == 60 and two.counts() == Counts(0, 0, 0, 1)
    assert two.receive(0, b"b", True, 0.0) is None  # what it still sends is discarded
    assert one.receive(0, b"\n", True, 0.0) == Queued(0)
    assert budget.used == 0 and two.counts() == IDLE


# -- timeouts -------------------------------------------------------------------------------------


def test_an_incomplete_request_is_reset_at_the_timeout_and_not_before() -> None:
    s, budget = streams(timeout=10.0)
    s.receive(0, b"PUBLISH /half.md\n", False, 100.0)
    s.receive(0, b"more", False, 109.0)  # new bytes do not move the deadline
    assert s.expire(110.0) == []
    assert s.expire(110.5) == [Reset(0)]
    assert budget.used == 0 and s.counts() == Counts(0, 0, 0, 1)
    assert s.receive(0, b"late", True, 111.0) is None
    assert s.counts() == IDLE


def test_a_request_past_the_timeout_is_expired_once_and_still_answered() -> None:
    s, _ = streams(timeout=10.0)
    assert whole(s, 0, b"LOOKUP /\n", 100.0) == Dispatch(0, b"LOOKUP /\n")
    assert whole(s, 4, b"LOOKUP /\n", 105.0) == Dispatch(4, b"LOOKUP /\n")
    assert s.busy and s.expire(110.0) == []
    assert s.expire(112.0) == [Expire(0)]
    assert s.expire(130.0) == [Expire(4)]  # once each
    assert s.counts() == Counts(0, 0, 2, 0)
    served(s, 0)  # the timeout response, or what the cancelled handler said
    served(s, 4)
    assert s.counts() == IDLE


def test_a_request_still_waiting_its_turn_at_the_timeout_is_expired() -> None:
    s, _ = streams(timeout=10.0)
    assert s.receive(0, b"FETCH /a.md\n", True, 100.0) == Queued(0)
    assert s.expire(111.0) == [Expire(0)]
    assert s.next(111.0) is None  # out of the queue: it is answered with the timeout response
    served(s, 0)
    assert s.counts() == IDLE


def test_without_a_timeout_nothing_expires() -> None:
    s, _ = streams(timeout=None)
    s.receive(0, b"half", False, 0.0)
    whole(s, 4, b"FETCH /a.md\n")
    s.receive(8, b"FETCH /b.md\n", True, 0.0)
    assert s.expire(1e9) == []


# -- the peer goes away ---------------------------------------------------------------------------


def test_a_peer_reset_drops_the_partial_request() -> None:
    s, budget = streams()
    s.receive(0, b"z" * 1500, False, 0.0)
    s.peer_reset(0)
    assert budget.used == 0 and s.counts() == IDLE
    s.receive(4, b"z" * 200, False, 0.0)
    s.receive(4, b"z" * 200, False, 0.0)
    assert s.receive(4, b"", True, 0.0) == Queued(4)
    assert s.next(0.0) == Dispatch(4, b"z" * 400)


def test_a_peer_that_stops_reading_cancels_its_handler() -> None:
    s, budget = streams()
    whole(s, 0, b"FETCH /a.md\n")
    assert s.peer_stopped(0) == Cancel(0)
    assert not s.answered(0)
    s.receive(4, b"half", False, 0.0)
    assert s.peer_stopped(4) is None  # nothing runs yet: the request is just dropped
    assert s.receive(4, b"rest", True, 0.0) is None
    assert s.receive(12, b"FETCH /b.md\n", True, 0.0) == Queued(12)
    assert s.peer_stopped(12) is None and s.next(0.0) is None  # it leaves the queue
    assert s.peer_stopped(8) is None
    assert budget.used == 0 and s.counts() == IDLE


def test_close_releases_every_buffer_and_names_the_handlers_to_cancel() -> None:
    s, budget = streams(max_request=100)
    s.receive(0, b"a" * 50, False, 0.0)
    s.receive(4, b"b" * 200, False, 0.0)  # refused, discarding
    whole(s, 8, b"FETCH /a.md\n")
    s.receive(12, b"FETCH /b.md\n", True, 0.0)
    assert s.close() == [8]
    assert budget.used == 0 and s.counts() == IDLE and not s.answered(8)


# -- sources: admission, credit, budgets ----------------------------------------------------------


class Bucket:
    """A token bucket on a fake clock: ``rate`` tokens a second, up to ``burst``."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = float(burst), 0.0
        self.spent = 0

    def __call__(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        self.spent += 1
        return True


def test_a_source_without_tokens_is_limited_at_the_first_byte_and_never_buffered() -> None:
    bucket = Bucket(rate=1.0, burst=2)
    source = Source("192.0.2.1", 1 << 20, bucket)
    budget = Budget(1 << 20)
    s = RequestStreams(10_000, budget, 10.0, source)
    assert s.receive(0, b"FETCH /a.md\n", True, 0.0) == Queued(0)
    assert s.receive(4, b"PUBLISH /a.md\n", False, 0.0) is None  # admitted: its first byte
    assert s.receive(4, b"more", False, 0.0) is None  # not a new stream: no token spent
    assert s.receive(8, b"FETCH /b.md\n", True, 0.0) == Limited(8, stop=False)
    assert s.receive(12, b"PUBLISH /b.md\n" * 100, False, 0.0) == Limited(12, stop=True)
    assert budget.used == source.budget.used == 18  # only the admitted partial one
    assert s.receive(12, b"x" * 5000, True, 0.0) is None  # discarded
    assert bucket.spent == 2 and source.owed


def test_held_credit_comes_back_one_stream_per_token_round_robin_and_prepaid() -> None:
    bucket = Bucket(rate=4.0, burst=1)  # a token every 0.25 s, exactly
    source = Source("192.0.2.1", 1 << 20, bucket)
    budget = Budget(1 << 20)
    one, two = (RequestStreams(10_000, budget, None, source) for _ in range(2))
    assert one.receive(0, b"FETCH /\n", True, 0.0) == Queued(0)
    for sid in (4, 8, 12):
        assert one.receive(sid, b"FETCH /\n", True, 0.0) == Limited(sid, stop=False)
    assert two.receive(0, b"FETCH /\n", True, 0.0) == Limited(0, stop=False)
    assert (one.take_holds(), two.take_holds(), one.take_holds()) == (3, 1, 0)
    assert source.release(0.125) == []  # half a token
    assert source.release(0.25) == [one]
    assert source.release(0.5) == [two]  # round-robin, one per token
    assert source.release(0.75) == [one]
    assert source.release(10.0) == [one] and not source.owed
    assert bucket.spent == 5
    assert (one.prepaid, two.prepaid) == (3, 1)
    for sid in (16, 20, 24):  # the credit given back was paid for: these are admitted
        assert one.receive(sid, b"FETCH /\n", True, 10.0) == Queued(sid)
    assert bucket.spent == 5 and one.prepaid == 0
    # ... and their own credit is held in turn: over its rate, one stream per token.
    assert one.take_holds() == 3 and source.owed
    assert source.release(10.25) == [one] and one.prepaid == 1
    two.close()
    assert two.prepaid == 1  # forgotten with its connection: nothing is owed to it
    assert source.release(100.0) == [one]  # a burst of 1: one token saved up at most
    assert source.release(101.0) == [one] and not source.owed


def test_a_source_budget_is_shared_by_its_connections_and_kept_apart_from_others() -> None:
    budget = Budget(1000)
    busy, other = Source("192.0.2.1", 100), Source("192.0.2.2", 100)
    one, two = (RequestStreams(10_000, budget, None, busy) for _ in range(2))
    three = RequestStreams(10_000, budget, None, other)
    assert one.receive(0, b"a" * 60, False, 0.0) is None
    assert two.receive(0, b"b" * 60, False, 0.0) == Reset(0)  # the source's 100 bytes
    assert three.receive(0, b"c" * 60, False, 0.0) is None  # another source: its own room
    assert (busy.budget.used, other.budget.used, budget.used) == (60, 60, 120)
    one.close()
    three.close()
    assert (busy.budget.used, other.budget.used, budget.used) == (0, 0, 0)


def test_the_server_budget_bounds_every_source_together() -> None:
    budget = Budget(100)
    one = RequestStreams(10_000, budget, None, Source("192.0.2.1", 80))
    two = RequestStreams(10_000, budget, None, Source("192.0.2.2", 80))
    assert one.receive(0, b"a" * 60, False, 0.0) is None
    assert two.receive(0, b"b" * 60, False, 0.0) == Reset(0)
    assert two.source is not None and two.source.budget.used == 0  # both or neither reserved


# -- turns ----------------------------------------------------------------------------------------


def test_turns_go_round_robin_over_sources_then_their_connections() -> None:
    rotation: Rotation[str] = Rotation()
    for conn in ("a1", "a2", "a3"):
        rotation.ready("A", conn)
    rotation.ready("B", "b1")
    rotation.ready("A", "a1")  # known already: keeps its place
    order = []
    for _ in range(6):
        picked = rotation.next()
        assert picked is not None
        order.append(picked[1])
    assert order == ["a1", "b1", "a2", "b1", "a3", "b1"]  # B's one connection gets half
    rotation.idle("B", "b1")
    rotation.idle("A", "a2")
    assert [rotation.next() for _ in range(3)] == [("A", "a1"), ("A", "a3"), ("A", "a1")]
    rotation.idle("A", "a1")
    rotation.idle("A", "a3")
    assert not rotation and rotation.next() is None


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
    decided: dict[int, Queued | Limited | Refuse | Reset] = {}
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

    dispatched = {}
    while (turn := s.next(0.0)) is not None:
        dispatched[turn.stream_id] = turn.request
    partial = discarding = 0
    for index, (events, end) in enumerate(plan):
        sid, payload = index * 4, b"".join(data for data, _ in events)
        what, stop = outcome(events, end, max_request)
        if what == "served":
            assert decided[sid] == Queued(sid) and dispatched[sid] == payload
        elif what == "refused":
            assert decided[sid] == Refuse(sid, stop=stop)
        else:
            assert sid not in decided
            partial += what == "open" and payload != b""
        discarding += stop and end == "open"  # refused mid-stream, and never finished or reset
    assert s.counts() == Counts(partial, 0, len(dispatched), discarding)
    assert budget.used == sum(
        len(b"".join(d for d, _ in events))
        for events, end in plan
        if outcome(events, end, max_request)[0] == "open"
    )
    s.close()
    assert budget.used == 0 and s.counts() == IDLE
