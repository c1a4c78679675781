"""The served content's writes: concurrent writes commit as groups (one filesystem sync for all
of them), and the index work of a burst waits for the burst to end while every reader, LOOKUP
included, sees every write that was answered."""

from __future__ import annotations

import asyncio
import hashlib
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.exchange import ask

from markproto import durable
from markproto.protocol import bodies
from markproto.server.dispatch import Dispatcher
from markproto.server.handlers import Context
from markproto.server.search.service import Lookup
from markproto.server.storage import backlog
from markproto.server.storage.content import INLINE_INDEX_MAX, Content
from markproto.server.storage.store import Store, Version, Written

BURST = 24


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Content, Lookup]]:
    lookup = Lookup()
    content = Content.open(tmp_path, [lookup])
    yield content, lookup
    content.close()


async def burst(content: Content) -> list[object]:
    return await asyncio.gather(
        *(content.publish(f"/b/{n}.md", f"# Papaya {n}\n".encode(), {}, 0) for n in range(BURST))
    )


async def test_concurrent_writes_share_their_syncs(
    served: tuple[Content, Lookup], monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[str] = []
    real = durable.sync_filesystem
    monkeypatch.setattr(
        durable, "sync_filesystem", lambda f, **k: (syncs.append(f), real(f, **k))[1]
    )
    content, _ = served
    outcomes = await burst(content)
    assert all(isinstance(o, Written) and o.created for o in outcomes)
    assert 0 < len(syncs) < BURST  # two per group, and the first write may go alone
    assert all(content.current(f"/b/{n}.md") is not None for n in range(BURST))


async def test_lookup_sees_every_write_of_a_burst(served: tuple[Content, Lookup]) -> None:
    content, lookup = served
    await burst(content)
    found = await ask(Dispatcher(Context(content, lookup)), "LOOKUP", "/", query="papaya")
    assert found.meta["matches"] == "10"
    everything = await ask(
        Dispatcher(Context(content, lookup)), "LOOKUP", "/", query="papaya", limit="100"
    )
    assert len(bodies.parse_lookup(everything.body)) == BURST


async def test_a_burst_is_indexed_once_writes_pause(
    served: tuple[Content, Lookup], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog, "PAUSE", 0.05)
    content, lookup = served
    await burst(content)
    assert len(lookup.catalog) < BURST  # held back: the burst's answers came first
    for _ in range(50):
        if len(lookup.catalog) == BURST:
            break
        await asyncio.sleep(0.02)
    assert len(lookup.catalog) == BURST


async def test_catching_up_gives_way_to_writes_and_a_lookup_still_sees_all(
    served: tuple[Content, Lookup], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held index work runs in pauses: once writes are in flight again it stops between
    documents (an import is not slowed by the work it held back), yet a LOOKUP then waits for
    all of it."""
    monkeypatch.setattr(backlog, "PAUSE", 0.05)
    content, lookup = served
    await burst(content)
    applied: list[str] = []
    real = lookup.stage
    writes: list[asyncio.Task[object]] = []

    during: list[str] = []

    def slow(version: Version) -> Callable[[], None]:
        applied.append(version.path)
        if any(not write.done() for write in writes):
            during.append(version.path)
        if len(applied) == 2:  # a second burst starts while the first is being caught up
            loop.call_soon_threadsafe(
                lambda: writes.extend(
                    asyncio.ensure_future(content.publish(f"/c/{n}.md", b"# Papaya\n", {}, 0))
                    for n in range(BURST)
                )
            )
        return real(version)

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(lookup, "stage", slow)
    for _ in range(100):
        if writes:
            break
        await asyncio.sleep(0.01)
    await asyncio.gather(*writes)
    assert len(during) <= 1  # stopped for the writes (at most the one under way went on)
    found = await ask(
        Dispatcher(Context(content, lookup)), "LOOKUP", "/", query="papaya", limit="100"
    )
    assert len(bodies.parse_lookup(found.body)) == 2 * BURST


async def test_a_lone_write_is_indexed_before_its_answer(served: tuple[Content, Lookup]) -> None:
    content, lookup = served
    await content.publish("/alone.md", b"# Alone\n", {}, 0)
    assert lookup.catalog.get("/alone.md") is not None


async def test_a_large_lone_write_is_indexed_off_the_loop_and_lookup_still_sees_it(
    served: tuple[Content, Lookup],
) -> None:
    content, lookup = served
    big = b"# Big\n\n" + b"kumquat orchard rows\n" * (INLINE_INDEX_MAX // 20)
    assert len(big) > INLINE_INDEX_MAX
    await content.publish("/big.md", big, {}, 0)
    assert lookup.catalog.get("/big.md") is None  # held for the backlog's thread
    found = await ask(
        Dispatcher(Context(content, lookup)), "LOOKUP", "/", query="kumquat", match="body"
    )
    assert [row.path for row in bodies.parse_lookup(found.body)] == ["/big.md"]


class _Measured:
    """An index that records what it is given, the body as its digest (it must not keep the body
    alive), and the traced bytes when it is staged and when it is settled."""

    def __init__(self) -> None:
        self.kept: list[tuple[bytes, dict[str, str], str, str]] = []
        self.traced: list[int] = []
        self.settled = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def stage(self, doc: Version) -> Callable[[], None]:
        assert doc.body
        self.kept.append((hashlib.sha256(doc.body).digest(), doc.meta, doc.etag, doc.content_hash))
        self.traced.append(tracemalloc.get_traced_memory()[0])

        def settle() -> None:
            self.traced.append(tracemalloc.get_traced_memory()[0])
            self.loop.call_soon_threadsafe(self.settled.set)

        return settle

    def remove(self, path: str) -> None:
        pass


async def test_a_large_body_is_freed_before_the_indexes_take_its_analysis(
    tmp_path: Path,
) -> None:
    """The backlog reads a large body again for its analysis alone: once staged, nothing
    holds it while the indexes are changed (their merges and link keys peak then)."""
    index = _Measured()
    content = Content.open(tmp_path, [index])
    big = b"# Big\n\n" + b"kumquat orchard rows\n" * 40_000
    tracemalloc.start()
    try:
        await content.publish("/big.md", big, {}, 0)
        await asyncio.wait_for(index.settled.wait(), 30)
    finally:
        tracemalloc.stop()
        content.close()
    staged, settled = index.traced
    assert settled < staged - len(big) * 0.9


async def test_a_body_read_again_for_the_indexes_shares_the_snapshots_strings(
    tmp_path: Path,
) -> None:
    """A held write reaches the indexes read again from its file: they keep its metadata and
    content hash as the snapshot's own objects, not a second copy a document."""
    index = _Measured()
    content = Content.open(tmp_path, [index])
    big = b"# Big\n\n" + b"kumquat orchard rows\n" * (INLINE_INDEX_MAX // 20)
    meta = {"title": "A title too long to be one string across documents"}
    try:
        await content.publish("/big.md", big, meta, 0)
        await asyncio.wait_for(index.settled.wait(), 30)
    finally:
        content.close()
    [(body, kept_meta, etag, content_hash)] = index.kept
    current = content.current("/big.md")
    assert current is not None and body == hashlib.sha256(big).digest()
    assert kept_meta == meta and kept_meta is current.meta
    assert content_hash is current.content_hash and etag == current.etag


async def test_links_see_every_write_of_a_burst(served: tuple[Content, Lookup]) -> None:
    content, lookup = served
    await content.publish("/hub.md", b"# Hub\n", {}, 0)
    await asyncio.gather(
        *(
            content.publish(f"/b/{n}.md", b"See [the hub](../hub.md).\n", {}, 0)
            for n in range(BURST)
        )
    )
    found = await ask(
        Dispatcher(Context(content, lookup)),
        "LOOKUP",
        "/hub.md",
        match="links",
        direction="incoming",
        limit="100",
    )
    rows = bodies.parse_links(found.body)[0]
    assert sorted(row.source for row in rows) == sorted(f"/b/{n}.md" for n in range(BURST))


async def test_changes_found_by_a_scan_meanwhile_reach_the_indexes_in_order(
    served: tuple[Content, Lookup], tmp_path: Path
) -> None:
    content, lookup = served
    await burst(content)
    (tmp_path / "b/0.md").unlink()  # gone behind the server's back, while its index work waits
    changes = await content.rescan()
    assert changes.removed == ("/b/0.md",)
    found = await ask(
        Dispatcher(Context(content, lookup)), "LOOKUP", "/", query="papaya", limit="100"
    )
    paths = {row.path for row in bodies.parse_lookup(found.body)}
    assert paths == {f"/b/{n}.md" for n in range(1, BURST)}


async def test_a_large_body_found_by_a_scan_is_indexed_off_the_loop_and_lookup_sees_it(
    served: tuple[Content, Lookup], tmp_path: Path
) -> None:
    """A document written behind the server's back (a sync tool, `mark-server import`) is
    analysed on the backlog's thread when it is large, like one the server wrote."""
    content, lookup = served
    other = Store(tmp_path)
    big = b"# Big\n\n" + b"quince orchard rows\n" * (INLINE_INDEX_MAX // 20)
    assert isinstance(other.publish("/synced.md", big, {}, 0), Written)
    changes = await content.rescan()
    assert changes.updated == ("/synced.md",)
    assert lookup.catalog.get("/synced.md") is None  # held for the backlog's thread
    found = await ask(
        Dispatcher(Context(content, lookup)), "LOOKUP", "/", query="quince", match="body"
    )
    assert [row.path for row in bodies.parse_lookup(found.body)] == ["/synced.md"]
