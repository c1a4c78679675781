"""gotext against Go's documented behaviour: unicode.IsSpace, strings.TrimSpace/Fields/ToLower, and
strings.EqualFold's fold orbits, checked over every cased code point."""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import gotext
from markproto.protocol.gotext import (
    SPACE,
    equal_fold,
    fields,
    fold,
    has_info_separators,
    lower,
    trim_space,
)

ALL = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
CASED_BELOW = 0x1F000
"""Every code point with a case mapping lies below this (the last are Adlam's, U+1E900-1E943)."""

GO_SPACE = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)]
GO_SPACE += [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
"""unicode.IsSpace, as Go documents it: the Latin-1 spaces, then the White_Space property."""

GO_ORBITS = [
    "Kk\u212a",
    "Ss\u017f",
    "\u00b5\u039c\u03bc",
    "\u00c5\u00e5\u212b",
    "\u00df\u1e9e",
    "\u0130",
    "\u0131",
    "\u01c4\u01c5\u01c6",
    "\u01c7\u01c8\u01c9",
    "\u01ca\u01cb\u01cc",
    "\u01f1\u01f2\u01f3",
    "\u0345\u0399\u03b9\u1fbe",
    "\u0392\u03b2\u03d0",
    "\u0395\u03b5\u03f5",
    "\u0398\u03b8\u03d1\u03f4",
    "\u039a\u03ba\u03f0",
    "\u03a0\u03c0\u03d6",
    "\u03a1\u03c1\u03f1",
    "\u03a3\u03c2\u03c3",
    "\u03a6\u03c6\u03d5",
    "\u03a9\u03c9\u2126",
    "\u0412\u0432\u1c80",
    "\u0414\u0434\u1c81",
    "\u041e\u043e\u1c82",
    "\u0421\u0441\u1c83",
    "\u0422\u0442\u1c84\u1c85",
    "\u042a\u044a\u1c86",
    "\u0462\u0463\u1c87",
    "\u1c88\ua64a\ua64b",
    "\u1e60\u1e61\u1e9b",
]
"""Go's case orbits (unicode.caseOrbit): the fold classes that are not a rune and its ToLower.
``İ`` and ``ı`` are orbits of their own: their only foldings to ``i``/``I`` are Turkic."""


# --- spaces and fields ----------------------------------------------------------------------------


def test_space_is_go_unicode_is_space() -> None:
    assert sorted(map(ord, SPACE)) == GO_SPACE
    python_only = {ch for ch in ALL if ch.isspace()} - set(SPACE)
    assert python_only == {"\x1c", "\x1d", "\x1e", "\x1f"}
    assert all(has_info_separators(f"a{ch}b") for ch in python_only)
    assert not has_info_separators(SPACE + "abc\x1b\x20")


def test_trim_space_is_go_not_python() -> None:
    assert gotext.trim_space("\x85 a \u2009") == "a"
    assert gotext.trim_space("\x1fa\x1c") == "\x1fa\x1c"


def test_fields_splits_on_go_spaces_only() -> None:
    assert fields("a\x1cb\x1fc") == ["a\x1cb\x1fc"]
    assert fields(" a\u00a0b\u3000c\x85d\u2028") == ["a", "b", "c", "d"]
    assert fields("\x1c x \x1d") == ["\x1c", "x", "\x1d"]
    assert fields("") == fields(SPACE) == []


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from([*"ab_ \t\n", *SPACE[6:], "\x1c", "\x1f", "\u200b"])))
def test_fields_and_trim_space_equal_the_literal_rules(text: str) -> None:
    assert fields(text) == [f for f in re.split(f"[{re.escape(SPACE)}]+", text) if f]
    assert trim_space(text) == re.sub(f"^[{re.escape(SPACE)}]+|[{re.escape(SPACE)}]+$", "", text)


def test_python_word_class_is_go_word_rune() -> None:
    """Patterns rely on ``\\w`` being unicode.IsLetter || unicode.IsNumber || '_'."""
    word = re.compile(r"\w")
    assert [ch for ch in ALL if bool(word.match(ch)) != _go_word_rune(ch)] == []


def _go_word_rune(ch: str) -> bool:
    return ch == "_" or unicodedata.category(ch)[0] in "LN"


# --- lower ----------------------------------------------------------------------------------------


def test_lower_is_per_rune_simple_mapping() -> None:
    assert lower("İSTANBUL") == "istanbul"  # str.lower gives i + U+0307
    assert lower("ΟΔΟΣ") == "οδοσ"  # no final sigma
    assert lower("Σ") == "σ"
    assert lower("Straße ẞ") == "straße ß"
    assert lower("ǅ") == "ǆ"


def test_lower_keeps_every_rune_count() -> None:
    everything = "".join(ALL)
    assert len(lower(everything)) == len(everything)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from([*"aZ ", "İ", "Σ", "σ", "ß", "ẞ", "ǅ", "é", "Ω"])))
def test_lower_of_a_text_is_the_lower_of_each_rune(text: str) -> None:
    assert lower(text) == "".join(map(lower, text))


# --- fold and equal_fold --------------------------------------------------------------------------


@pytest.mark.parametrize("orbit", GO_ORBITS)
def test_each_go_orbit_folds_together(orbit: str) -> None:
    assert len({fold(ch) for ch in orbit}) == 1
    assert all(equal_fold(a, b) for a in orbit for b in orbit)


def test_dotted_and_dotless_i_fold_alone() -> None:
    """Go's EqualFold keeps ``İ`` and ``ı`` apart from ``i`` and ``I`` (an older copy of this rule
    folded both into ``i``)."""
    for odd in "İı":
        assert fold(odd) not in {fold("i"), fold("I")}
        assert not equal_fold(odd, "i")
        assert not equal_fold(odd, "I")
    assert not equal_fold("İ", "ı")
    assert not equal_fold("KILIÇ", "kılıç")
    assert equal_fold("kılıç", "KıLıÇ")


def test_equal_fold_is_rune_by_rune() -> None:
    assert equal_fold("Straße", "STRAẞE")
    assert not equal_fold("straße", "strasse")  # no full folding: ß is one rune, ss two
    assert not equal_fold("ﬁ", "fi")
    assert equal_fold("\u212akelvin", "KKELVIN")
    assert equal_fold("ᾈ", "ᾀ")  # simple folding keeps the iota subscript one rune
    assert not equal_fold("a", "ab")
    assert equal_fold("", "")


def test_fold_classes_are_exactly_go_orbits() -> None:
    """Every rune folds with its Go orbit and nothing else: a listed orbit, or else the rune and
    its one-rune lower case."""
    in_orbit = {ch: orbit for orbit in GO_ORBITS for ch in orbit}
    classes: defaultdict[str, set[str]] = defaultdict(set)
    for ch in ALL:
        if ord(ch) >= CASED_BELOW:
            assert fold(ch) == ch
            continue
        classes[fold(ch)].add(ch)
        lowered = ch.lower()
        if ch not in in_orbit and len(lowered) == 1:
            assert fold(lowered) == fold(ch)
    for members in classes.values():
        orbit = next((in_orbit[ch] for ch in members if ch in in_orbit), None)
        if orbit is not None:
            assert members == set(orbit)
        elif len(members) > 1:
            a, b = members
            assert a.lower() == b or b.lower() == a


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from([*"aAkK ", *"".join(GO_ORBITS), "é", "É", "ﬁ"])))
def test_fold_of_a_text_is_the_fold_of_each_rune(text: str) -> None:
    folded = fold(text)
    assert folded == "".join(map(fold, text))
    assert equal_fold(text, lower(text)) == ("İ" not in text)
