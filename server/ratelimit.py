"""Per-client-IP token buckets: the server's only defence against one client starving the rest.

Time is passed in (monotonic seconds), so the limiter is deterministic under test. A bucket left
alone for ``burst / rate`` seconds has refilled completely and is indistinguishable from a new
one, so idle buckets are dropped without changing any decision; that keeps the table as small as
the set of recently active clients. A hard cap bounds it even under a flood of distinct
addresses: past the cap the least recently seen client is forgotten (it gets a full bucket back,
which costs less than letting new clients be refused).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_MAX_CLIENTS = 100_000
_EPSILON = 1e-9
"""Float slack, so a client pacing itself exactly at the rate is not refused by rounding."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """Token bucket per IP: ``rate`` requests per second on average, bursts up to ``burst``.

    ``rate == 0`` disables limiting. Each call is amortized O(1): buckets are kept in
    least-recently-seen order, so eviction only ever looks at the front.
    """

    def __init__(self, rate: float, burst: int, *, max_clients: int = DEFAULT_MAX_CLIENTS) -> None:
        if rate < 0 or rate != rate:
            raise ValueError(f"rate must be >= 0, not {rate!r}")
        if rate > 0 and burst < 1:
            raise ValueError(f"burst must be >= 1, not {burst!r}")
        if max_clients < 1:
            raise ValueError(f"max_clients must be >= 1, not {max_clients!r}")
        self.rate = rate
        self.burst = burst
        self.max_clients = max_clients
        self._idle = burst / rate if rate > 0 else 0.0
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, ip: str, now: float) -> bool:
        """Spend one token of ``ip``'s bucket at monotonic time ``now``; False if it is empty."""
        if self.rate <= 0:
            return True
        buckets = self._buckets
        while buckets:
            oldest = next(iter(buckets.values()))
            if now - oldest.stamp < self._idle:
                break
            buckets.popitem(last=False)
        bucket = buckets.get(ip)
        if bucket is None:
            if len(buckets) >= self.max_clients:
                buckets.popitem(last=False)
            bucket = buckets[ip] = _Bucket(float(self.burst), now)
        else:
            elapsed = max(0.0, now - bucket.stamp)
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate)
            bucket.stamp = max(bucket.stamp, now)
            buckets.move_to_end(ip)
        if bucket.tokens < 1.0 - _EPSILON:
            return False
        bucket.tokens -= 1.0
        return True
