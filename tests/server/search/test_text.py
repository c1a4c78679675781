"""LOOKUP's text rules (SPEC §5.7) against the reference's tables, and the fast paths
against literal per-line / per-field oracles written from the spec with Go's semantics."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol.gotext import SPACE as GO_SPACE
from markproto.protocol.gotext import fields, fold
from markproto.protocol.gotext import lower as go_lower
from markproto.server.search.text import (
    catalog_terms,
    field_words,
    identifier_words,
    line_cut,
    loose_text,
    prose_counts,
    query_terms,
    strip_line,
    strip_markup,
    text_counts,
    text_words,
    word_set,
)

# --- oracles, straight from the spec --------------------------------------------------------------


def go_fields(text: str) -> list[str]:
    return [f for f in re.split(f"[{re.escape(GO_SPACE)}]+", text) if f]


def is_word(ch: str) -> bool:
    return ch == "_" or unicodedata.category(ch)[0] in "LN"


def rune_lower(text: str) -> str:
    return "".join(ch.lower()[0] for ch in text)


def fits(token: str) -> bool:
    return len(token) >= 2 and len(token.encode()) <= 32


def oracle_field_tokens(field: str) -> list[str]:
    start, end = 0, len(field)
    while start < end and not is_word(field[start]):
        start += 1
    while end > start and not is_word(field[end - 1]):
        end -= 1
    whole = rune_lower(field[start:end])
    if not whole:
        return []
    out = [whole] if fits(whole) else []
    if any(not is_word(ch) for ch in whole):
        runs = re.split(r"[^\w]+", whole)
        out += [run for run in runs if run and fits(run)]
    return out


def go_replacer(line: str) -> str:
    """strings.NewReplacer("`", "", "*", "", "~~", "", "|", " "): one pass, argument order."""
    out, i = [], 0
    while i < len(line):
        if line[i] in "`*":
            i += 1
        elif line.startswith("~~", i):
            i += 2
        elif line[i] == "|":
            out.append(" ")
            i += 1
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def oracle_strip(raw: str) -> str:
    kept = []
    for line in raw.split("\n"):
        line = line.strip(GO_SPACE)
        if not line or line.startswith(("```", "~~~")):
            continue
        if not line.strip("=") or not line.strip("-"):
            continue
        if line.startswith("|") and re.fullmatch(r"\|?[\t\n\f\r |:-]+\|?", line):
            continue
        if line[0] == ">":
            line = re.sub(r"^(?:>[\t\n\f\r ]?)+", "", line)
            if not line:
                continue
        if line[0] in "-*+0123456789":
            line = re.sub(r"^(?:[-*+]|[0-9]+[.)])[\t\n\f\r ]+(?:\[[ xX]\][\t\n\f\r ]+)?", "", line)
        if "](" in line:
            line = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", line)
            line = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line)
        if "<" in line:
            line = re.sub(r"</?[A-Za-z][^>]*>", "", line)
        if any(ch in line for ch in "`*~|"):
            line = go_replacer(line)
        line = " ".join(go_fields(line))
        if line:
            kept.append(line)
    return "\n".join(kept)


# --- the reference's tables -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "tokens"),
    [
        ("path.Match", ["path.match", "path", "match"]),
        ("`net.core.rmem_max`,", ["net.core.rmem_max", "net", "core", "rmem_max"]),
        ("read-auth", ["read-auth", "read", "auth"]),
        ("UDP", ["udp"]),
        ("a", []),
        ("(x)", []),
        ("---", []),
        ("sha256-" + "a" * 64, ["sha256"]),
    ],
)
def test_field_tokens_table(field: str, tokens: list[str]) -> None:
    assert field_words(field) == tokens
    assert Counter(text_words(field)) == Counter(tokens)


def test_query_terms_example() -> None:
    query = "  Path.Match udp a UDP `sysctl` auth-" + "f" * 40
    assert query_terms(query) == ["path.match", "udp", "sysctl", "auth"]


def test_query_terms_of_nothing_usable() -> None:
    assert query_terms("*") == []
    assert query_terms("a b ( )") == []
    assert query_terms("x" * 40) == []  # one run over 32 bytes: no word runs left either


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("honor_labels", {"honor_labels": ["honor", "labels"]}),
        (
            "__meta_consul_tags x_sum",
            {"__meta_consul_tags": ["meta", "consul", "tags"], "x_sum": ["sum"]},
        ),
        ("lru_cache cache", {"lru_cache": ["lru"]}),  # a query term is no extra word
        ("a_b_c x_y_z_w", {}),  # single runes are no words
        ("read-auth path.match_here __init__ plain", {}),  # the index splits these already
        ("max_shards max_max", {"max_shards": ["max", "shards"], "max_max": ["max"]}),
    ],
)
def test_identifier_words(query: str, words: dict[str, list[str]]) -> None:
    assert identifier_words(query_terms(query)) == words


@settings(max_examples=300)
@given(st.lists(st.text(alphabet="ab_-.\u00e9", min_size=1, max_size=12), max_size=4))
def test_identifier_words_are_words_of_the_terms(fields_: list[str]) -> None:
    """Every identifier is a term of word characters, and each of its words is one of its runs
    between underscores, a word the index could hold (2 runes or more), and not a term."""
    terms = query_terms(" ".join(fields_))
    for term, words in identifier_words(terms).items():
        assert term in terms and re.fullmatch(r"\w+", term)
        assert words and len(set(words)) == len(words)
        for word in words:
            assert len(word) >= 2 and word not in terms and word in term.split("_")


def test_strip_markup_example() -> None:
    raw = (
        "> quoted **bold** `code`\n>\n\n- [x] item [link text](/x.md) ![img](a.png)\n\n"
        "```sh\n# comment\nrun it\n```\n\n| a | b |\n|---|---|\n| c | d |\n\n"
        "<b>tag</b> ~~gone~~ more\n"
    )
    want = "quoted bold code\nitem link text img\n# comment\nrun it\na b\nc d\ntag gone more"
    assert strip_markup(raw) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("Title\n=====\n---\n", "Title"),  # setext underlines and rules go
        ("snake_case and # hash", "snake_case and # hash"),  # `_` and `#` stay
        ("a~`~b", "a~~b"),  # one left-to-right pass, as Go's Replacer
        ("~~~python\ncode\n~~~", "code"),
        (">  - item", "- item"),  # the quote eats one space, so no list marker is seen
        ("> - item", "item"),
        ("1) first\n2. second\n3.third", "first\nsecond\n3.third"),
        ("* [ ] todo\n- [X] done", "todo\ndone"),
        ("|:--|--:|\n| x |", "x"),
        ("[a](b)c [d](e)", "ac d"),
        ("<div class='x'>in</div> 1 < 2 > 0", "in 1 < 2 > 0"),
        ("  \t \n\n", ""),
        ("tab\there\u00a0nbsp", "tab here nbsp"),
    ],
)
def test_strip_markup_rules(raw: str, want: str) -> None:
    assert strip_markup(raw) == want
    assert oracle_strip(raw) == want


# --- Go versus Python Unicode (§13.12) ------------------------------------------------------------


def test_lower_is_per_rune() -> None:
    assert go_lower("İSTANBUL") == "istanbul"  # Python's lower() gives two runes for İ
    assert go_lower("ΟΔΟΣ") == "οδοσ"  # no final sigma
    assert go_lower("Straße") == "straße"


def test_go_whitespace() -> None:
    assert fields("a\x1cb\x1fc") == ["a\x1cb\x1fc"]  # not spaces in Go
    assert fields("a\u00a0b\u3000c\x85d") == ["a", "b", "c", "d"]
    assert text_words("ab\x1ccd") == ["ab\x1ccd", "ab", "cd"]
    assert strip_markup(" x\x1cy ") == "x\x1cy"


def test_token_limits_are_runes_and_bytes() -> None:
    assert field_words("é") == []  # two bytes, one rune
    assert field_words("éé") == ["éé"]
    assert field_words("é" * 16) == ["é" * 16]  # 32 bytes
    assert field_words("é" * 17) == []  # 34 bytes
    assert field_words("ab-" + "é" * 17) == ["ab"]


def test_catalog_terms_and_fold() -> None:
    assert catalog_terms("Alpha  beta ALPHA") == ["alpha", "beta"]
    assert catalog_terms("(x)") == ["(x)"]  # no trimming in catalog mode
    assert fold("\u212a") == fold("k") == fold("K")  # the Kelvin sign folds to k
    assert fold("ſ") == fold("s")
    assert word_set(["Beta | piped", "a,b"]) == {"beta", "piped", "a,b"}


# --- fast paths equal the literal rules -----------------------------------------------------------

MARKDOWN = st.text(
    alphabet=st.sampled_from(
        [*"abcXY019_ \t\n\r>-*+.)[]()!<>/`~|=:#,é", "İ", "Σ", "\x1c", "\u00a0", "\u2028"]
    ),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(MARKDOWN)
def test_strip_markup_equals_the_per_line_rules(raw: str) -> None:
    assert strip_markup(raw) == oracle_strip(raw)


MARKDOWN_LINES = st.lists(
    st.lists(
        st.sampled_from(
            [
                *"-*+>|=~`:#. \t",
                *["10.", "2)", "[ ]", "[x]", "[X]", "```", "~~~", "~~", "---"],
                *[
                    "ab",
                    "Cd",
                    "é",
                    "a.b",
                    "x",
                    "[l](u)",
                    "![i](p)",
                    "<b>",
                    "</i>",
                    "\u00a0",
                    "\x85",
                ],
            ]
        ),
        max_size=8,
    ).map("".join),
    max_size=8,
).map("\n".join)
"""Lines of line-start marks, boxes, fences and words in any order."""


@settings(max_examples=1500, deadline=None)
@given(st.one_of(MARKDOWN, MARKDOWN_LINES))
def test_prose_counts_are_the_words_of_the_stripped_text(raw: str) -> None:
    stripped = strip_markup(raw)
    counts = prose_counts(raw)
    assert (counts is None) == (not stripped)
    if counts is not None:
        assert list(counts.items()) == list(text_counts(stripped).items())


@settings(max_examples=400, deadline=None)
@given(MARKDOWN)
def test_text_tokens_equal_field_by_field(text: str) -> None:
    want = [token for field in go_fields(text) for token in oracle_field_tokens(field)]
    assert Counter(text_words(text)) == Counter(want)
    assert [t for f in fields(text) for t in field_words(f)] == want


def oracle_runs(field: str) -> list[str]:
    runs, run = [], ""
    for ch in field:
        if is_word(ch):
            run += ch
        elif run:
            runs.append(run)
            run = ""
    return [*runs, run] if run else runs


def oracle_counts(text: str) -> Counter[str]:
    """The words of ``text`` counted in the order of a run of postings: the fields of letters
    and digits alone, then the word runs of the other fields, then those fields' cores."""
    lowered = [rune_lower(field) for field in go_fields(text)]
    plain = [field for field in lowered if field.isalnum()]
    other = [oracle_runs(field) for field in lowered if not field.isalnum()]
    runs = [run for field in other for run in field]
    cores = []
    for field in lowered:
        if not field.isalnum() and len(oracle_runs(field)) > 1:
            start = next(i for i, ch in enumerate(field) if is_word(ch))
            end = max(i for i, ch in enumerate(field) if is_word(ch)) + 1
            cores.append(field[start:end])
    return Counter(word for word in [*plain, *runs, *cores] if fits(word))


@settings(max_examples=400, deadline=None)
@given(st.one_of(MARKDOWN, st.text(max_size=80)))
def test_text_counts_in_the_order_of_a_run(text: str) -> None:
    if any(sep in text for sep in "\x1c\x1d\x1e\x1f"):
        want = Counter(token for field in go_fields(text) for token in oracle_field_tokens(field))
        assert list(text_counts(text).items()) == list(want.items())  # field by field
        return
    assert list(text_counts(text).items()) == list(oracle_counts(text).items())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_text_is_tokenized_without_error(text: str) -> None:
    for token in text_words(text):
        assert fits(token)
        assert not any(ch in GO_SPACE for ch in token)
    for term in query_terms(text):
        assert fits(term)


@settings(max_examples=400, deadline=None)
@given(MARKDOWN)
def test_loose_text_bounds_each_stripped_line(raw: str) -> None:
    loose = loose_text(raw).split("\n")
    lines = raw.split("\n")
    assert len(loose) == len(lines)
    assert "\n".join(filter(None, map(strip_line, lines))) == strip_markup(raw)
    for line, bound in zip(lines, loose, strict=True):
        for word in go_lower(strip_line(line)).split():
            assert word in bound


LINE_PIECES = st.sampled_from(
    [*"ab XY0-*+>|=~`![]()<>/:é\x1c\t", " ", " ", "](", "![", "[[", "~~", "<a ", "</b>"]
)
LINE = st.one_of(
    st.lists(LINE_PIECES, max_size=60).map("".join),
    st.lists(st.one_of(LINE_PIECES, st.sampled_from([" a", " b", " [", " <", " ("])), max_size=60)
    .map("".join)
    .map(lambda line: "w " + line),
)
"""Any line, and lines that start with a word and have many places a cut may go."""


@settings(max_examples=1500, deadline=None)
@given(LINE, st.data())
def test_a_long_line_cut_keeps_its_words(line: str, data: st.DataObject) -> None:
    """Wherever ``line_cut`` cuts a line (again and again), its parts' words are its own: the
    same words as often (``text_words`` gives them in no positional order; the index counts)."""
    raw = line.encode()
    cuts, start, continued = [], 0, False
    while start < len(raw):
        low = data.draw(st.integers(start, len(raw)))
        at = line_cut(raw, start, low, len(raw), continued)
        if at < 0:
            break
        assert low < at < len(raw) and raw[at - 1 : at] == b" "
        cuts.append(at)
        start, continued = at, True
    parts = [raw[a:b].decode() for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    counts = [prose_counts(part) for part in parts]
    whole = prose_counts(line)
    assert sum((part or Counter() for part in counts), Counter()) == (whole or Counter())
    assert any(part is not None for part in counts) == (whole is not None)
