"""The server's memory: one budget that every cache's bound derives from, and freed memory handed
back to the system.

A board runs the server beside other services, so its memory is sized once (``memory_budget``,
by default the service's cgroup limit, else 384 MiB) and every cache takes a fixed share of it
(``Shares``); what is left holds the interpreter, the snapshot and the indexes, which grow with
the content (about 1.5x its body bytes), and the transient work of a request or an analysis.

glibc keeps freed memory in its heaps for reuse, and Python's own allocator frees only arenas
that empty entirely, so after a burst (the startup build, a run of PUBLISHes) the resident size
stays at its peak unless the heaps are trimmed: ``trim`` asks glibc to return what it can
(``malloc_trim``), off the event loop, once the burst is over; and glibc's per-thread caches of
freed blocks, which no trim returns, are off (``TUNABLES``).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_BUDGET",
    "TUNABLES",
    "Shares",
    "budget",
    "cgroup_limit",
    "environment",
    "exec_tuned",
    "trim",
    "tune",
]

log = logging.getLogger("markproto.server.memory")

DEFAULT_BUDGET = 384 << 20
"""The budget without a setting or a cgroup limit: what the systemd unit's MemoryMax gives."""
ARENAS = 1
"""glibc heaps (``MALLOC_ARENA_MAX``) when the environment does not say: each thread that
allocates (the event loop, the writer, the build) can otherwise get its own (up to eight a core),
and a heap's free memory serves only its own threads. One: the interpreter's lock already keeps
the threads from allocating at once, and against two heaps the FastAPI x1 publish settled
0.2-0.3 of its body bytes lower, with the same publish time and the same FETCH p99 while a 1 MB
document was published (docs/PERFORMANCE.md, "Board budget", 3 Dec)."""
MMAP_THRESHOLD = 256 << 10
"""Blocks this large or larger get pages of their own (``MALLOC_MMAP_THRESHOLD_``), handed back
to the system as soon as they are freed. glibc's default starts at 128 KiB but rises to the size
of every such block freed (up to 32 MiB), so after the first large request body the next ones,
the response buffers and a merge's arrays come from the heap, and stay resident after they are
freed until a trim: fixed at 256 KiB, the x5 publish peaks 1.7 MiB lower (docs/PERFORMANCE.md,
"Board budget")."""
TUNABLES = "glibc.malloc.tcache_count=0"
"""glibc's per-thread caches of freed blocks off (``GLIBC_TUNABLES``, read only as a process
starts: ``exec_tuned``). Each thread keeps up to seven freed blocks of every size up to 1 KiB in
a cache of its own, which no other thread reuses and ``malloc_trim`` cannot return, and the heap
around them cannot be trimmed either: after the FastAPI x1 publish the writer's and the index's
threads held 0.25 of its body bytes so, and the settled growth was 1.84x against 1.53x without
the caches. What they save is time on blocks over 512 bytes only (Python's allocator serves the
smaller ones): a FastAPI x5 start-up build took the same CPU within its spread
(docs/PERFORMANCE.md, "Board budget", 5 Dec)."""
_TCACHE = TUNABLES.partition("=")[0] + "="
_M_ARENA_MAX = -8
_M_MMAP_THRESHOLD = -3
"""``mallopt``'s parameter numbers for the arena limit and the mmap threshold (malloc.h)."""


@dataclass(frozen=True, slots=True)
class Shares:
    """Each cache's bound, as a share of the budget."""

    version_cache: int
    """Versions read in full (FETCH bodies), bytes: 1/16."""
    response_cache: int
    """Encoded FETCH responses, bytes: 1/48."""
    request_buffers: int
    """Incomplete requests across all connections, bytes: 1/6."""
    rate_clients: int
    """Client addresses the rate limiter tracks (about 100 bytes each): 1/40 of the budget."""
    chain_verdicts: int
    """Hash-chain verdicts kept (about 150 bytes each): 1/1024 of the budget."""

    @classmethod
    def of(cls, budget: int) -> Shares:
        return cls(
            version_cache=budget // 16,
            response_cache=budget // 48,
            request_buffers=budget // 6,
            rate_clients=max(budget // 40 // 100, 1024),
            chain_verdicts=max(budget // 1024 // 150, 256),
        )


def budget(configured: int | None) -> int:
    """The memory budget: the setting, else the cgroup's limit, else ``DEFAULT_BUDGET``."""
    if configured is not None:
        return configured
    return cgroup_limit() or DEFAULT_BUDGET


def cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max``), if it has one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        group = next(line[3:] for line in lines if line.startswith("0::"))
        value = (Path("/sys/fs/cgroup") / group.lstrip("/") / "memory.max").read_text().strip()
    except (OSError, StopIteration):
        return None
    return int(value) if value.isdigit() else None


def environment(env: Mapping[str, str]) -> dict[str, str] | None:
    """``env`` with ``TUNABLES`` added to ``GLIBC_TUNABLES``: the environment a server process
    starts in. None when there is nothing to add: not glibc, or ``GLIBC_TUNABLES`` already sets
    the thread caches (an operator's choice, kept)."""
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return None
    except (ValueError, OSError):
        return None
    tunables = env.get("GLIBC_TUNABLES", "")
    if _TCACHE in tunables:
        return None
    return {**env, "GLIBC_TUNABLES": f"{tunables}:{TUNABLES}" if tunables else TUNABLES}


def exec_tuned() -> None:
    """Start this program again in ``environment``'s environment when it is not in it yet: the
    same process (pid, arguments, open files), as glibc reads its tunables only at a start.
    First thing in ``mark-server serve``, before any thread or work (once, about 65 ms here:
    the interpreter and the command's imports again); the systemd unit sets them itself."""
    env = environment(os.environ)
    if env is None or not sys.executable:
        return
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as exc:  # the server runs as it is, with the caches
        log.warning("could not restart with glibc's thread caches off: %s", exc)


@cache
def _libc() -> Any:
    """glibc, or None (another C library has neither call)."""
    import ctypes  # here, not at import: only a running server trims

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def trim(*, cycles: bool = False) -> None:
    """Hand the heaps' free memory back to the system (glibc; a no-op elsewhere). Blocks for a
    few milliseconds on a large heap: call it off the event loop (ctypes drops the GIL).

    ``cycles``: first free what only reference cycles hold. The collector's full pass, the only
    one that frees cycles of long-lived objects, runs once a quarter more objects than it last
    left have survived, which a settled server rarely reaches, so cycles made during a burst
    (closed QUIC connections and their streams, parser tokens: 0.4 MiB after the FastAPI x1
    publish) would stay resident. The pass holds the interpreter's lock for about 35 ms (the
    40,000 objects of an empty server's modules), so it is for the quiet after a burst, not
    between its writes."""
    if cycles:
        gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def tune() -> None:
    """Limit glibc to ``ARENAS`` heaps and fix its mmap threshold at ``MMAP_THRESHOLD``, each
    unless the environment sets it (call it before the server starts its threads)."""
    libc = _libc()
    if libc is None:
        return
    if "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(_M_ARENA_MAX, ARENAS)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
