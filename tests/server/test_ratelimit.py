"""The per-IP token bucket, driven by a fake monotonic clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.server.ratelimit import RateLimiter


def test_burst_then_refusal_then_refill() -> None:
    limiter = RateLimiter(rate=10, burst=5)
    assert [limiter.allow("1.2.3.4", 100.0) for _ in range(6)] == [True] * 5 + [False]
    assert not limiter.allow("1.2.3.4", 100.05)  # half a token refilled: still refused
    assert limiter.allow("1.2.3.4", 100.1)  # one token back
    assert not limiter.allow("1.2.3.4", 100.1)
    # a long pause refills only up to the burst
    assert [limiter.allow("1.2.3.4", 200.0) for _ in range(6)] == [True] * 5 + [False]


def test_clients_are_limited_independently() -> None:
    limiter = RateLimiter(rate=1, burst=2)
    assert limiter.allow("a", 0.0)
    assert limiter.allow("a", 0.0)
    assert not limiter.allow("a", 0.0)
    assert limiter.allow("b", 0.0)
    assert limiter.allow("2001:db8::1", 0.0)


def test_steady_rate_is_sustained() -> None:
    limiter = RateLimiter(rate=50, burst=100)
    allowed = sum(limiter.allow("x", i / 100) for i in range(1000))  # 100 req/s, t = 0 .. 9.99
    assert allowed == 100 + 499  # the burst, then 50 per second for 9.99 s


def test_zero_rate_disables() -> None:
    limiter = RateLimiter(rate=0, burst=0)
    assert not limiter.enabled
    assert all(limiter.allow("x", 0.0) for _ in range(10_000))
    assert len(limiter) == 0


def test_idle_clients_are_evicted_without_changing_decisions() -> None:
    limiter = RateLimiter(rate=10, burst=5)  # a bucket is full again after 0.5 s
    for i in range(1000):
        limiter.allow(f"10.0.{i // 256}.{i % 256}", i * 0.01)
    assert len(limiter) <= 51  # only clients seen in the last 0.5 s remain
    limiter.allow("late", 1000.0)
    assert len(limiter) == 1


def test_table_is_capped_under_a_flood_of_addresses() -> None:
    limiter = RateLimiter(rate=1, burst=1, max_clients=100)
    for i in range(10_000):
        assert limiter.allow(f"flood-{i}", 5.0)  # every new client gets its burst
        assert len(limiter) <= 100
    assert limiter.allow("flood-9999", 5.0) is False  # recent clients are still tracked


@pytest.mark.parametrize(("rate", "burst"), [(-1, 10), (float("nan"), 10), (5, 0)])
def test_bad_parameters(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        RateLimiter(rate, burst)


@settings(max_examples=100, deadline=None)
@given(
    rate=st.integers(1, 100),
    burst=st.integers(1, 50),
    steps=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 300)), max_size=200),
)
def test_never_exceeds_burst_plus_rate(rate: int, burst: int, steps: list[tuple[str, int]]) -> None:
    """Over any window each client gets at most ``burst + rate * elapsed`` requests."""
    limiter = RateLimiter(rate=rate, burst=burst, max_clients=3)
    now = 0.0
    allowed: dict[str, int] = {}
    for ip, gap_ms in steps:
        now += gap_ms / 1000
        if limiter.allow(ip, now):
            allowed[ip] = allowed.get(ip, 0) + 1
    for count in allowed.values():
        assert count <= burst + rate * now + 1e-9
