"""The three-way merge both faces use: exact cases, then properties over generated edits."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.client.merge import Merged, MergedMeta, merge_meta, merge_text

BASE = "# Notes\n\nalpha\n\nbeta\n\ngamma\n"


def test_edits_in_different_places_merge_cleanly() -> None:
    ours = BASE.replace("alpha", "ALPHA")
    theirs = BASE.replace("gamma", "GAMMA")
    assert merge_text(BASE, ours, theirs) == Merged("# Notes\n\nALPHA\n\nbeta\n\nGAMMA\n", 0)


def test_the_same_edit_on_both_sides_is_taken_once() -> None:
    both = BASE + "delta\n"
    assert merge_text(BASE, both, both) == Merged(both, 0)


def test_an_overlap_is_marked_as_git_marks_it() -> None:
    ours = BASE.replace("beta", "beta (mine)")
    theirs = BASE.replace("beta", "beta (server)")
    merged = merge_text(BASE, ours, theirs, ours_label="yours (v2 + edit)", theirs_label="v3")
    assert merged == Merged(
        "# Notes\n\nalpha\n\n"
        "<<<<<<< yours (v2 + edit)\nbeta (mine)\n=======\nbeta (server)\n>>>>>>> v3\n"
        "\ngamma\n",
        1,
    )


def test_a_last_line_without_a_newline_still_leaves_the_marker_on_its_own_line() -> None:
    merged = merge_text("a\n", "a\nmine", "a\ntheirs")
    assert merged == Merged("a\n<<<<<<< yours\nmine\n=======\ntheirs\n>>>>>>> theirs\n", 1)


def test_metadata_merges_key_by_key_and_names_the_clashes() -> None:
    base = {"tags": "a", "importance": "0.5", "type": "Note", "gone": "x"}
    ours = {"tags": "a,b", "importance": "0.9", "type": "Note"}  # removed "gone"
    theirs = {"tags": "a", "importance": "0.7", "type": "Note", "gone": "x", "agent": "bot"}
    assert merge_meta(base, ours, theirs) == MergedMeta(
        {"agent": "bot", "importance": "0.9", "tags": "a,b", "type": "Note"}, ("importance",)
    )


# --- properties -------------------------------------------------------------------------------

lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "# h\n", "x"]), max_size=12)
texts = lines.map("".join)


@settings(max_examples=300, deadline=None)
@given(base=texts, other=texts)
def test_a_side_left_unchanged_yields_the_other(base: str, other: str) -> None:
    assert merge_text(base, base, other) == Merged(other, 0)
    assert merge_text(base, other, base) == Merged(other, 0)
    assert merge_text(base, other, other) == Merged(other, 0)


@settings(max_examples=300, deadline=None)
@given(base=texts, ours=texts, theirs=texts)
def test_any_merge_is_clean_exactly_when_it_has_no_markers(
    base: str, ours: str, theirs: str
) -> None:
    merged = merge_text(base, ours, theirs)
    marked = any(line.startswith(("<<<<<<< ", ">>>>>>> ")) for line in merged.text.splitlines())
    assert marked == (merged.conflicts > 0)
    swapped = merge_text(base, theirs, ours)
    assert swapped.conflicts == merged.conflicts
    if merged.conflicts == 0:
        assert swapped.text == merged.text


@dataclass(frozen=True)
class Edits:
    """A base of unique lines in regions; some regions edited by ours, others by theirs, with an
    untouched line between any two edits (so no two edits touch)."""

    base: list[str]
    ours: list[str]
    theirs: list[str]
    expected: list[str]


@st.composite
def disjoint_edits(draw: st.DrawFn) -> Edits:
    count = draw(st.integers(min_value=0, max_value=8))
    base: list[str] = []
    ours: list[str] = []
    theirs: list[str] = []
    expected: list[str] = []
    fresh = iter(range(10_000))
    for region in range(count):
        size = draw(st.integers(min_value=0, max_value=3))
        original = [f"base {region}.{n}\n" for n in range(size)]
        who = draw(st.sampled_from(["none", "ours", "theirs"]))
        replacement = [f"new {next(fresh)}\n" for _ in range(draw(st.integers(0, 3)))]
        base += original
        ours += replacement if who == "ours" else original
        theirs += replacement if who == "theirs" else original
        expected += original if who == "none" else replacement
        separator = [f"keep {region}\n"]
        for side in (base, ours, theirs, expected):
            side += separator
    return Edits(base, ours, theirs, expected)


@settings(max_examples=300, deadline=None)
@given(edits=disjoint_edits())
def test_edits_that_do_not_touch_are_all_applied(edits: Edits) -> None:
    merged = merge_text("".join(edits.base), "".join(edits.ours), "".join(edits.theirs))
    assert merged == Merged("".join(edits.expected), 0)


@settings(max_examples=200, deadline=None)
@given(
    base=st.dictionaries(st.sampled_from("abcd"), st.sampled_from("xyz")),
    other=st.dictionaries(st.sampled_from("abcd"), st.sampled_from("xyz")),
)
def test_metadata_a_side_left_unchanged_yields_the_other(
    base: dict[str, str], other: dict[str, str]
) -> None:
    assert merge_meta(base, base, other) == MergedMeta(other, ())
    assert merge_meta(base, other, base) == MergedMeta(other, ())
