"""One WATCH stream read block by block, over the real client's pool, for tests that check the
exact blocks a server sends (the library's `Client.watch` hides them behind its notices)."""

from __future__ import annotations

import asyncio
from collections import deque

from markproto.client import Pool
from markproto.client.connection import Streamed
from markproto.protocol import wire
from markproto.protocol.watch import Block, WatchReader


class RawWatch:
    """A WATCH request's answer as it arrives: `next` returns its blocks, and at the end the
    refusal the stream carried (or None)."""

    def __init__(self) -> None:
        self.reader = WatchReader()
        self.blocks: deque[Block] = deque()
        self.arrived = asyncio.Event()
        self.handle: Streamed | None = None

    @classmethod
    async def open(
        cls, pool: Pool, authority: str, path: str, meta: dict[str, str] | None = None
    ) -> RawWatch:
        raw = cls()
        data = wire.emit_request(wire.Request("WATCH", path, meta or {}, b""))
        raw.handle = await pool.stream(authority, data, raw._take)
        raw.handle.ended.add_done_callback(lambda _: raw.arrived.set())
        return raw

    def _take(self, data: bytes) -> None:
        self.blocks.extend(self.reader.feed(data))
        self.arrived.set()

    async def next(self, timeout: float = 5.0) -> Block | wire.Response | None:
        assert self.handle is not None
        async with asyncio.timeout(timeout):
            while not self.blocks:
                if self.handle.ended.done():
                    self.handle.ended.result()
                    return self.reader.end()
                self.arrived.clear()
                await self.arrived.wait()
        return self.blocks.popleft()

    async def ended(self, timeout: float = 5.0) -> bool:
        """Whether the server ended the stream (after every block was taken)."""
        assert self.handle is not None
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self.handle.ended)
        except TimeoutError:
            return False
        return not self.blocks

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
