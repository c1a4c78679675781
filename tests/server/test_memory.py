"""The server's memory hand-back (``memory.trim``, ``tune`` and the allocator's environment):
what it frees before the heaps are trimmed, and what glibc keeps otherwise."""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import weakref

import pytest

from markproto.server import memory


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None
        self.payload = bytes(1 << 20)


def test_trim_frees_what_only_reference_cycles_hold() -> None:
    """A settled server's collector rarely runs its full pass, so cycles made during a burst of
    writes would stay resident: the trim after the burst collects them first (and the trims
    between its writes do not: the pass holds the interpreter's lock for tens of ms)."""
    gc.collect()
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second
    was = gc.isenabled()
    gc.disable()  # no automatic pass may free them meanwhile
    try:
        memory.trim()
        assert gone() is not None
        memory.trim(cycles=True)
        assert gone() is None
    finally:
        if was:
            gc.enable()


_GLIBC = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only"
)


_HEAPS = """
import ctypes, os, sys, tempfile, threading
from markproto.server import memory
memory.tune()
kept = []
together = threading.Barrier(4)  # alive at once: a thread that ends hands its heap on
def work():
    together.wait()
    kept.append([bytearray(100_000) for _ in range(20)])  # glibc, below the mmap threshold
    together.wait()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
fd, name = tempfile.mkstemp()
out = libc.fopen(name.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(out))
libc.fclose(ctypes.c_void_p(out))
print(open(name).read().count("<heap nr="))
os.unlink(name)
"""


@_GLIBC
@pytest.mark.parametrize(("env", "heaps"), [({}, memory.ARENAS), ({"MALLOC_ARENA_MAX": "3"}, 3)])
def test_tune_holds_threads_to_its_heaps_unless_the_environment_says(
    env: dict[str, str], heaps: int
) -> None:
    """Every thread that allocates could otherwise get a heap of its own, whose free memory
    no other thread reuses."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
    got = subprocess.run(
        [sys.executable, "-c", _HEAPS], env=environ, capture_output=True, text=True, check=True
    )
    assert int(got.stdout) == heaps


@_GLIBC
@pytest.mark.parametrize(
    ("given", "wanted"),
    [
        ({}, memory.TUNABLES),
        ({"GLIBC_TUNABLES": "glibc.malloc.check=0"}, f"glibc.malloc.check=0:{memory.TUNABLES}"),
    ],
)
def test_environment_adds_the_tunable_to_what_is_set(given: dict[str, str], wanted: str) -> None:
    env = memory.environment({"HOME": "/x", **given})
    assert env == {"HOME": "/x", "GLIBC_TUNABLES": wanted}


@_GLIBC
def test_environment_keeps_an_operators_thread_cache_setting() -> None:
    """Set already (tcache_count=7 is glibc's default): nothing to add, so no restart."""
    assert memory.environment({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=7"}) is None
    assert memory.environment({"GLIBC_TUNABLES": memory.TUNABLES}) is None


_REUSE = """
import ctypes, threading
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
kept = [libc.malloc(600) for _ in range(4)]
freed, done, end = [], threading.Event(), threading.Event()
def work():  # a worker that lives on, as the server's writer and index threads do
    block = libc.malloc(600)
    kept.append(libc.malloc(600))  # the freed block borders no free space it could merge with
    libc.free(block)
    freed.append(block)
    done.set()
    end.wait()
thread = threading.Thread(target=work)
thread.start()
done.wait()
print(libc.malloc(600) == freed[0])
end.set()
thread.join()
"""


@_GLIBC
@pytest.mark.parametrize(("tuned", "reused"), [(False, False), (True, True)])
def test_with_the_tunable_a_block_one_thread_frees_serves_another(
    tuned: bool, reused: bool
) -> None:
    """What ``TUNABLES`` is for: with glibc's thread caches, the block a worker thread freed
    stays in its cache while the thread lives (no other thread gets it, no trim returns it)."""
    base = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    base["MALLOC_ARENA_MAX"] = "1"  # one heap, as ``tune`` gives the server
    env = memory.environment(base) if tuned else base
    assert env is not None
    got = subprocess.run(
        [sys.executable, "-c", _REUSE], env=env, capture_output=True, text=True, check=True
    )
    assert got.stdout.strip() == str(reused)
