"""Index work a burst of writes holds back, caught up on a thread of its own once writes pause.

Keeping the LOOKUP indexes current costs milliseconds per document (the body index parses and
tokenizes it; a 700 KB body takes most of a second), more than the rest of a write. A lone write
pays it before its answer, as always. During a burst (a write comes back while others are still
in flight, as an import's pipelined PUBLISHes do) the work is held here instead, so each write
is answered once it is durable. It is done once no write has come back for `PAUSE`, at once for
a reader that needs the indexes (`caught_up`, which every LOOKUP awaits first), or without
waiting for a pause once `MAX_BYTES` of bodies are held. It gives way to writes again: when
writes are in flight once more, catching up stops after the document under way until the next
pause (unless a reader waits or `MAX_BYTES` are held), so an import that pauses for a moment is
not slowed by the work it held back.

Catching up runs the index changes one at a time on the backlog's own thread, so the event loop
keeps serving FETCH, LIST and the rest between them (the interpreter hands it the lock every few
milliseconds, however long one body takes). That is safe because while anything is held or
being applied, every index change goes through here (``Content`` asks `__bool__`), in order,
and no reader touches the indexes before `caught_up`: the thread is their only user meanwhile.

A held change keeps no body: a version's is read again from its file (version files never change)
when the change is applied, so a burst of writes holds a few hundred bytes a document, not its
bodies.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable

from markproto.server import memory
from markproto.server.storage.snapshot import CurrentVersion

log = logging.getLogger("markproto.server.storage.backlog")

PAUSE = 0.25
"""Seconds without a write coming back after which held work starts."""
MAX_BYTES = 32 << 20
"""Bodies behind the held changes before catching up starts without waiting for a pause (what a
LOOKUP may have to wait for)."""

TRIM_BYTES = 256 << 10
"""A body this large leaves megabytes of freed analysis behind: the heaps are trimmed after its
index change, not only once the writes pause (the x5 publish peaks lower by it)."""

Change = CurrentVersion | str
"""An index change: a version to put (or remove, when archived), or the path of one gone."""


class Backlog:
    """Held index changes by path (the newest of each), and their catching up."""

    def __init__(self, apply: Callable[[Change], None], busy: Callable[[], bool]) -> None:
        self._apply = apply
        """Make one change to every index (run on the backlog's thread)."""
        self._busy = busy
        """True while writes are in flight."""
        self._held: dict[str, tuple[Change, int]] = {}
        """Path -> its change and the size of its body."""
        self._bytes = 0
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mark-index")

    def __bool__(self) -> bool:
        """True while changes are held or being applied: every index change must come here."""
        return bool(self._held) or self._task is not None

    def hold(self, change: Change, size: int = 0) -> None:
        """Hold an index change (its body ``size`` bytes), replacing any held for the same path
        (it is older)."""
        path = change if isinstance(change, str) else change.path
        self._bytes += size - self._held.pop(path, (path, 0))[1]
        self._held[path] = change, size
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        if self._bytes >= MAX_BYTES:
            self._start()
        elif self._timer is None and self._task is None:
            self._timer = loop.call_later(PAUSE, self._pause)

    async def caught_up(self) -> None:
        """Return once nothing is held or being applied, catching up from now on."""
        if not self:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._start()
        await waiter

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()
        self._thread.shutdown(wait=True, cancel_futures=True)

    def _pause(self) -> None:
        """Start catching up once writes have paused; else look again when they may have."""
        self._timer = None
        loop = asyncio.get_running_loop()
        quiet = loop.time() - self._last
        if self._busy() or quiet < PAUSE:
            self._timer = loop.call_later(max(PAUSE - quiet, 0.01), self._pause)
        else:
            self._start()

    def _start(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._catch_up())

    async def _catch_up(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._held:
                if self._busy() and not self._waiters and self._bytes < MAX_BYTES:
                    # writes are back: they go first, and the rest waits for the next pause
                    self._timer = loop.call_later(PAUSE, self._pause)
                    break
                change, size = self._held.pop(next(iter(self._held)))
                self._bytes -= size
                await loop.run_in_executor(self._thread, self._apply, change)
                if size >= TRIM_BYTES:
                    await loop.run_in_executor(self._thread, memory.trim)
        except Exception:
            log.exception("index catch-up failed; LOOKUP may miss documents until a restart")
            self._held.clear()
            self._bytes = 0
        finally:
            self._task = None
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
