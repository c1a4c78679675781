"""The link index (docs/SPEC.md §5.9): what a link leads to and what leads to a document, for each
reader; after any sequence of writes, archives, unarchives, retention and change scans it answers
as one built from scratch; a reader's answers are those of an index holding only what it may
read; and what it costs in memory."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import tracemalloc
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from markproto.protocol import metadata, storefmt
from markproto.protocol.chars import has_control
from markproto.protocol.linkkinds import (
    AUTOLINK,
    EXTERNAL,
    INLINE,
    INTERNAL,
    MISSING,
    MISSING_ANCHOR,
    OK,
    REFERENCE,
    Link,
)
from markproto.server.search.links import Edge, LinkIndex, links_of, pack, tail, unpack
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content
from markproto.server.storage.layout import version_parts
from markproto.server.storage.store import Store, Version, Written

DAY = datetime(2026, 1, 1, tzinfo=UTC)


def loaded(path: str, body: str, meta: dict[str, str] | None = None) -> Version:
    data = body.encode()
    return Version(
        path, 1, f"{path}/v1", DAY, False, meta or {}, data, "", storefmt.content_hash(data)
    )


def index_of(docs: Iterable[Version], authorities: Iterable[str] = ()) -> LinkIndex:
    lookup = Lookup()
    lookup.links.authorities = frozenset(authorities)
    for doc in docs:
        lookup.put(doc)
    return lookup.links


def brief(edges: list[Edge]) -> list[tuple[str, str, str, str]]:
    return [(edge.raw, edge.target, edge.anchor, edge.state) for edge in edges]


DOCS = [
    loaded(
        "/docs/a.md",
        "# Alpha\n\n[b](b.md#part) [gone](nope.md) [bad](b.md#nowhere) [self](#alpha)\n"
        "[site](/docs/guide/) [up](../top.md) [x](https://x.org) [here](mark://localhost/top.md)"
        " [there](mark://elsewhere/top.md) [[Note]] [[Top#Heading]]\n",
        {"rel-supersedes": "/old.md", "rel-see-also": "https://y.org"},
    ),
    loaded("/docs/b.md", '# Beta\n\n## Part\n\n<a name="anchored"></a>\n[a](a.md)\n'),
    loaded("/docs/guide/index.md", "# Guide\n\n[b](../b.md#anchored)\n"),
    loaded("/top.md", "# Top\n\n## Heading\n\n[a](docs/a.md)\n"),
    loaded("/notes/Note.md", "# Note { #the-note }\n\n[a](/docs/a.md#alpha)\n"),
]


def test_outbound_links_say_where_they_lead() -> None:
    index = index_of(DOCS, ["localhost:6309"])
    edges = index.outbound("/docs/a.md")
    assert brief(edges) == [
        ("b.md#part", "/docs/b.md", "part", OK),
        ("nope.md", "/docs/nope.md", "", MISSING),
        ("b.md#nowhere", "/docs/b.md", "nowhere", MISSING_ANCHOR),
        ("#alpha", "/docs/a.md", "alpha", OK),
        ("/docs/guide/", "/docs/guide/index.md", "", OK),
        ("../top.md", "/top.md", "", OK),
        ("https://x.org", "https://x.org", "", EXTERNAL),
        ("mark://localhost/top.md", "/top.md", "", OK),
        ("mark://elsewhere/top.md", "mark://elsewhere/top.md", "", EXTERNAL),
        ("Note", "/notes/Note.md", "", OK),
        ("Top#Heading", "/top.md", "heading", OK),
        ("https://y.org", "https://y.org", "", EXTERNAL),
        ("/old.md", "/old.md", "", MISSING),
    ]
    kinds = [(edge.kind, edge.predicate) for edge in edges]
    assert kinds[0] == (INTERNAL, "") and kinds[6] == (EXTERNAL, "")
    assert kinds[-2:] == [("relation", "see-also"), ("relation", "supersedes")]
    assert [edge.number for edge in edges] == list(range(len(edges)))


def test_html_ids_and_heading_ids_are_anchors() -> None:
    index = index_of(DOCS)
    assert brief(index.outbound("/docs/guide/index.md")) == [
        ("../b.md#anchored", "/docs/b.md", "anchored", OK)
    ]
    other = index_of([*DOCS, loaded("/z.md", "[n](notes/Note.md#the-note)\n")])
    assert brief(other.outbound("/z.md"))[0][3] == OK


def test_inbound_links_are_the_others_that_lead_here() -> None:
    index = index_of(DOCS, ["localhost:6309"])
    assert [(e.source, e.raw) for e in index.inbound("/top.md")] == [
        ("/docs/a.md", "../top.md"),
        ("/docs/a.md", "mark://localhost/top.md"),
        ("/docs/a.md", "Top#Heading"),
    ]
    assert [(e.source, e.raw) for e in index.inbound("/docs/a.md")] == [
        ("/docs/b.md", "a.md"),
        ("/notes/Note.md", "/docs/a.md#alpha"),
        ("/top.md", "docs/a.md"),
    ]
    assert index.inbound("/docs/nope.md") == []


def test_a_wikilink_name_shared_by_two_documents_resolves_to_neither() -> None:
    twins = [*DOCS, loaded("/other/note.md", "# Another note\n")]
    index = index_of(twins)
    assert brief(index.outbound("/docs/a.md"))[9] == ("Note", "/docs/Note.md", "", MISSING)
    hidden = index.outbound("/docs/a.md", lambda path: path != "/other/note.md")
    assert brief(hidden)[9] == ("Note", "/notes/Note.md", "", OK)
    assert [e.source for e in index.inbound("/notes/Note.md")] == []
    visible = index.inbound("/notes/Note.md", lambda path: path != "/other/note.md")
    assert [e.source for e in visible] == ["/docs/a.md"]


def test_a_site_path_resolves_as_the_reader_sees_it() -> None:
    both = [*DOCS, loaded("/docs/guide.md", "# Guide, the page\n")]
    index = index_of(both)
    assert brief(index.outbound("/docs/a.md"))[4][1] == "/docs/guide.md"
    view = index.outbound("/docs/a.md", lambda path: path != "/docs/guide.md")
    assert brief(view)[4][1] == "/docs/guide/index.md"
    assert [e.source for e in index.inbound("/docs/guide/index.md")] == []
    readable = lambda path: path != "/docs/guide.md"  # noqa: E731
    assert [e.source for e in index.inbound("/docs/guide/index.md", readable)] == ["/docs/a.md"]


# --- for each reader, as if the others did not exist ------------------------------------------

PATHS = ["/docs/a.md", "/docs/b.md", "/docs/guide/index.md", "/top.md", "/notes/Note.md"]


@settings(max_examples=60, deadline=None)
@given(st.sets(st.sampled_from(PATHS)))
def test_a_reader_sees_the_index_of_what_it_may_read(readable: set[str]) -> None:
    """Read auth on both ends: every answer for a reader equals the answer of an index holding
    only the documents it may read, so nothing it may not read is listed, counted or hinted."""
    full = index_of(DOCS, ["localhost:6309"])
    alone = index_of([d for d in DOCS if d.path in readable], ["localhost:6309"])
    for path in [*PATHS, "/docs/guide.md", "/old.md"]:
        if path not in readable:
            continue
        assert full.outbound(path, readable.__contains__) == alone.outbound(path)
        assert full.inbound(path, readable.__contains__) == alone.inbound(path)


HUB = [
    *DOCS,
    loaded("/docs/guide.md", "# Guide, the page\n\n[a](a.md)\n", {"rel-up": "/docs/a.md"}),
    loaded("/far.md", "[a](mark://localhost/docs/a.md) [again](docs/a.md#alpha)\n"),
]


@settings(max_examples=60, deadline=None)
@given(
    st.sets(st.sampled_from([d.path for d in HUB])),
    st.sampled_from([None, frozenset({""}), frozenset({"up"}), frozenset({"", "up"})]),
    st.integers(0, 4),
    st.integers(0, 4),
)
def test_backlinks_are_the_links_that_lead_here_page_by_page(
    readable: set[str], wanted: frozenset[str] | None, start: int, size: int
) -> None:
    """Backlinks, counted cheaply and followed only on the page, are exactly the outbound links
    of every other readable document that ``follow`` (in full) takes to the path."""
    index = index_of(HUB, ["localhost:6309"])
    for path in {d.path for d in HUB} | {"/docs/guide/index.md", "/nowhere.md"}:
        if path not in readable:
            continue
        oracle = [
            edge
            for source in sorted(readable - {path})
            for edge in index.outbound(source, readable.__contains__)
            if edge.target == path
            and edge.state not in (MISSING, EXTERNAL)
            and (wanted is None or edge.predicate in wanted)
        ]
        page, total = index.inbound_page(
            path, readable.__contains__, wanted=wanted, start=start, stop=start + size
        )
        assert (page, total) == (oracle[start : start + size], len(oracle))


def test_the_reader_check_fails_without_the_read_filter() -> None:
    """The property above has teeth: leaving the filter out shows what the reader may not read."""
    readable = {"/docs/a.md", "/top.md"}
    full = index_of(DOCS)
    alone = index_of([d for d in DOCS if d.path in readable])
    assert full.outbound("/docs/a.md") != alone.outbound("/docs/a.md")
    assert full.inbound("/docs/a.md") != alone.inbound("/docs/a.md")


# --- kept current: equal to a rebuild after any sequence of operations ------------------------

POOL = ["/a.md", "/d/b.md", "/d/index.md", "/d/c.md", "/e/Note.md"]
BODIES = [
    "# A\n\n[b](d/b.md) [d](/d/) [[Note]]\n",
    "# B\n\n## Part\n\n[a](../a.md#a) [c](c.md#part) [gone](x.md)\n",
    "# Index\n\n[[b#Part|the part]] [a](/a)\n",
    "# C\n\n## Part\n\nno links\n",
    "# Note\n\n[b](/d/b.md#part) [self](#note)\n",
    "plain [b](b.md)\n",
]
METAS = [{}, {"rel-next": "/d/c.md"}, {"rel-up": "/a.md, /d/"}]

Op = tuple[str, int, int, int]
VERBS = ["publish", "append", "archive", "unarchive", "retention"]
VERBS += ["disk", "disk-archive", "disk-unarchive", "disk-remove"]
"""The last four behind the server's back, each followed by a change scan."""
OPS = st.lists(
    st.tuples(
        st.sampled_from(VERBS),
        st.integers(0, len(POOL) - 1),
        st.integers(0, len(BODIES) - 1),
        st.integers(0, len(METAS) - 1),
    ),
    max_size=12,
)


def view(index: LinkIndex) -> dict[str, tuple[list[Edge], list[Edge]]]:
    universe = [*POOL, "/d.md", "/x.md", "/d/x.md"]
    return {path: (index.outbound(path), index.inbound(path)) for path in universe}


async def _apply(content: Content, root: Path, op: Op) -> None:
    verb, where, which, meta_no = op
    path, body, meta = POOL[where], BODIES[which].encode(), dict(METAS[meta_no])
    current = content.current(path)
    if verb in ("publish", "retention"):
        if verb == "retention":
            meta["retention"] = "1"
        await content.publish(path, body, metadata.normalize(meta), None)
    elif verb == "append" and current is not None and not current.archived:
        await content.append(path, b"\nmore [a](/a.md)\n", {}, current.number)
    elif verb == "archive" and current is not None:
        await content.set_archived(path, True)
    elif verb == "unarchive" and current is not None:
        await content.set_archived(path, False)
    elif verb == "disk":  # behind the server's back, then the change scan
        written = Store(root).publish(path, body, metadata.normalize(meta), None)
        assert isinstance(written, Written) or current is not None
        await content.rescan()
    elif verb in ("disk-archive", "disk-unarchive") and current is not None:
        Store(root).set_archived(path, verb == "disk-archive")
        await content.rescan()
    elif verb == "disk-remove" and current is not None:  # deleted, history and all
        (root / path.lstrip("/")).unlink()
        shutil.rmtree(root.joinpath(*version_parts(path)))
        await content.rescan()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
@example([("publish", 0, 0, 0), ("disk-remove", 0, 0, 0), ("disk", 0, 0, 0)])
def test_after_any_operations_the_index_equals_a_rebuild(ops: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)

        async def run() -> None:
            live = Lookup()
            content = Content.open(root, [live])
            try:
                for op in ops:
                    await _apply(content, root, op)
                fresh = Lookup()
                rebuilt = Content.open(root, [fresh])
                rebuilt.close()
                assert sorted(live.links.paths()) == sorted(fresh.links.paths())
                assert view(live.links) == view(fresh.links)
            finally:
                content.close()

        asyncio.run(run())


WIKI_PATHS = ["/Note.md", "/a/Note.md", "/a/b/note.md", "/a/Other.md", "/b/index.md", "/Top.md"]
WIKI_TARGETS = ["Note", "note", "a/Note", "b/note", "Other", "Top", "b/index", "/Top", "a/b/note"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(WIKI_PATHS),
            st.lists(st.sampled_from(WIKI_TARGETS), min_size=1, max_size=4),
        ),
        max_size=8,
    ),
    st.sets(st.sampled_from(WIKI_PATHS)),
)
def test_backlinks_are_every_link_that_lands_there(
    docs: list[tuple[str, list[str]]], readable: set[str]
) -> None:
    """Whatever folder a wikilink is written in, and whichever of its candidates (its folder,
    the root, its file name anywhere) it lands on for a reader, a document's backlinks are
    exactly the other documents' links that lead to it: the reverse of every outbound list."""
    written = {path: " ".join(f"[[{target}]]" for target in targets) for path, targets in docs}
    index = index_of(loaded(path, f"# T\n\n{body}\n") for path, body in written.items())

    def seen(path: str) -> bool:
        return path in readable

    for path in WIKI_PATHS:
        expected = sorted(
            (edge.source, edge.number)
            for source in written
            if source != path and seen(source)
            for edge in index.outbound(source, seen)
            if edge.target == path and edge.state != MISSING
        )
        found = sorted((edge.source, edge.number) for edge in index.inbound(path, seen))
        assert found == (expected if seen(path) else [])


def test_memory_is_counted_per_link() -> None:
    index = index_of(DOCS)
    links = sum(len(index.outbound(path)) for path in index.paths())
    assert 0 < index.memory() / links < 1000


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=12), st.text(max_size=12), st.sampled_from([INLINE, AUTOLINK]))
def test_a_tail_leaves_out_control_targets_and_puts_labels_on_one_line(
    target: str, label: str, syntax: str
) -> None:
    """``tail``'s printable shortcut decides as the control-character rules do."""
    link = Link(1, "", target, label, syntax)
    if has_control(target, tab_ok=True):
        assert tail(link) is None
        return
    line = " ".join(label.split()) if has_control(label) else label
    code = "2" if syntax == AUTOLINK else "0"
    want = f"{code}\x1f{target}\x1f{line}".encode("utf-8", "surrogatepass")
    assert tail(link) == want
    section = "s\u00e9" if target else ""
    assert unpack(pack([link._replace(section=section)])[0]) == [
        Link(1, section, target, line, syntax)
    ]


def test_a_long_packed_record_is_read_back_a_piece_at_a_time() -> None:
    """Links unpacked across the inflater's pieces are those packed, and reading them holds a
    piece at a time, not the whole record (the release notes' 500 KB of records inflated
    whole peaked at 1.9 MB)."""
    found = [
        Link(n, f"section-{n // 50}", f"https://example.com/{n}/é{'x' * (n % 97)}", f"{n} ✓", kind)
        for n in range(1, 20_001)
        for kind in [(INLINE, REFERENCE, AUTOLINK)[n % 3]]
    ]
    packed, count = pack(found)
    assert count == len(found)
    tracemalloc.start()
    try:
        back = 0
        for mine, theirs in zip(links_of(packed), found, strict=True):
            assert mine == theirs
            back += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert back == len(found)
    assert unpack(packed, 9_990, 10_010) == found[9_990:10_010]
    assert peak < 300_000  # the records are about 2 MB
