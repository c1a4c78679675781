"""Publisher metadata rules: key sets, validation messages and order, tags, importance, defaults."""

from __future__ import annotations

import gc
import math
import re
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import metadata
from markproto.protocol.errors import InvalidMetadata


def test_key_sets() -> None:
    assert {
        "auth",
        "expected-version",
        "if-none-match",
        "if-modified-since",
    } == metadata.CONTROL_KEYS
    assert len(metadata.RESERVED_KEYS) == 16
    assert {"matches", "match", "status", "etag", "content-hash"} <= metadata.RESERVED_KEYS
    assert not {"complete", "next-cursor", "previous-hash"} & metadata.RESERVED_KEYS
    assert {"version", "previous-hash", "archived"} == metadata.STORE_RESERVED_KEYS
    assert {"type", "title", "description", "resource", "tags", "timestamp"} == metadata.OKF_KEYS


def test_publisher_meta_drops_control_keys_only() -> None:
    request = {"auth": "t", "expected-version": "1", "if-none-match": "e", "tags": "a", "x": "y"}
    request["if-modified-since"] = "2026-01-01T00:00:00Z"
    assert metadata.publisher_meta(request) == {"tags": "a", "x": "y"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"status": "x"}, 'metadata key "status" is reserved'),
        ({"match": "body"}, 'metadata key "match" is reserved'),
        ({"archived": "true"}, 'metadata key "archived" is reserved'),
        ({"Title": "x"}, 'metadata key "Title" contains invalid characters'),
        ({"a_b": "x"}, 'metadata key "a_b" contains invalid characters'),
        ({"metadata.x": "x"}, 'metadata key "metadata.x" contains invalid characters'),
        ({"": "x"}, 'metadata key "" contains invalid characters'),
        ({"a b": "x"}, 'metadata key "a b" contains invalid characters'),
        ({"a\nb": "x"}, 'metadata key "a\\nb" contains invalid characters'),
        ({'a"b': "x"}, 'metadata key "a\\"b" contains invalid characters'),
        ({"é": "x"}, 'metadata key "é" contains invalid characters'),
        ({"title": "a\nb"}, 'metadata value for key "title" contains newlines'),
        ({"title": "a\rb"}, 'metadata value for key "title" contains newlines'),
        ({"title": "bad \udcff byte"}, 'metadata value for key "title" contains newlines'),
        ({f"k{i}": "v" for i in range(51)}, "too many metadata keys (max 50)"),
        ({"title": "x" * 1020}, "metadata too large (max 1024 bytes)"),
    ],
)
def test_validate_messages(values: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        metadata.validate(values)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"tags": "alpha, wire", "importance": "0.7", "type": "Note"},
        {"rel-supersedes": "/adr/0002.md", "x-1": "tab\there", "title": "A: B #c"},
        {f"k{i}": "" for i in range(50)},
        {"title": "x" * 1019},
        {"title": "é" * 509 + "x"},
        {"description": "", "complete": "true", "next-cursor": "c", "previous": "p"},
    ],
)
def test_validate_accepts(values: dict[str, str]) -> None:
    metadata.validate(values)


def test_size_limit_is_inclusive_and_counts_utf8_bytes() -> None:
    metadata.validate({"title": "x" * 1019})  # 5 + 1019 = 1024
    metadata.validate({"title": "é" * 509 + "x"})  # 5 + 1019 bytes
    with pytest.raises(InvalidMetadata, match=re.escape("metadata too large")):
        metadata.validate({"title": "é" * 510})  # 5 + 1020 bytes


def test_size_counts_tags_in_stored_list_form() -> None:
    # "a,b" is stored as "[a, b]": 4 + 6 = 10 bytes, not 4 + 3.
    filler = {"title": "x" * (1024 - 5 - 10)}
    metadata.validate({**filler, "tags": "a,b"})
    with pytest.raises(InvalidMetadata, match=re.escape("metadata too large")):
        metadata.validate({**filler, "tags": "a,b,c"})  # "[a, b, c]" is 9
    # Spaces and empty tags are normalized away before counting.
    metadata.validate({**filler, "tags": " a ,, b , "})


def test_validate_order_is_deterministic() -> None:
    # Count first, whatever else is wrong.
    many = {f"k{i}": "v" for i in range(50)} | {"status": "x", "Bad": "y"}
    with pytest.raises(InvalidMetadata, match="too many"):
        metadata.validate(many)
    # Then keys in sorted order; the first bad key decides.
    with pytest.raises(InvalidMetadata, match='"Zed" contains invalid'):
        metadata.validate({"status": "x", "Zed": "y"})
    with pytest.raises(InvalidMetadata, match='"etag" is reserved'):
        metadata.validate({"title": "a\nb", "etag": "x"})
    with pytest.raises(InvalidMetadata, match='value for key "abc" contains newlines'):
        metadata.validate({"abc": "a\nb", "status": "x"})
    # Size last.
    with pytest.raises(InvalidMetadata, match='"zz" contains newlines'):
        metadata.validate({"title": "x" * 2000, "zz": "\n"})


KEY_ALPHABET = st.sampled_from("abz09-_A.é ")
VALUE_ALPHABET = st.sampled_from(["a", "é", " ", "\t", "\n", "\r", ",", ":"])
METAS = st.dictionaries(
    st.text(KEY_ALPHABET, max_size=8) | st.sampled_from(sorted(metadata.RESERVED_KEYS)),
    st.text(VALUE_ALPHABET, max_size=40) | st.text(st.just("x"), min_size=90, max_size=130),
    max_size=55,
)


def _allowed(values: dict[str, str]) -> bool:
    """The §6 grammar and limits, written independently of the implementation."""
    if len(values) > 50:
        return False
    for key, value in values.items():
        if key in metadata.RESERVED_KEYS or not re.fullmatch(r"[a-z0-9-]+", key):
            return False
        if "\n" in value or "\r" in value:
            return False
    size = 0
    for key, value in values.items():
        if key == "tags":
            tags = [t.strip() for t in value.split(",") if t.strip()]
            value = "[" + ", ".join(tags) + "]"
        size += len(key) + len(value.encode())
    return size <= 1024


@settings(max_examples=400)
@given(METAS)
def test_validate_accepts_exactly_the_grammar(values: dict[str, str]) -> None:
    if _allowed(values):
        metadata.validate(values)
    else:
        with pytest.raises(InvalidMetadata):
            metadata.validate(values)


@pytest.mark.parametrize(
    ("value", "tags", "normalized"),
    [
        ("alpha, wire", ["alpha", "wire"], "alpha,wire"),
        ("a, b ,,c", ["a", "b", "c"], "a,b,c"),
        ("", [], ""),
        (" , ", [], ""),
        ("one", ["one"], "one"),
        ("two words, x", ["two words", "x"], "two words,x"),
        ("\u00a0a\u3000,b", ["a", "b"], "a,b"),
        ("\x1ca", ["\x1ca"], "\x1ca"),
    ],
)
def test_tags(value: str, tags: list[str], normalized: str) -> None:
    assert metadata.split_tags(value) == tags
    assert metadata.normalize_tags(value) == normalized


def test_normalize_rewrites_tags_and_drops_empty_ones() -> None:
    assert metadata.normalize({"tags": "alpha, wire", "x": " y "}) == {
        "tags": "alpha,wire",
        "x": " y ",
    }
    assert metadata.normalize({"tags": " , ", "x": "y"}) == {"x": "y"}
    assert metadata.normalize({"x": "y"}) == {"x": "y"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 0.5),
        ("", 0.5),
        ("0.7", 0.7),
        (" 0.7\n", 0.7),
        ("\u00a00.7\u3000", 0.7),
        ("\x1c0.7", 0.5),
        ("0", 0.0),
        ("1", 1.0),
        ("-0", 0.0),
        ("+0.3", 0.3),
        (".25", 0.25),
        ("1.", 1.0),
        ("2.5e-1", 0.25),
        ("25E-2", 0.25),
        ("1.0000001", 0.5),
        ("-0.1", 0.5),
        ("7", 0.5),
        ("NaN", 0.5),
        ("nan", 0.5),
        ("Inf", 0.5),
        ("-Infinity", 0.5),
        ("1e400", 0.5),
        ("1e-400", 0.0),
        ("0.2_5", 0.25),
        ("0._25", 0.5),
        ("_0.25", 0.5),
        ("0.25_", 0.5),
        ("0x1.8p-1", 0.75),
        ("0x.4p0", 0.25),
        ("0x_1p-2", 0.25),
        ("0x0", 0.5),
        ("0x0p0", 0.0),
        ("0x1p99999", 0.5),
        ("٠.٧", 0.5),
        ("0.7x", 0.5),
        (".", 0.5),
        ("e1", 0.5),
        ("1e", 0.5),
        ("high", 0.5),
    ],
)
def test_parse_importance_follows_go_parsefloat(value: str | None, expected: float) -> None:
    assert metadata.parse_importance(value) == expected


@settings(max_examples=300)
@given(st.text(max_size=20) | st.floats(allow_nan=True).map(str))
def test_parse_importance_is_always_a_usable_prior(value: str) -> None:
    importance = metadata.parse_importance(value)
    assert not math.isnan(importance)
    assert 0.0 <= importance <= 1.0


@pytest.mark.parametrize(
    ("path", "values", "expected"),
    [
        ("/docs/a.md", {}, {"type": "Document"}),
        ("/docs/a.md", {"type": ""}, {"type": "Document"}),
        ("/docs/a.md", {"type": " \t"}, {"type": "Document"}),
        ("/docs/a.md", {"type": "Note"}, {"type": "Note"}),
        ("/docs/index.md", {}, {}),
        ("/log.md", {"type": ""}, {"type": ""}),
        ("/docs/Index.md", {}, {"type": "Document"}),
        ("/docs/myindex.md", {"x": "y"}, {"x": "y", "type": "Document"}),
    ],
)
def test_with_type_default(path: str, values: dict[str, str], expected: dict[str, str]) -> None:
    assert metadata.with_type_default(path, values) == expected


def test_with_type_default_does_not_mutate() -> None:
    values = {"x": "y"}
    metadata.with_type_default("/a.md", values)
    assert values == {"x": "y"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"previous-hash": "x"}, 'key "previous-hash" is reserved for the store'),
        ({"version": "1", "archived": "x"}, 'key "archived" is reserved for the store'),
        ({"retention": "0"}, 'retention must be a positive integer, got "0"'),
        ({"retention": "-2"}, 'retention must be a positive integer, got "-2"'),
        ({"retention": "two"}, 'retention must be a positive integer, got "two"'),
        ({"retention": " 3"}, 'retention must be a positive integer, got " 3"'),
        ({"retention": ""}, 'retention must be a positive integer, got ""'),
    ],
)
def test_validate_store(values: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        metadata.validate_store(values)
    assert str(caught.value) == f"invalid publisher metadata: {message}"


def test_validate_store_accepts() -> None:
    metadata.validate_store({"retention": "3", "type": "Document"})
    metadata.validate_store({"retention": "+03"})
    metadata.validate_store({})


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, None),
        ({"retention": "3"}, 3),
        ({"retention": "+3"}, 3),
        ({"retention": "0"}, None),
        ({"retention": "-1"}, None),
        ({"retention": "1_0"}, None),
        ({"retention": "x"}, None),
    ],
)
def test_retention(values: dict[str, str], expected: int | None) -> None:
    assert metadata.retention(values) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", None), ("0", 0), ("3", 3), ("+3", 3), ("007", 7)],
)
def test_expected_version_for_publish(value: str | None, expected: int | None) -> None:
    assert metadata.parse_expected_version(value, append=False) == expected


@pytest.mark.parametrize("value", ["-1", "x", "1.0", " 1", "1_0", "99999999999999999999"])
def test_bad_expected_version_for_publish(value: str) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        metadata.parse_expected_version(value, append=False)
    assert str(caught.value) == "invalid expected-version"


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("+2", 2), ("02", 2)])
def test_expected_version_for_append(value: str, expected: int) -> None:
    assert metadata.parse_expected_version(value, append=True) == expected


@pytest.mark.parametrize("value", [None, ""])
def test_append_requires_expected_version(value: str | None) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        metadata.parse_expected_version(value, append=True)
    assert str(caught.value) == "APPEND requires expected-version metadata"


@pytest.mark.parametrize("value", ["0", "-1", "x", " 1"])
def test_bad_expected_version_for_append(value: str) -> None:
    with pytest.raises(InvalidMetadata) as caught:
        metadata.parse_expected_version(value, append=True)
    assert str(caught.value) == "invalid expected-version for APPEND (must be >= 1)"


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("abc", '"abc"'),
        ("", '""'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("a\nb\tc\rd", '"a\\nb\\tc\\rd"'),
        ("\x00\x1b\x7f", '"\\x00\\x1b\\x7f"'),
        ("é€", '"é€"'),
        ("\u00a0\u200b", '"\\u00a0\\u200b"'),
        ("\U000e0001", '"\\U000e0001"'),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert metadata.go_quote(text) == quoted


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_an_importance_passes_the_client_check_exactly_when_the_server_reads_it_as_written(
    number: float,
) -> None:
    text = repr(number)
    inside = 0.0 <= number <= 1.0
    if inside:
        metadata.validate_interpreted({"importance": text})
        assert metadata.parse_importance(text) == number
    else:
        with pytest.raises(InvalidMetadata, match="importance must be a number from 0 to 1"):
            metadata.validate_interpreted({"importance": text})


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"importance": "high"}, 'importance must be a number from 0 to 1, got "high"'),
        ({"importance": ""}, "importance must be a number from 0 to 1"),
        ({"retention": "0"}, 'retention must be a positive integer, got "0"'),
        ({"retention": "two"}, "retention must be a positive integer"),
    ],
)
def test_interpreted_values_that_would_be_misread_are_refused(
    meta: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidMetadata, match=re.escape(message)):
        metadata.validate_interpreted(meta)


def test_interpreted_values_read_as_written_pass() -> None:
    metadata.validate_interpreted({"importance": " 0.8 ", "retention": "3", "tags": "a,b"})
    metadata.validate_interpreted({"importance": "1", "type": "anything"})


def test_equal_short_metadata_is_one_dict_across_documents() -> None:
    """A vault's notes mostly carry the same few short keys and values: each holds the one
    dict, equal to what it was given; a long value keeps a dict of its own."""
    first = metadata.shared({"type": "Document", "tags": "project,area3"})
    again = metadata.shared(
        {"".join(["ty", "pe"]): "".join(["Docu", "ment"]), "tags": "project,area3"}
    )
    assert again is first and again == {"type": "Document", "tags": "project,area3"}
    title = {"type": "Document", "title": "A title longer than sixteen runes"}
    assert metadata.shared(title) == title and metadata.shared(title) is not metadata.shared(title)
    assert metadata.shared({"tags": "a,b"}) is not first  # other keys, another dict


def test_sharing_unique_metadata_keeps_a_bounded_table() -> None:
    """Every document's metadata different (a date each): the table of shared dicts starts
    over when full, so what it keeps once the documents are gone stays under its bound."""
    metadata.shared({"warm": "up"})
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for day in range(20 * metadata.SHARED_DICTS):
            metadata.shared({"type": "Note", "date": f"d{day}"})
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < metadata.SHARED_DICTS * 1024
