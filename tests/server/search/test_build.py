"""The startup build of the LOOKUP indexes (in the background, in worker processes or not,
restored from what was saved at stop) gives the indexes inline puts give; writes made while it
runs end up indexed once; a LOOKUP meanwhile waits rather than reading part of the index."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.exchange import seed
from support.vaults import small_notes

from markproto import durable
from markproto.protocol import wire
from markproto.protocol.bodies import LookupRow
from markproto.server import memory
from markproto.server.search import analysis, build, postings, saved
from markproto.server.search.build import Build
from markproto.server.search.service import Lookup, parse_query
from markproto.server.storage.content import Content
from markproto.server.storage.store import Version

DOCS = [
    (
        f"/d{i}/note.md",
        f"# Note {i}\n\nalpha {i} beta\n\n## Part\n\ngamma {'x' * (i % 7)} end, "
        f"[next](/d{(i + 1) % 40}/note.md#part) [[note]]\n",
        {"importance": f"0.{i % 10}"},
    )
    for i in range(40)
]
QUERIES = ("alpha", "gamma end", "note part", "omega", "fresh")


def rows(lookup: Lookup, content: Content, query: str, body: bool) -> list[LookupRow]:
    meta = {"query": query, "match": "body" if body else "catalog", "limit": "1000"}

    def load(path: str) -> Version | None:
        current = content.current(path)
        return content.read(current) if current is not None else None

    return lookup.answer(parse_query(meta), "/", lambda _: True, load)


def every_answer(lookup: Lookup, content: Content) -> list[object]:
    """Every query's rows, and every document's links both ways (the link index is built in
    the same pass)."""
    answers: list[object] = [rows(lookup, content, q, b) for q in QUERIES for b in (False, True)]
    for doc in sorted(doc.path for doc in content.current_versions()):
        answers.append((doc, lookup.links.outbound(doc), lookup.links.inbound(doc)))
    return answers


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    seed(folder, DOCS)
    return folder


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of a few documents, and worker processes from the first batch on."""
    monkeypatch.setattr(build, "BATCH_BYTES", 400)
    monkeypatch.setattr(build, "WORKER_BYTES", 1)


def inline(root: Path) -> tuple[Lookup, Content]:
    lookup = Lookup()
    return lookup, Content.open(root, [lookup])


async def built(root: Path, workers: int = 0, file: Path | None = None) -> tuple[Lookup, Content]:
    lookup = Lookup()
    lookup.begin_build()
    content = Content.open(root)
    content.attach(lookup)
    await Build(lookup, content, saved=file, workers=workers).run()
    assert lookup.ready
    return lookup, content


def merges_recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that gets "merge" at every merge of the posting lists (they still merge)."""
    events: list[str] = []
    freeze = postings.PostingLists.freeze

    def recorded(self: postings.PostingLists, top: int) -> None:
        events.append("merge")
        freeze(self, top)

    monkeypatch.setattr(postings.PostingLists, "freeze", recorded)
    return events


@pytest.mark.usefixtures("small_batches")
@pytest.mark.parametrize("workers", [0, 1, 2])
async def test_the_build_gives_the_index_of_inline_puts(root: Path, workers: int) -> None:
    want_lookup, want_content = inline(root)
    lookup, content = await built(root, workers)
    try:
        assert every_answer(lookup, content) == every_answer(want_lookup, want_content)
        assert lookup.bodies.terms == want_lookup.bodies.terms
        edges = lookup.links.outbound("/d1/note.md")
        assert [(edge.target, edge.anchor, edge.section) for edge in edges][:1] == [
            ("/d2/note.md", "part", "part")
        ]
    finally:
        content.close()
        want_content.close()


@pytest.mark.usefixtures("small_batches")
async def test_large_bodies_are_analysed_first_each_in_a_batch_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its analysis is a build's peak: no other body of the batch is held beside it, and the
    index is still small meanwhile."""
    folder = tmp_path / "large"
    folder.mkdir()
    big = "# Big\n\n" + "papaya grove " * 40 + "\n"
    bigger = big + "mango " * 10 + "\n"
    assert len(big) >= build.BATCH_BYTES // 2
    seed(folder, [*DOCS[:12], ("/d5/big.md", big, {}), *DOCS[12:24], ("/e/b.md", bigger, {})])
    batches: list[list[int]] = []
    analyze_many = analysis.analyze_many

    def recorded(bodies: list[bytes]) -> object:
        batches.append([len(body) for body in bodies])
        return analyze_many(bodies)

    monkeypatch.setattr(analysis, "analyze_many", recorded)
    lookup, content = await built(folder)
    content.close()
    sizes = [len(big.encode()), len(bigger.encode())]
    assert sorted(map(tuple, batches[:2])) == [(n,) for n in sizes]
    assert all(max(b) < build.BATCH_BYTES // 2 for b in batches[2:])
    assert sum(map(len, batches)) == 26
    assert lookup.catalog.get("/d5/big.md") is not None
    assert lookup.catalog.get("/e/b.md") is not None


@pytest.mark.usefixtures("small_batches")
async def test_the_build_trims_the_heap_after_each_merge(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge frees the tail and the old segment at once; trimmed then, the build's peak does
    not keep those pages resident for the next batches."""
    events = merges_recorded(monkeypatch)
    monkeypatch.setattr(postings, "_TAIL_MIN", 0)  # a merge after every batch
    monkeypatch.setattr(memory, "trim", lambda **_: events.append("trim"))
    _, content = await built(root)
    content.close()
    assert events.count("merge") > 3
    # every merge during the batches is followed by a trim (the last, at the end, is the
    # server's to trim once the indexes are swapped in)
    assert events[:-1] == ["merge", "trim"] * (len(events) // 2)


@pytest.mark.usefixtures("small_batches")
async def test_a_body_analysed_alone_merges_between_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its runs go in as a live write's do, a due tail merged before each (a long section
    split across a cut combined in the frozen segment), then the heap trimmed once: the
    index is the one inline puts make."""
    folder = tmp_path / "alone"
    folder.mkdir()
    words = " ".join(f"w{n}" for n in range(60))
    big = "# Big\n\n" + "".join(f"## S{n}\n\n{words} k{n}\n\n" for n in range(4))
    big += "## Long\n\n" + " ".join(f"long{n} papaya" for n in range(80)) + "\n"
    seed(folder, [*DOCS[:6], ("/big.md", big, {})])
    monkeypatch.setattr(analysis, "RUN_TERMS", 16)  # the big body's analysis: many runs
    monkeypatch.setattr(postings, "_TAIL_MIN", 0)
    events = merges_recorded(monkeypatch)
    trim = memory.trim
    monkeypatch.setattr(memory, "trim", lambda **kw: (events.append("trim"), trim(**kw))[1])
    lookup, content = await built(folder)
    first_trim = events.index("trim")
    assert events[:first_trim].count("merge") > 3  # the big body came first, alone
    want_lookup, want_content = inline(folder)
    try:
        assert every_answer(lookup, content) == every_answer(want_lookup, want_content)
        assert lookup.bodies.dump()[1:] == want_lookup.bodies.dump()[1:]
    finally:
        content.close()
        want_content.close()


@pytest.mark.usefixtures("small_batches")
async def test_the_built_indexes_keep_the_snapshots_own_metadata_and_hashes(root: Path) -> None:
    """What a build reads from disk equals what the snapshot holds: the indexes keep the
    snapshot's objects, one copy a document, not a second one read again."""
    lookup, content = await built(root)
    try:
        for current in content.current_versions():
            entry = lookup.catalog.get(current.path)
            assert entry is not None
            assert entry.meta is current.meta and entry.modified is current.modified
            assert lookup.bodies.indexed(current.path) is current.content_hash
    finally:
        content.close()


@pytest.mark.usefixtures("small_batches")
async def test_the_build_merges_postings_with_no_batch_result_held(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's runs of postings are copied into the tail as it is applied; the merge that
    is then due runs once they are dropped (at FastAPI x5 they were 0.8 MiB beside the
    merge's own peak). On the build's thread: worker processes' results wait their turn."""
    held: list[int] = []
    freeze = postings.PostingLists.freeze

    def counting(self: postings.PostingLists, top: int) -> None:
        held.append(sum(isinstance(o, analysis.Postings) for o in gc.get_objects()))
        freeze(self, top)

    monkeypatch.setattr(postings.PostingLists, "freeze", counting)
    monkeypatch.setattr(postings, "_TAIL_MIN", 0)  # a merge after every batch
    _, content = await built(root)
    content.close()
    assert len(held) > 3
    assert set(held) == {0}


@pytest.fixture
def held_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """A build that analyses nothing until the event is set."""
    go = threading.Event()
    analyze_many = analysis.analyze_many

    def waiting(bodies: list[bytes]) -> object:
        go.wait(10)
        return analyze_many(bodies)

    monkeypatch.setattr(analysis, "analyze_many", waiting)
    yield go
    go.set()


async def test_writes_during_the_build_are_indexed_once(
    root: Path, held_build: threading.Event
) -> None:
    lookup = Lookup()
    lookup.begin_build()
    content = Content.open(root)
    content.attach(lookup)
    try:
        running = asyncio.create_task(Build(lookup, content, saved=None, workers=0).run())
        await asyncio.sleep(0.05)
        assert not lookup.ready
        fresh = b"# Fresh\n\nfresh omega\n"
        assert await content.publish("/new.md", fresh, {}, None)  # not indexed before
        assert await content.publish("/d1/note.md", fresh, {}, 1)  # indexed by the build too
        assert await content.publish("/d1/note.md", b"# Fresh\n\nomega\n", {}, 2)
        assert await content.set_archived("/d2/note.md", True)
        waiting = asyncio.create_task(lookup.wait_built(10))
        held_build.set()
        await running
        assert await waiting
        found = [(row.path, row.anchor) for row in rows(lookup, content, "omega", True)]
        assert sorted(found) == [("/d1/note.md", "fresh"), ("/new.md", "fresh")]
        assert [row.path for row in rows(lookup, content, "fresh", False)] == [
            "/d1/note.md",
            "/new.md",
        ]
        assert "/d2/note.md" not in {row.path for row in rows(lookup, content, "note", False)}
        want = Lookup()
        for doc in content.current_versions():
            version = content.read(doc)
            if version is not None and not version.archived:
                want.put(version)
        assert every_answer(lookup, content) == every_answer(want, content)
        assert lookup.bodies.terms == want.bodies.terms
    finally:
        content.close()


async def test_a_saved_index_is_restored_and_what_changed_is_analysed(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = saved.file_for(tmp_path / "state", root)
    lookup, content = await built(root, file=file)
    assert build.save(lookup, content, file)
    assert not build.save(lookup, content, file)  # nothing changed since
    assert await content.publish("/d3/note.md", b"# Fresh\n\nfresh\n", {}, 1)
    content.close()

    analysed: list[int] = []
    analyze_many = analysis.analyze_many

    def counting(bodies: list[bytes]) -> object:
        analysed.append(len(bodies))
        return analyze_many(bodies)

    monkeypatch.setattr(analysis, "analyze_many", counting)
    lookup, content = await built(root, file=file)
    try:
        assert sum(analysed) == 1  # only the document changed after the save
        want_lookup, want_content = inline(root)
        assert every_answer(lookup, content) == every_answer(want_lookup, want_content)
        want_content.close()
    finally:
        content.close()


async def test_a_save_removes_what_a_crash_cut_short_and_nothing_younger(
    root: Path, tmp_path: Path
) -> None:
    file = saved.file_for(tmp_path / "state", root)
    file.parent.mkdir(parents=True)
    stale, fresh = file.parent / durable.temp_name(), file.parent / durable.temp_name()
    for left in (stale, fresh):
        left.write_bytes(b"half an index")
    old = time.time() - saved.STALE_TEMP - 60
    os.utime(stale, (old, old))
    lookup, content = await built(root, file=file)
    try:
        assert build.save(lookup, content, file)
    finally:
        content.close()
    assert not stale.exists()
    assert fresh.exists()  # may be another root's save in progress
    assert saved.load(file, root) is not None


async def test_a_foreign_or_torn_saved_index_is_ignored(root: Path, tmp_path: Path) -> None:
    file = tmp_path / "saved.pickle"
    file.write_bytes(b"\x80\x05garbage")
    lookup, content = await built(root, file=file)
    try:
        assert rows(lookup, content, "alpha", True)
    finally:
        content.close()
    import pickle

    file.write_bytes(pickle.dumps({"format": saved.FORMAT, "x": wire.Request}))
    assert saved.load(file, root) is None  # no classes are made from a saved index


async def test_a_lookup_waits_for_the_build(root: Path, held_build: threading.Event) -> None:
    lookup = Lookup()
    lookup.begin_build()
    content = Content.open(root)
    content.attach(lookup)
    try:
        running = asyncio.create_task(Build(lookup, content, saved=None, workers=0).run())
        assert not await lookup.wait_built(0.05)  # bounded
        held_build.set()
        assert await lookup.wait_built(10)
        await running
    finally:
        content.close()


async def test_a_vault_of_small_notes_costs_a_few_kilobytes_a_note(tmp_path: Path) -> None:
    """What a document costs whatever its size (its snapshot entry, catalog entry, outline,
    links and their keys) is what a vault of short notes is mostly made of: the snapshot and
    the built indexes together hold about 2.9 KB a note (Python objects, tracemalloc), down
    from 5.1 KB before metadata strings and tags were shared between documents, keys with
    one value held an int rather than an array, outlines without suffixed anchors shared one
    empty pair, and a wikilink's later candidates were left to its file name's key (3.8 KB),
    then an outline's numbers were packed, the snapshot made file names and etags again when
    asked, and equal short metadata became one dict (2.9 KB)."""
    notes = [(path, body, {}) for path, body in small_notes(401)]
    for folder, docs in (("warm", notes[:1]), ("root", notes[1:])):
        (tmp_path / folder).mkdir()
        seed(tmp_path / folder, docs)
    _, warm = await built(tmp_path / "warm")  # imports (the frontmatter's parser) and caches
    warm.close()
    gc.collect()
    tracemalloc.start()
    try:
        lookup, content = await built(tmp_path / "root")
        gc.collect()
        size = tracemalloc.get_traced_memory()[0] / (len(notes) - 1)
    finally:
        tracemalloc.stop()
    try:
        assert size < 3300
        assert [row.path for row in rows(lookup, content, "meeting0", True)][:1]
        inbound = lookup.links.inbound("/area2/note2.md")  # a wikilink and a relative link
        assert {edge.source for edge in inbound} == {"/area1/note1.md", "/area3/note3.md"}
    finally:
        content.close()
