"""Path rules: Go path.Clean, `..`, hash and version paths, scopes, writability, Go Atoi."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import paths

SEGMENT_CHARS = st.sampled_from(["a", "b", ".", "/", "..", "v1", "é", " "])
RAW_PATHS = st.lists(SEGMENT_CHARS, max_size=12).map("".join) | st.text(max_size=40)
HEX64 = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("3", 3),
        ("+3", 3),
        ("-3", -3),
        ("03", 3),
        ("-0", 0),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775808", None),
        ("", None),
        ("+", None),
        ("-", None),
        ("1_000", None),
        (" 3", None),
        ("3 ", None),
        ("3\n", None),
        ("٣", None),
        ("0x10", None),
        ("1e3", None),
        ("++3", None),
    ],
)
def test_atoi_follows_go(text: str, expected: int | None) -> None:
    assert paths.atoi(text) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/docs/../a.md", True),
        ("/..", True),
        ("..", True),
        ("/a/..", True),
        ("/a/../", True),
        ("/a/..b", False),
        ("/a/b..", False),
        ("/a/.../b", False),
        ("/a/./b", False),
        ("/a..", False),
        ("/docs/a.md", False),
    ],
)
def test_has_dotdot_looks_at_whole_segments(raw: str, expected: bool) -> None:
    assert paths.has_dotdot(raw) is expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", "/"),
        ("/", "/"),
        ("//", "/"),
        ("/docs/", "/docs"),
        ("docs", "/docs"),
        ("/docs//a.md", "/docs/a.md"),
        ("/./docs/./a.md", "/docs/a.md"),
        ("/docs/sub/../a.md", "/docs/a.md"),
        ("/../a", "/a"),
        ("/a/b/../../..", "/"),
        ("/a/../../b/./c/", "/b/c"),
        ("/.", "/"),
        ("/...", "/..."),
        ("/a/.b/", "/a/.b"),
        ("/docs/sub/c d.md", "/docs/sub/c d.md"),
    ],
)
def test_clean_matches_go_path_clean(raw: str, expected: str) -> None:
    assert paths.clean(raw) == expected


@settings(max_examples=300)
@given(RAW_PATHS)
def test_clean_is_idempotent_and_rooted(raw: str) -> None:
    once = paths.clean(raw)
    assert once.startswith("/")
    assert paths.clean(once) == once
    assert once == "/" or not once.endswith("/")
    assert "//" not in once
    assert not paths.has_dotdot(once)
    assert "." not in once.split("/")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/sha256-" + HEX64, True),
        ("sha256-" + HEX64, True),
        ("/sha256-" + HEX64.upper(), False),
        ("/sha256-" + HEX64[:-1], False),
        ("/sha256-" + HEX64 + "0", False),
        ("/sha256-" + HEX64[:-1] + "g", False),
        ("//sha256-" + HEX64, False),
        ("/SHA256-" + HEX64, False),
        ("/docs/sha256-" + HEX64, False),
        ("/sha256-", False),
    ],
)
def test_is_hash_path(path: str, expected: bool) -> None:
    assert paths.is_hash_path(path) is expected


def test_hash_of_drops_the_leading_slash() -> None:
    assert paths.hash_of("/sha256-" + HEX64) == "sha256-" + HEX64
    assert paths.hash_of("sha256-" + HEX64) == "sha256-" + HEX64


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/docs/a.md/v3", ("/docs/a.md", 3)),
        ("/docs/a.md/v+3", ("/docs/a.md", 3)),
        ("/docs/a.md/v03", ("/docs/a.md", 3)),
        ("/a.md/v1", ("/a.md", 1)),
        ("/api/v2", ("/api", 2)),
        ("/a.md/v0", None),
        ("/a.md/v-1", None),
        ("/a.md/v", None),
        ("/a.md/v+", None),
        ("/a.md/V3", None),
        ("/a.md/v3x", None),
        ("/a.md/v 3", None),
        ("/a.md/v1_0", None),
        ("/a.md/v99999999999999999999", None),
        ("/v3", None),
        ("/", None),
        ("/a.md", None),
    ],
)
def test_split_version(path: str, expected: tuple[str, int] | None) -> None:
    assert paths.split_version(path) == expected


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("", "/"),
        ("/", "/"),
        ("//", "/"),
        ("docs", "/docs"),
        ("/docs/", "/docs"),
        ("/a/b//", "/a/b"),
    ],
)
def test_normalize_scope(scope: str, expected: str) -> None:
    assert paths.normalize_scope(scope) == expected


@pytest.mark.parametrize(
    ("path", "scope", "expected"),
    [
        ("/docs/a.md", "/", True),
        ("/docs/a.md", "/docs", True),
        ("/docs", "/docs", True),
        ("/docs/sub/c.md", "/docs", True),
        ("/other/x.md", "/oth", False),
        ("/docsx/a.md", "/docs", False),
        ("/a.md", "/docs", False),
    ],
)
def test_in_scope(path: str, scope: str, expected: bool) -> None:
    assert paths.in_scope(path, scope) is expected


@pytest.mark.parametrize(
    ("path", "parent", "base"),
    [
        ("/docs/a.md", "/docs", "a.md"),
        ("/a.md", "/", "a.md"),
        ("/", "/", "/"),
        ("/docs/sub/", "/docs/sub", "sub"),
        ("/x/y/z", "/x/y", "z"),
    ],
)
def test_parent_and_base(path: str, parent: str, base: str) -> None:
    assert paths.parent(path) == parent
    assert paths.base(path) == base


def test_base_of_empty_is_dot_like_go() -> None:
    assert paths.base("") == "."


@pytest.mark.parametrize(
    ("dir", "name", "expected"),
    [("/docs", "a.md", "/docs/a.md"), ("/", "a.md", "/a.md"), ("/docs/", "sub", "/docs/sub")],
)
def test_join(dir: str, name: str, expected: str) -> None:
    assert paths.join(dir, name) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/a.md",
        "/docs/sub/c d.md",
        "/.well-known/agent-manifest.md",
        "/docs/versions.md",
        "/a\tb.md",
    ],
)
def test_writable_paths(path: str) -> None:
    assert paths.writable_reason(path) is None


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/", "the root is a directory"),
        ("/docs//a.md", "/docs//a.md is not a canonical path (use /docs/a.md)"),
        ("/docs/./a.md", "/docs/./a.md is not a canonical path (use /docs/a.md)"),
        ("/docs/a.md/", "/docs/a.md/ is not a canonical path (use /docs/a.md)"),
        ("docs/a.md", "docs/a.md is not a canonical path (use /docs/a.md)"),
        ("", " is not a canonical path (use /)"),
        ("/versions/a.md", 'the name "versions" is reserved for version history'),
        ("/docs/versions/a.md", 'the name "versions" is reserved for version history'),
        ("/docs/versions", 'the name "versions" is reserved for version history'),
        ("/sha256-" + HEX64, "paths matching /sha256-<hash> are reserved"),
        ("/a\nb.md", "path contains a control character"),
        ("/a\x7f.md", "path contains a control character"),
        ("/" + "é" * 128 + ".md", "path segment longer than 255 bytes"),
        ("/a" * 32 + "/x.md", "path has more than 32 segments"),
    ],
)
def test_unwritable_paths_say_why(path: str, reason: str) -> None:
    assert paths.writable_reason(path) == reason


def test_a_document_path_has_at_most_32_segments() -> None:
    assert paths.writable_reason("/a" * 31 + "/x.md") is None
    assert paths.writable_reason("/a" * 2000 + "/x.md") == "path has more than 32 segments"


def test_segment_limit_counts_bytes_not_characters() -> None:
    assert paths.writable_reason("/" + "a" * 252 + ".md") is None
    assert paths.writable_reason("/" + "a" * 253 + ".md") == "path segment longer than 255 bytes"
