"""The stored version file, checked against the etags and hashes in the reference's goldens."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import metadata, storefmt
from markproto.protocol.errors import ProtocolError, StoreFormatError

META = {"importance": "0.7", "tags": "alpha,wire", "type": "Note"}
V1_BODY = b"# Alpha\n\nFirst body.\n"
V2_BODY = b"# Alpha\n\nSecond body.\n\n## Details\n\nSee [beta](b.md).\n"
V3_BODY = V2_BODY + b"\n## Appended\n\nMore.\n"

# From fetch-version.golden, fetch.golden and SPEC §7.2.
V1_ETAG = "94e05cf0cc64c6e22e485312b29407d06ab5a85989f6b2ce566638405b4ad0ee"
V1_CONTENT = "sha256-534b0f02677fcd121e7c4be275e533709b0788060ccf2da54950441c698c527a"
V2_REF = "sha256-ced1c087a076403ee1ce2c039ade8e6e8f4eca52196852530f6280b76622ba84"
V3_ETAG = "693067c46c892c9ff8b035c8b3848fb3a8b74a1f5787f5bc960688ce678573dd"
V3_CONTENT = "sha256-050018a246d303b7fd8806eb84e88535b6cc8510e829715f87b7337158e05919"
HASH = b"sha256-" + b"a" * 64


def chain() -> list[bytes]:
    v1 = storefmt.emit_version(1, None, META, V1_BODY)
    v2 = storefmt.emit_version(2, storefmt.hash_ref(v1), META, V2_BODY)
    v3 = storefmt.emit_version(3, storefmt.hash_ref(v2), META, V3_BODY)
    return [v1, v2, v3]


def test_v1_bytes_are_the_reference_layout() -> None:
    v1 = chain()[0]
    assert v1 == (
        b"---\nversion: 1\narchived: false\nmeta.importance: 0.7\ntags: [alpha, wire]\n"
        b"type: Note\n---\n# Alpha\n\nFirst body.\n"
    )


def test_etags_and_content_hashes_match_the_goldens() -> None:
    v1, v2, v3 = chain()
    assert storefmt.etag(v1) == V1_ETAG
    assert storefmt.content_hash(V1_BODY) == V1_CONTENT
    assert storefmt.hash_ref(v2) == V2_REF
    assert storefmt.etag(v3) == V3_ETAG
    assert storefmt.content_hash(V3_BODY) == V3_CONTENT


def test_parse_reads_back_what_emit_wrote() -> None:
    v3 = storefmt.parse_version(chain()[2])
    assert v3 == storefmt.VersionFile(3, False, V2_REF, META, V3_BODY)


def test_chain_valid_and_broken() -> None:
    v1, v2, v3 = chain()
    assert storefmt.chain_valid([v1, v2, v3])
    assert storefmt.chain_valid([v2, v3])  # survivors of retention: the oldest link is unchecked
    assert storefmt.chain_valid([v3])
    assert storefmt.chain_valid([])
    assert not storefmt.chain_valid([v1, v3])  # a gap
    tampered = v1.replace(b"First", b"Forged")
    assert not storefmt.chain_valid([tampered, v2, v3])
    assert not storefmt.chain_valid([v1, b"garbage", v3])


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"version: 1\n", "no opening fence"),
        (b"---\nversion: 1\narchived: false\n", "unclosed"),
        (b"---\nversion: 1\narchived: false\n---", "EOF close form is refused"),
        (b"---\nversion: 01\narchived: false\n---\n", "non-canonical version"),
        (b"---\nversion: 0\narchived: false\n---\n", "version 0"),
        (b"---\nversion: 1\narchived: maybe\n---\n", "bad archived"),
        (b"---\narchived: false\nversion: 1\n---\n", "wrong order"),
        (b"---\nversion: 2\narchived: false\n---\n", "missing previous-hash"),
        (b"---\nversion: 1\narchived: false\nprevious-hash: " + HASH + b"\n---\n", "v1"),
        (b"---\nversion: 2\narchived: false\nprevious-hash: " + HASH.upper() + b"\n---\n", "case"),
        (b"---\nversion: 1\narchived: false\ntype: a\ntitle: b\n---\n", "keys out of order"),
        (b"---\nversion: 1\narchived: false\ntype: a\ntype: b\n---\n", "duplicate key"),
        (b"---\nversion: 1\narchived: false\nauthor: x\n---\n", "unknown bare key"),
        (b"---\nversion: 1\narchived: false\nmeta.type: x\ntype: y\n---\n", "OKF key twice"),
        (b"---\nversion: 1\narchived: false\nmeta.version: x\n---\n", "store-reserved key"),
        (b"---\nversion: 1\narchived: false\ntags: a, b\n---\n", "tags not in brackets"),
        (b"---\nversion: 1\narchived: false\nno separator\n---\n", "not key: value"),
        (b"---\nversion: 1\narchived: false\nmeta.x: " + b"y" * 2100 + b"\n---\n", "too big"),
    ],
)
def test_strict_grammar_refuses(data: bytes, why: str) -> None:
    with pytest.raises(StoreFormatError):
        storefmt.parse_version(data)


def test_strict_grammar_takes_the_meta_prefixed_okf_keys_of_earlier_releases() -> None:
    data = b"---\nversion: 1\narchived: false\nmeta.tags: [go]\nmeta.type: Note\n---\nbody"
    parsed = storefmt.parse_version(data)
    assert parsed.meta == {"tags": "go", "type": "Note"}
    assert storefmt.chain_valid([data], [1])
    assert not storefmt.chain_valid([data], [2])  # the file says v1, its name v2


def test_archived_true_is_read() -> None:
    parsed = storefmt.parse_version(b"---\nversion: 1\narchived: true\n---\nbody")
    assert parsed.archived
    assert parsed.body == b"body"


keys = st.from_regex(r"[a-z0-9][a-z0-9-]{0,15}", fullmatch=True).filter(
    lambda k: k not in {"version", "previous-hash", "archived"}
)
values = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n,"), max_size=30
).map(str.strip)


@settings(max_examples=200)
@given(
    number=st.integers(1, 10**6),
    meta=st.dictionaries(keys, values.filter(bool), max_size=8),
    body=st.binary(max_size=200),
)
def test_round_trip(number: int, meta: dict[str, str], body: bytes) -> None:
    previous = None if number == 1 else "sha256-" + "0" * 64
    data = storefmt.emit_version(number, previous, meta, body)
    parsed = storefmt.parse_version(data)
    assert parsed == storefmt.VersionFile(number, False, previous, meta, body)


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_store_format_errors(data: bytes) -> None:
    try:
        storefmt.parse_version(b"---\nversion: 1\narchived: false\n" + data)
        storefmt.parse_version(data)
    except ProtocolError:
        pass


# -- liberal reading: every shape an earlier reference release wrote --------------------------

PRE_ARCHIVE_V1 = b"---\nversion: 1\n---\n# Welcome\n"
"""Before the archive verb: no archived line (also what a migrated flat file's v1 looked like)."""
MARCH_V2 = (
    b"---\nversion: 2\narchived: false\nprevious-hash: "
    + storefmt.hash_ref(PRE_ARCHIVE_V1).encode()
    + b"\nmeta.importance: 0.9\nmeta.tags: go, auth\nmeta.type: Note\n---\nSecond.\n"
)
"""March: every publisher key behind ``meta.``, values raw (tags unbracketed)."""
OKF_PREFIXED = b"---\nversion: 1\narchived: false\nmeta.tags: [go]\nmeta.type: Note\n---\nx"


@pytest.mark.parametrize(
    ("data", "number", "meta", "archived", "body"),
    [
        (PRE_ARCHIVE_V1, 1, {}, False, b"# Welcome\n"),
        (
            MARCH_V2,
            2,
            {"importance": "0.9", "tags": "go,auth", "type": "Note"},
            False,
            b"Second.\n",
        ),
        (OKF_PREFIXED, 1, {"tags": "go", "type": "Note"}, False, b"x"),
        (b"---\nversion: 1\narchived: true\n---\ngone", 1, {}, True, b"gone"),
        (b"---\nversion: 3\n---\nno chain", 3, {}, False, b"no chain"),  # the demo site's v2
        (b"---\n---\nempty block", 1, {}, False, b"empty block"),
        (b"plain markdown\n", 1, {}, False, b"plain markdown\n"),  # no store frontmatter
        (b"---\nunclosed\n", 1, {}, False, b"---\nunclosed\n"),
    ],
)
def test_legacy_shapes_are_read(
    data: bytes, number: int, meta: dict[str, str], archived: bool, body: bytes
) -> None:
    parsed, _ = storefmt.read_version(data, number)
    assert (parsed.version, parsed.meta, parsed.archived, parsed.body) == (
        number,
        meta,
        archived,
        body,
    )


def test_what_the_strict_grammar_writes_reads_the_same_liberally() -> None:
    for number, data in enumerate(chain(), 1):
        parsed, notes = storefmt.read_version(data, number)
        assert parsed == storefmt.parse_version(data)
        assert notes == []


def test_lines_not_understood_are_ignored_and_noted() -> None:
    data = (
        b"---\nversion: 1\narchived: false\nevil: value\nno separator\ntype: Note\n"
        b"meta.archived: true\nmeta.status: forged\nmeta.Bad: x\nmeta.z: last\nmeta.a: first\n"
        b"previous-hash: nope\n---\nbody"
    )
    parsed, notes = storefmt.read_version(data, 1)
    assert parsed.meta == {"type": "Note", "z": "last", "a": "first"}
    assert not parsed.archived  # a store key behind meta. never sets store state
    assert parsed.previous_hash is None
    assert len(notes) == 6
    assert notes[0] == "line 3 'evil: value': unknown key, ignored"
    assert "is reserved" in notes[3]
    assert "invalid characters" in notes[4]


def test_a_version_line_that_disagrees_with_the_file_name_is_noted() -> None:
    parsed, notes = storefmt.read_version(b"---\nversion: 2\n---\nx", 5)
    assert parsed.version == 5
    assert notes == ["line 1 'version: 2': says version '2' in file v5, ignored"]


def test_legacy_chains_get_the_reference_verdict() -> None:
    assert storefmt.chain_valid([PRE_ARCHIVE_V1, MARCH_V2], [1, 2]) is False  # v1 is not strict
    v1 = b"---\nversion: 1\narchived: false\nmeta.tags: go\n---\none"
    v2 = (
        b"---\nversion: 2\narchived: false\nprevious-hash: "
        + storefmt.hash_ref(v1).encode()
        + b"\nmeta.tags: go\nmeta.type: Note\n---\ntwo"
    )
    assert storefmt.chain_valid([v1, v2], [1, 2])


def test_oversized_files_are_refused_even_liberally() -> None:
    with pytest.raises(StoreFormatError):
        storefmt.read_version(b"---\n---\n" + b"x" * (1 << 21), 1)


@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(1, 100))
def test_liberal_reading_never_raises_and_keeps_valid_metadata(data: bytes, number: int) -> None:
    for candidate in (data, b"---\n" + data, b"---\nversion: 1\n" + data + b"\n---\n"):
        parsed, _ = storefmt.read_version(candidate, number)
        assert parsed.version == number
        assert all(metadata.pair_refusal(k, v) is None for k, v in parsed.meta.items())
