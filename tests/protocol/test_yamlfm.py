"""The frontmatter emitter and reader against yaml.v3's rules (SPEC §2 step 6, §3.2)."""

from __future__ import annotations

import functools
import gc
import tracemalloc

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from markproto.protocol.errors import MalformedRequest
from markproto.protocol.yamlfm import emit, key_less, load, scalar

KEYS = st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True)
VALUES = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"])),
    st.text(alphabet="ab1:-# '\"|>@`%!&*?,[]{}~.\t0x_eE+", max_size=8),
    st.sampled_from(["", "~", "null", "yes", "0x1F", "1e3", "2026-01-01T00:00:00Z", "12:30"]),
)
META = st.dictionaries(KEYS, VALUES, max_size=8)


def natural_sorted(keys: list[str]) -> list[str]:
    """Sorted by ``key_less``, the comparator alone."""
    return sorted(keys, key=functools.cmp_to_key(lambda a, b: key_less(b, a) - key_less(a, b)))


def emitted_order(keys: list[str]) -> list[str]:
    """The order ``emit`` writes ``keys`` in, read back (``load`` keeps the file's order)."""
    return list(load(emit(dict.fromkeys(keys, "v"))))


# --- key order --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("x9", "x10"),
        ("a2b", "a10b"),
        ("v1", "v01"),
        ("a1b", "a1-"),
        ("a-", "ab"),
        ("a", "a-b"),
        ("ab", "abc"),
        ("content-hash", "current-version"),
        ("_x", "Bx"),
        ("Z", "a"),
        ("x0", "x00"),
        ("x09y", "x10"),
    ],
)
def test_natural_key_order(before: str, after: str) -> None:
    assert key_less(before, after)
    assert not key_less(after, before)


def test_digit_runs_wrap_like_go_int64() -> None:
    assert key_less("k" + "9" * 19, "k1")
    assert key_less("k1", "k" + "1" * 19)


def test_emit_sorts_keys_naturally_and_puts_status_in_its_place() -> None:
    meta = {"x10": "a", "x9": "b", "status": "ok", "etag": "e", "content-hash": "h"}
    assert emit(meta) == "content-hash: h\netag: e\nstatus: ok\nx9: b\nx10: a\n"


@given(st.lists(st.from_regex(r"[a-z-]{0,6}", fullmatch=True), max_size=12))
def test_keys_without_digits_sort_in_byte_order(keys: list[str]) -> None:
    assert natural_sorted(keys) == sorted(keys)
    assert emitted_order(keys) == sorted(dict.fromkeys(keys))


@given(st.lists(st.from_regex(r"[a-z0-9_A-Z-]{0,6}", fullmatch=True), max_size=12, unique=True))
def test_emit_order_is_the_comparator_order(keys: list[str]) -> None:
    assert emitted_order(keys) == natural_sorted(keys)


# --- value style ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "written"),
    [
        # plain
        ("ok", "ok"),
        ("alpha,wire", "alpha,wire"),
        ("Beta | piped", "Beta | piped"),
        ("sha256-050018a2", "sha256-050018a2"),
        ("AQAABS9kb2NzYS5tZA", "AQAABS9kb2NzYS5tZA"),
        ("a#b", "a#b"),
        ("a:b", "a:b"),
        ("-a", "-a"),
        ("é ü", "é ü"),
        ("<<", "<<"),
        ("it's", "it's"),
        ("nULL", "nULL"),
        ("_1", "_1"),
        ("0b2", "0b2"),
        ("0x1g", "0x1g"),
        ("0x", "0x"),
        ("1,000", "1,000"),
        ("1e999", "1e999"),
        ("0x" + "F" * 17, "0x" + "F" * 17),
        ("2026-01-01T00:00:00", "2026-01-01T00:00:00"),
        ("2026-02-30", "2026-02-30"),
        ("2026-01-01 10:00:00Z", "2026-01-01 10:00:00Z"),
        # single-quoted: a string, but plain is not allowed here
        ("A: B", "'A: B'"),
        ("- y", "'- y'"),
        ("#tag", "'#tag'"),
        ("a #b", "'a #b'"),
        ("a:", "'a:'"),
        ("-", "'-'"),
        ("?", "'?'"),
        ("---x", "'---x'"),
        ("...", "'...'"),
        (" x", "' x'"),
        ("x ", "'x '"),
        ("'q'", "'''q'''"),
        ("@x", "'@x'"),
        ("`x", "'`x'"),
        ("%x", "'%x'"),
        ("[a", "'[a'"),
        ("{", "'{'"),
        ("!x", "'!x'"),
        ("&a", "'&a'"),
        ("*a", "'*a'"),
        ("|", "'|'"),
        (">", "'>'"),
        ('"\\', "'\"\\'"),
        # double-quoted: resolves to something other than a string
        ("3", '"3"'),
        ("0.7", '"0.7"'),
        ("true", '"true"'),
        ("False", '"False"'),
        ("2026-01-01T00:00:00Z", '"2026-01-01T00:00:00Z"'),
        ("2026-1-2t3:04:05.5+01:00", '"2026-1-2t3:04:05.5+01:00"'),
        ("2026-01-01 00:00:00", '"2026-01-01 00:00:00"'),
        ("2026-01-01", '"2026-01-01"'),
        ("", '""'),
        ("yes", '"yes"'),
        ("Off", '"Off"'),
        ("y", '"y"'),
        ("null", '"null"'),
        ("~", '"~"'),
        ("1e3", '"1e3"'),
        ("0x1F", '"0x1F"'),
        ("0o17", '"0o17"'),
        ("0b101", '"0b101"'),
        ("0b-1", '"0b-1"'),
        ("0B1", '"0B1"'),
        ("0X1f", '"0X1f"'),
        ("0", '"0"'),
        ("-0b11", '"-0b11"'),
        ("007", '"007"'),
        ("09", '"09"'),
        ("1_000", '"1_000"'),
        ("+1", '"+1"'),
        ("-.5", '"-.5"'),
        (".5_0", '".5_0"'),
        ("1" * 30, '"' + "1" * 30 + '"'),
        ("12:30", '"12:30"'),
        (".nan", '".nan"'),
        ("-.INF", '"-.INF"'),
        # double-quoted: tabs and characters yaml.v3 does not print
        ("a\tb", '"a\\tb"'),
        ("a\nb", '"a\\nb"'),
        ("a\rb", '"a\\rb"'),
        ("\x00\x07\x08\x0b\x0c\x1b\x01", '"\\0\\a\\b\\v\\f\\e\\x01"'),
        ("\x7f\x85", '"\\x7F\\N"'),
        ("\ufeff", '"\\uFEFF"'),
        ("😀", '"\\U0001F600"'),
        ("a \u2028b", '"a \\Lb"'),
        ('say "hi"\t', '"say \\"hi\\"\\t"'),
    ],
)
def test_value_style(value: str, written: str) -> None:
    assert scalar(value) == written
    assert emit({"k": value}) == f"k: {written}\n"
    assert load(emit({"k": value})) == {"k": value}


@given(st.from_regex(r"[A-Za-z0-9_/+=][A-Za-z0-9_./+=,@-]*", fullmatch=True))
def test_the_safe_plain_shortcut_matches_the_full_analysis(s: str) -> None:
    """The shortcut lets the resolver alone decide; the full style analysis, reached once a
    character outside the shortcut's set follows (``é``, neutral to both), agrees: plain."""
    assert scalar(s + "é") == s + "é"
    assert scalar(s) in (s, f'"{s}"')


def test_line_separators_continue_a_single_quoted_scalar_indented() -> None:
    assert scalar("a\u2028b") == "'a\u2028    b'"
    assert scalar("a\u2028") == "'a\u2028'"
    assert load("k: 'a\u2028    b'") == {"k": "a\u2028b"}


def test_keys_are_quoted_by_the_same_rules() -> None:
    assert emit({"null": "x", "1": "v", "a b": "z"}) == '"1": v\na b: z\n"null": x\n'


def test_a_key_over_128_bytes_is_an_explicit_entry() -> None:
    key = "k" * 129
    assert emit({key: "v", "a": "0"}) == f'a: "0"\n? {key}\n: v\n'
    assert emit({"k" * 128: "v"}) == f"{'k' * 128}: v\n"
    assert load(emit({key: "v"})) == {key: "v"}


def test_an_empty_map_writes_nothing() -> None:
    assert emit({}) == ""


@given(META)
@example({"k": "a\u2028\u2029'b"})
def test_load_inverts_emit(meta: dict[str, str]) -> None:
    assert load(emit(meta)) == meta


# --- load -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "meta"),
    [
        ("importance: 0.7", {"importance": "0.7"}),
        ("modified: 2026-01-01T00:00:00Z", {"modified": "2026-01-01T00:00:00Z"}),
        ("flag: yes\nn: 0x1F", {"flag": "yes", "n": "0x1F"}),
        ("a:\nb: ~\nc: null\nd: Null\ne: NULL", {"a": "", "b": "", "c": "", "d": "", "e": ""}),
        ('a: ""\nb: "~"\nc: \'null\'', {"a": "", "b": "~", "c": "null"}),
        ('expected-version: "0"', {"expected-version": "0"}),
        ('t: "a\\tb"', {"t": "a\tb"}),
        ('t: "\\u00e9\\x41\\"\\\\"', {"t": 'éA"\\'}),
        ("q: 'it''s'", {"q": "it's"}),
        ("tags: alpha, wire", {"tags": "alpha, wire"}),
        ("title: a  b   # comment", {"title": "a  b"}),
        ("# only a comment\n", {}),
        ("", {}),
        ("\n\n", {}),
        ("~", {}),
        ("x: &a v\ny: *a", {"x": "v", "y": "v"}),
        ("x: |\n  line\n", {"x": "line\n"}),
        ("x: >-\n  a\n  b\n", {"x": "a b"}),
        ("x: a\n  b", {"x": "a b"}),
        ("x: !!str 3", {"x": "3"}),
        ("~: dropped\nk: v", {"k": "v"}),
        ('"": v', {"": "v"}),
        ("k: v\n...\nnot: [parsed", {"k": "v"}),
        ("k: v\n---\nother: doc", {"k": "v"}),
        ("{a: b, c: d}", {"a": "b", "c": "d"}),
        ("\ufeffk: v", {"k": "v"}),
    ],
)
def test_load(block: str, meta: dict[str, str]) -> None:
    assert load(block) == meta
    assert load(block.encode()) == meta


@pytest.mark.parametrize(
    "block",
    [
        "a: [1, 2]",
        "a:\n  - 1",
        "a: {b: c}",
        "a:\n  b: c",
        "a: 1\na: 2",
        'a: 1\n"a": 2',
        "~: 1\n~: 2",
        "a: b: c",
        "a: 'unclosed",
        "- a\n- b",
        "just a scalar",
        "[a]: b",
        "a: *nowhere",
        "<<: x",
        "<<: {a: b}",
        "x: !!int 3",
        "x: !!binary aGk=",
        "\tk: v",
        "k: \x01",
    ],
)
def test_load_refuses(block: str) -> None:
    with pytest.raises(MalformedRequest):
        load(block)


def test_load_refuses_invalid_utf8() -> None:
    with pytest.raises(MalformedRequest):
        load(b"k: \xff")


# --- the fast path agrees with the full parser ------------------------------------------------

LINE_PARTS = st.sampled_from(
    [
        *("k", "a-1", "null", "y", "0", "x:", "x: ", ": ", " ", "  ", "#", "-", "'", '"', "\\"),
        *(",", "@", "v", "a b", "a  b", "a:b", "a: b", "2026-01-01", "~", "NULL", "é", "\t", "\r"),
        ".",
    ]
)
PLAINISH = st.from_regex(r"[a-z0-9_./+=,@:#'\"~ -]{0,8}", fullmatch=True)
QUOTED = st.text(st.characters(exclude_categories=["Cs"], exclude_characters='"\\'), max_size=8)
LINES = st.one_of(
    st.lists(LINE_PARTS, max_size=5).map("".join),
    st.builds(lambda k, v: f"{k}: {v}", KEYS, PLAINISH),
    st.builds(lambda k, v: f'{k}: "{v}"', KEYS, QUOTED),
    st.builds(lambda k, v: f"{k}: {v}", KEYS, VALUES),
    st.builds(lambda k, v: f"{k}: {scalar(v)}", KEYS, VALUES),
)
BLOCKS = st.lists(LINES, max_size=6).map("\n".join)


def load_or_error(block: str) -> dict[str, str] | type[MalformedRequest]:
    try:
        return load(block)
    except MalformedRequest:
        return MalformedRequest


@pytest.fixture
def no_yaml_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML's parser refuses to run: what still loads was read by the fast path."""

    def refuse(*args: object) -> None:
        raise AssertionError("the full YAML parser ran")

    monkeypatch.setattr(getattr(yaml, "CBaseLoader", yaml.BaseLoader), "check_node", refuse)


@settings(max_examples=400)
@given(BLOCKS)
@example('a: "x"\nb: yes\nc:\nd: null\ne: a:b,c d')
@example("a: b\na: c")
@example("null: x")
@example("k: a #b")
@example("k: a ")
@example("k: a:")
@example('k: "a\\tb"')
@example("k: @a")
@example("k: 'a'")
def test_fast_path_agrees_with_the_full_parser(block: str) -> None:
    """A leading comment line is nothing to YAML but sends every block to the full parser."""
    assert load_or_error(block) == load_or_error("#\n" + block)


def test_the_fast_path_takes_what_clients_send(no_yaml_parser: None) -> None:
    block = (
        'auth: storetest-write-token\nexpected-version: "0"\nimportance: "0.7"\ntags: alpha, wire'
    )
    assert load(block) == {
        "auth": "storetest-write-token",
        "expected-version": "0",
        "importance": "0.7",
        "tags": "alpha, wire",
    }


ANY_TEXT = st.one_of(
    st.text(alphabet="ab1:- \n'\"#[]{}&*!|>%@`?,~\t.\\<", max_size=40), st.text(max_size=40)
)


@settings(max_examples=300)
@given(ANY_TEXT)
def test_arbitrary_text_loads_or_raises_malformed_request(block: str) -> None:
    try:
        meta = load(block)
    except MalformedRequest:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())


def test_emit_ignores_insertion_order() -> None:
    meta = {"b": "1", "a10": "x", "a9": "w", "a": "z"}
    assert emit(meta) == emit(dict(reversed(meta.items()))) == 'a: z\na9: w\na10: x\nb: "1"\n'


def test_emitting_unique_values_keeps_none_of_them() -> None:
    """Every response's etag and times are new: a server that wrote a million responses must
    not hold their values afterwards (issue 13: every cache has a byte bound)."""

    def responses(first: int) -> None:
        for n in range(first, first + 4_000):
            emit({"etag": f'"{n:064x}"', "modified": f"2026-12-04T15:{n % 60:02d}:00.{n}Z"})

    responses(0)  # the key caches and the code's own objects, once
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        responses(10_000)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 4_000 * 16  # the values written were 4,000 x ~180 B
