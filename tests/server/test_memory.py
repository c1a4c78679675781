"""The server's memory hand-back (``memory.trim``): what it frees before the heaps are trimmed."""

from __future__ import annotations

import gc
import weakref

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
