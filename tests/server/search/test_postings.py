"""The body index's posting lists (frozen segment, tail, dead ranges): after any writes, merges
and a save and restore, every term's entries are what a plain dict of lists says."""

from __future__ import annotations

import tracemalloc
from array import array
from itertools import accumulate, pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.server.search.analysis import FLAG_BITS, IN_HEADING, combine
from markproto.server.search.postings import PostingLists

TERMS = ["a", "b", "kiwi", "é", "\U0001f600", "zz", "b\udc80"]
DOC = st.dictionaries(st.sampled_from(TERMS), st.integers(1, 3), max_size=5)
"""A document: its terms, and in how many of its sections each is (its first ones)."""
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), DOC),
        st.tuples(st.just("remove"), st.integers(0, 20)),
        st.tuples(st.just("freeze")),
        st.tuples(st.just("restore")),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_posting_lists_are_what_a_dict_says(ops: list[tuple[object, ...]]) -> None:
    lists, model = PostingLists(), {}
    docs: list[tuple[int, int]] = []  # live documents: first slot, slots
    next_slot = 0
    for op in ops:
        if op[0] == "add":
            terms = op[1]
            assert isinstance(terms, dict)
            slots = max([3, *terms.values()])
            for term, sections in terms.items():
                part = array("I", ((next_slot + s) << FLAG_BITS | s + 1 for s in range(sections)))
                lists.extend(term, array("I", (len(part),)), part, 0)
                model.setdefault(term, []).extend(part)
            docs.append((next_slot, slots))
            next_slot += slots
        elif op[0] == "remove" and docs:
            number = op[1]
            assert isinstance(number, int)
            start, slots = docs.pop(number % len(docs))
            lists.remove(start, start + slots)
            for term in list(model):
                gone = range(start, start + slots)
                model[term] = [e for e in model[term] if e >> FLAG_BITS not in gone]
                if not model[term]:
                    del model[term]
        elif op[0] == "freeze":
            lists.freeze(next_slot)
        elif op[0] == "restore":
            lists = PostingLists.restored(*lists.dump(next_slot), next_slot)
        for term in TERMS:
            assert list(lists.get(term)) == model.get(term, [])
        assert len(lists) == len(model)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sets(st.text("abcé\U0001f600", min_size=1, max_size=4), max_size=150), max_size=4),
    st.sets(st.text("abcé\U0001f600", min_size=1, max_size=4), max_size=30),
)
def test_a_vocabulary_of_many_blocks_finds_every_term(
    batches: list[set[str]], absent: set[str]
) -> None:
    """Past ``SAMPLE`` frozen terms a lookup goes through the sample: every term in every block
    (its first, its last, the segment's last), after merges into a frozen segment and a restore."""
    lists, model = PostingLists(), {}
    for slot, batch in enumerate(batches):
        for term in sorted(batch):
            entry = array("I", (slot << FLAG_BITS | 1,))
            lists.extend(term, array("I", (1,)), entry, 0)
            model.setdefault(term, []).extend(entry)
        lists.freeze(slot + 1)
        for copy in (lists, PostingLists.restored(*lists.dump(slot + 1), slot + 1)):
            for term in model.keys() | absent:
                assert list(copy.get(term)) == model.get(term, [])
            assert len(copy) == len(model)


RUN = st.lists(
    st.tuples(st.booleans(), st.dictionaries(st.sampled_from(TERMS), st.integers(1, 40))),
    min_size=1,
    max_size=4,
)
"""A run of postings: sections, each going on from the last run's last one or not, and each
term's frequency in it."""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(RUN, st.booleans()), max_size=8))
def test_a_section_split_between_runs_is_one_entry(runs: list[tuple[object, bool]]) -> None:
    """A long section's postings come in several runs (``analysis.RUN_TERMS``): its entries in
    each are combined into one, the frequencies added (capped) and the flags or-ed, in the
    tail and through the merges after it (none comes between a section's runs: a batch's runs
    go in before a merge)."""
    lists, model = PostingLists(), {}
    slot = 0
    for sections, freeze in runs:
        assert isinstance(sections, list)
        run, slot = _run(sections, slot, model)
        lists.extend(*run)
        if freeze:
            lists.freeze(slot + 1)
            slot += 1
        for term in TERMS:
            assert list(lists.get(term)) == model.get(term, [])
    lists.freeze(slot + 1)
    for term in TERMS:
        assert list(lists.get(term)) == model.get(term, [])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(RUN, st.integers(0, 3)), max_size=10))
def test_a_merge_of_many_runs_is_the_merges_of_each(runs: list[tuple[object, int]]) -> None:
    """A build's runs, sections split between them, merged at once (the tail takes them
    all, ``extend`` combining the split entries) make the segment that a merge after every
    batch makes, and one merged at any cadence between: the dumps are equal."""
    made: list[tuple[str, array[int], array[int], int, int]] = []
    slot = 0
    for sections, every in runs:
        assert isinstance(sections, list)
        run, slot = _run(sections, slot, {})
        if run[0]:
            made.append((*run, every))
    top = slot + 1
    # a merge comes between batches, never between a section's runs: only before a run
    # whose first section is past every section before it
    highs = accumulate((base + (max(e) >> FLAG_BITS) for _, _, e, base, _ in made), max)
    between = [low > high for (*_, low, _), high in zip(made[1:], highs, strict=False)]
    dumps = []
    for cadence in ("end", "each", "given"):
        lists = PostingLists()
        for (terms, counts, entries, base, every), may in zip(made, [*between, True], strict=False):
            lists.extend(terms, counts, array("I", entries), base)
            if may and (cadence == "each" or (cadence == "given" and every == 0)):
                lists.freeze(top)
        terms, counts, entries = lists.dump(top)
        dumps.append((terms, list(counts), list(entries)))
    assert dumps[0] == dumps[1] == dumps[2]
    terms, counts, entries = dumps[0]
    starts = list(accumulate(counts, initial=0))
    for begin, end in pairwise(starts):  # one entry a section
        slots = [entry >> FLAG_BITS for entry in entries[begin:end]]
        assert slots == sorted(set(slots))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.tuples(RUN, st.booleans()), min_size=1, max_size=5), max_size=4),
    st.lists(st.integers(0, 3), max_size=3),
)
def test_a_merge_between_one_documents_runs_keeps_every_list(
    docs: list[list[tuple[object, bool]]], removals: list[int]
) -> None:
    """``extend(merge=True)`` merges the tail before a run even where a section goes on
    across the cut (a large document's runs, live): the split entry is combined in the
    frozen segment, every list stays what the model says after each run, one entry a
    section, and a document cut so, removed, leaves none of its entries, before and after
    the next merge."""
    lists, model = PostingLists(), {}
    slot = 0
    spans: list[tuple[int, int]] = []
    for doc in docs:
        first = slot = slot + 1 if model else slot
        for sections, merge in doc:
            assert isinstance(sections, list)
            run, slot = _run(sections, slot, model)
            if run[0]:
                lists.extend(*run, merge=merge)
            for term in TERMS:
                assert list(lists.get(term)) == model.get(term, [])
        spans.append((first, slot + 1))
    for number in removals:
        if not spans:
            break
        low, high = spans.pop(number % len(spans))
        lists.remove(low, high)
        for term in list(model):
            model[term] = [e for e in model[term] if not low <= e >> FLAG_BITS < high]
            if not model[term]:
                del model[term]
        for term in TERMS:
            assert list(lists.get(term)) == model.get(term, [])
    lists.freeze(slot + 1)
    for term in TERMS:
        found = list(lists.get(term))
        assert found == model.get(term, [])
        slots = [entry >> FLAG_BITS for entry in found]
        assert slots == sorted(set(slots))
    assert len(lists) == len(model)


def test_a_merge_between_runs_leaves_a_dump_as_it_was() -> None:
    """The entry a merge between a section's runs combines is in the frozen segment: after a
    dump (a save writing on a thread) it is combined in a copy, not in the dumped array."""
    lists = PostingLists()
    _many_entries(lists, 50, 3, 0)
    _, _, entries = lists.dump(3)  # slot 2, frozen, goes on in the next run
    kept = array("I", entries)
    lists.extend("w0003", array("I", (1,)), array("I", (2 << FLAG_BITS | 1,)), 0, merge=True)
    assert entries == kept
    assert list(lists.get("w0003")) == [1, 1 << FLAG_BITS | 1, 2 << FLAG_BITS | 2]


def _run(
    sections: list[tuple[bool, dict[str, int]]], slot: int, model: dict[str, list[int]]
) -> tuple[tuple[str, array[int], array[int], int], int]:
    """One run of ``sections`` as ``PostingLists.extend`` takes it (terms, counts, entries
    from a base slot, the base), each section's entries added to ``model`` too; the last
    section's slot. A section going on (``go_on``) shares the slot of the one before."""
    per_term: dict[str, list[int]] = {}
    for go_on, counts in sections:
        slot += 0 if go_on or slot == 0 else 1
        for term, tf in counts.items():
            entry = slot << FLAG_BITS | (tf & 63) | (IN_HEADING if tf > 30 else 0)
            for found in (model.setdefault(term, []), per_term.setdefault(term, [])):
                if found and found[-1] >> FLAG_BITS == slot:
                    found[-1] = combine(found[-1], entry)
                else:
                    found.append(entry)
    terms = list(per_term)
    entries = array("I", (entry for term in terms for entry in per_term[term]))
    counts = array("I", (len(per_term[term]) for term in terms))
    base = min(entries, default=0) >> FLAG_BITS  # slots from a base, as a batch's are
    shifted = array("I", (entry - (base << FLAG_BITS) for entry in entries))
    return ("\n".join(terms), counts, shifted, base), slot


def test_a_merge_holds_no_object_per_frozen_term() -> None:
    """A merge (``freeze``) copies the frozen segment as flat buffers: its transient peak is
    about the new segment's own size, not an object per term (whose pymalloc arenas would stay
    behind after the merge, issue 13's board budget)."""
    lists = PostingLists()
    words = [f"term{n:05d}" for n in range(20_000)]
    lists.extend("\n".join(words), array("I", [1] * len(words)), array("I", [1] * len(words)), 0)
    lists.freeze(1)
    fresh = [f"new{n:04d}" for n in range(100)] + words[::200]
    lists.extend("\n".join(fresh), array("I", [1] * len(fresh)), array("I", [1] * len(fresh)), 1)
    tracemalloc.start()
    lists.freeze(2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 * lists.size
    assert list(lists.get(words[200])) == [1, 1 << FLAG_BITS | 1]


def _many_entries(lists: PostingLists, terms: int, per_term: int, slot: int) -> None:
    words = [f"w{n:04d}" for n in range(terms)]
    entries = array("I", (slot + s << FLAG_BITS | 1 for _ in words for s in range(per_term)))
    lists.extend("\n".join(words), array("I", [per_term] * terms), entries, 0)


def test_a_merge_moves_the_entries_in_place() -> None:
    """Most of a segment is its entries: a merge moves them within their own array, grown by the
    tail's, so its peak is about the tail and the terms, not a second copy of the segment (at
    FastAPI x5 the second copy, 2 MB, was the live publish's peak)."""
    tracemalloc.start()  # from before the segment is made: its growth is traced as growth
    try:
        lists = PostingLists()
        _many_entries(lists, 2_000, 200, 0)
        lists.freeze(200)
        _many_entries(lists, 2_000, 2, 200)
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        lists.freeze(202)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < lists.size // 4
    assert list(lists.get("w0007")) == [s << FLAG_BITS | 1 for s in range(202)]


def test_a_merge_leaves_the_entries_a_dump_gave_as_they_were() -> None:
    """A save writes the dumped entries on a thread while the index may take more writes: the
    merge after a dump writes new arrays rather than moving those."""
    lists = PostingLists()
    _many_entries(lists, 50, 3, 0)
    terms, counts, entries = lists.dump(3)
    kept = array("I", entries)
    _many_entries(lists, 50, 1, 3)
    lists.freeze(4)
    assert entries == kept
    assert list(lists.get("w0003")) == [s << FLAG_BITS | 1 for s in range(4)]
    assert PostingLists.restored(terms, counts, entries, 3).get("w0003") == kept[9:12]
