"""Index work a burst of writes holds back, caught up in slices once the writes pause.

Keeping the LOOKUP indexes current costs a few milliseconds per document (the body index parses
and tokenizes it), more than the rest of a write. A lone write pays it before its answer, as
always. During a burst (a write comes back while others are still in flight, as an import's
pipelined PUBLISHes do) that work is held here instead, so each write is answered once it is
durable: the burst's index work is done once no write has come back for `PAUSE`, in slices of
about `SLICE` seconds so other requests keep being served meanwhile, or at once for a reader
that needs the indexes (`caught_up`, which LOOKUP awaits first). At most `MAX_BYTES` of bodies
wait; past that, writes index as they come. Event-loop only, as the indexes are.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from markproto.server.storage.store import Version

PAUSE = 0.25
"""Seconds without a write coming back after which held work starts."""
SLICE = 0.02
"""Seconds of index work between turns of the event loop while catching up."""
MAX_BYTES = 32 << 20
"""Bodies that may wait."""


class Backlog:
    """Held index work by path (the newest version of each), and its catch-up."""

    def __init__(self, index: Callable[[Version], None], busy: Callable[[], bool]) -> None:
        self._index = index
        self._busy = busy
        """True while writes are in flight."""
        self._held: dict[str, Version] = {}
        self._bytes = 0
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._done: asyncio.Event | None = None

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, version: Version) -> bool:
        """Hold this version's index work; False when it must be done now (the backlog is full
        and does not hold the path already)."""
        old = self._held.pop(version.path, None)
        if old is not None:
            self._bytes -= len(old.body)
        elif self._bytes >= MAX_BYTES:
            return False
        self._held[version.path] = version
        self._bytes += len(version.body)
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        if self._timer is None:
            self._timer = loop.call_later(PAUSE, self._step)
        return True

    def drop(self, path: str) -> None:
        """Forget held work for ``path``: the caller indexes a newer state of it itself."""
        old = self._held.pop(path, None)
        if old is not None:
            self._bytes -= len(old.body)

    async def caught_up(self) -> None:
        """Return once nothing is held, catching up from now on (not after a pause)."""
        if not self._held:
            return
        if self._done is None:
            self._done = asyncio.Event()
        done = self._done
        self._start(0.0)
        await done.wait()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay, self._step)

    def _step(self) -> None:
        """One slice of catching up, once writes have paused (or a reader waits)."""
        self._timer = None
        loop = asyncio.get_running_loop()
        quiet = loop.time() - self._last
        if self._done is None and (self._busy() or quiet < PAUSE):
            self._timer = loop.call_later(max(PAUSE - quiet, 0.01), self._step)
            return
        deadline = time.monotonic() + SLICE
        while self._held and time.monotonic() < deadline:
            path = next(iter(self._held))
            version = self._held.pop(path)
            self._bytes -= len(version.body)
            self._index(version)
        if self._held:
            self._timer = loop.call_later(0, self._step)
        elif self._done is not None:
            self._done.set()
            self._done = None
