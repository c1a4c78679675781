"""Token grants: hashing, Go path.Match patterns with `**`, decision order, read auth, loading."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from markproto.protocol.errors import InvalidPattern
from markproto.protocol.grants import (
    Decision,
    Grant,
    Grants,
    InvalidGrant,
    grant_from_entry,
    hash_token,
    match_pattern,
)
from markproto.protocol.limits import MANIFEST_PATH

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
WRITER, READER, OLD = "write-secret", "read-secret", "old-secret"


def grant(label: str, raw: str, paths: tuple[str, ...], ops: set[str], **kw: datetime) -> Grant:
    return Grant(label, hash_token(raw), paths, frozenset(ops), kw.get("expires"))


def three_grants() -> Grants:
    return Grants(
        [
            grant("reader", READER, ("/private/**", "/team/"), {"read"}),
            grant("writer", WRITER, ("/docs/*", "/notes/**"), {"publish"}),
            grant("old", OLD, ("/**",), {"publish"}, expires=NOW),
        ]
    )


@pytest.fixture
def grants() -> Grants:
    return three_grants()


def test_hash_token() -> None:
    assert hash_token("storetest-write-token") == (
        "sha256-d303ac20bae997a124b4c11a7965c058deb699024dc2a62de2ddf2de56fa3e93"
    )
    assert hash_token("") == (
        "sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("/docs/a.md", "/docs/a.md", True),
        ("/docs/a.md", "/docs/b.md", False),
        ("/*", "/a.md", True),
        ("/*", "/docs/a.md", False),
        ("/*", "/", True),
        ("/docs/*", "/docs/a.md", True),
        ("/docs/*", "/docs/sub/a.md", False),
        ("/docs/*", "/docs", False),
        ("/docs/*.md", "/docs/a.md", True),
        ("/docs/*.md", "/docs/a.txt", False),
        ("/d?cs/*", "/docs/a", True),
        ("/d?cs/*", "/d/cs/a", False),
        ("/docs/[ab].md", "/docs/b.md", True),
        ("/docs/[ab].md", "/docs/c.md", False),
        ("/docs/[a-c].md", "/docs/c.md", True),
        ("/docs/[^a-c].md", "/docs/c.md", False),
        ("/docs/[^a-c].md", "/docs/d.md", True),
        ("/docs/[!a].md", "/docs/!.md", True),
        ("/docs/\\*.md", "/docs/*.md", True),
        ("/docs/\\*.md", "/docs/a.md", False),
        ("/docs/[\\]].md", "/docs/].md", True),
        ("/docs/é?.md", "/docs/éü.md", True),
        ("/**", "/", True),
        ("/**", "/a.md", True),
        ("/**", "/a/b/c/d.md", True),
        ("/docs/**", "/docs/a.md", True),
        ("/docs/**", "/docs/sub/deep/a.md", True),
        ("/docs/**", "/docs", False),
        ("/docs/**", "/docsx/a.md", False),
        ("/docs/*/**", "/docs/sub/a.md", False),  # text before /** is literal
        ("/docs/*/**", "/docs/*/a.md", True),
        ("/docs/**/x.md", "/docs/x.md", True),
        ("/docs/**/x.md", "/docs/a/x.md", True),
        ("/docs/**/x.md", "/docs/a/b/x.md", True),
        ("/docs/**/x.md", "/docs/a/y.md", False),
        ("/docs/**/x.md", "/docs/ax.md", False),
        ("/docs/**/x.md", "/other/a/x.md", False),
        ("/docs/**/sub/*.md", "/docs/a/sub/x.md", True),
        ("/docs/**/sub/*.md", "/docs/sub/x.md", True),
        ("/docs/**/sub/*.md", "/docs/a/sub/b/x.md", False),
        ("/**/index.md", "/index.md", True),
        ("/**/index.md", "/a/b/index.md", True),
        ("/team/", "/team", True),
        ("/team/", "/team/", True),
        ("/team/", "/team/a.md", False),
        ("/team/", "/teamx", False),
        ("/team/*", "/team", False),
        ("", "", True),
        ("", "/", False),
    ],
)
def test_match_pattern(pattern: str, path: str, expected: bool) -> None:
    assert match_pattern(pattern, path) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # A class may match "/" in Go's path.Match, unlike * and ?.
        ("/a[/]b", "/a/b", True),
        ("/a[^x]b", "/a/b", True),
        # Each chunk takes its first fit, with no backtracking (a regex would say True).
        ("/*[/x]*y", "/x/y", False),
        # A star skips bytes, so a chunk can start inside a multi-byte character.
        ("/*[^é]", "/é", True),
        ("*??", "€", True),
        # The reference checks syntax with ** read as a name, so a class may span it.
        ("/a[/**/x]", "/a[/q/x]", True),
        ("/[a/**/[]", "/[a/b/[]", False),
    ],
)
def test_go_quirks_are_kept(pattern: str, path: str, expected: bool) -> None:
    assert match_pattern(pattern, path) is expected


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("/a/**/b/**", "only one \\*\\* wildcard"),
        ("/**/**", "only one \\*\\* wildcard"),
        ("**", "must be delimited by slashes"),
        ("/a**", "must be delimited by slashes"),
        ("/**b", "must be delimited by slashes"),
        ("**/a", "must be delimited by slashes"),
        ("/***", "must be delimited by slashes"),
        ("/a/**x/b", "must be delimited by slashes"),
        ("/docs/[", "syntax error"),
        ("/docs/[a", "syntax error"),
        ("/docs/[]", "syntax error"),
        ("/docs/[a-]", "syntax error"),
        ("/docs/[-a]", "syntax error"),
        ("/docs/a\\", "syntax error"),
        ("/docs/[\\", "syntax error"),
        ("/docs/**/[x", "syntax error"),
        ("/[x/**", "syntax error"),
    ],
)
def test_invalid_patterns(pattern: str, message: str) -> None:
    with pytest.raises(InvalidPattern, match=message):
        match_pattern(pattern, "/docs/a.md")


PATTERN_TOKENS = st.sampled_from(["a", "b", "/", "*", "?", ".", "-"])
NAME_TOKENS = st.sampled_from(["a", "b", "/", ".", "-"])


def _oracle(pattern: str) -> re.Pattern[str]:
    """Without classes or escapes, path.Match is a regex where * and ? stop at /."""
    parts = {"*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(parts.get(ch, re.escape(ch)) for ch in pattern))


@settings(max_examples=500)
@given(st.lists(PATTERN_TOKENS, max_size=8).map("".join), st.lists(NAME_TOKENS, max_size=8))
def test_simple_globs_agree_with_a_regex(pattern: str, name_tokens: list[str]) -> None:
    assume("**" not in pattern)
    name = "".join(name_tokens)
    regex = _oracle(pattern)
    expected = bool(regex.fullmatch(name)) or (
        pattern.endswith("/") and bool(regex.fullmatch(name + "/"))
    )
    assert match_pattern(pattern, name) is expected


GLOB_PIECES = st.sampled_from(
    ["/", "a", "é", "*", "?", "[a-z]", "[^/]", "[\\]]", "\\*", "/**", "/**/", "[", "]", "\\", "-"]
)


@settings(max_examples=500)
@given(st.lists(GLOB_PIECES, max_size=6).map("".join), st.text(max_size=20))
def test_matching_never_raises_for_valid_patterns(pattern: str, path: str) -> None:
    try:
        match_pattern(pattern, "/")
    except InvalidPattern:
        return
    assert match_pattern(pattern, path) in (True, False)
    assert match_pattern(pattern, "/" + path) in (True, False)


def test_decision_wire_forms() -> None:
    assert (Decision.ALLOW.status, Decision.ALLOW.message) == ("ok", "")
    for refusal in (Decision.NO_TOKEN, Decision.INVALID_TOKEN, Decision.EXPIRED):
        assert (refusal.status, refusal.message) == ("unauthorized", "authentication required")
    assert Decision.NOT_PERMITTED.status == "not-permitted"
    assert Decision.NOT_PERMITTED.message == "insufficient permissions"


@pytest.mark.parametrize(
    ("token", "path", "op", "now", "expected"),
    [
        ("", "/docs/a.md", "publish", NOW, Decision.NO_TOKEN),
        ("nope", "/docs/a.md", "publish", NOW, Decision.INVALID_TOKEN),
        (WRITER, "/docs/a.md", "publish", NOW, Decision.ALLOW),
        (WRITER, "/notes/x/y.md", "publish", NOW, Decision.ALLOW),
        (WRITER, "/docs/sub/a.md", "publish", NOW, Decision.NOT_PERMITTED),
        (WRITER, "/docs/a.md", "read", NOW, Decision.NOT_PERMITTED),
        (WRITER, "/elsewhere.md", "archive", NOW, Decision.NOT_PERMITTED),
        (OLD, "/docs/a.md", "publish", NOW, Decision.ALLOW),  # expiry is strictly after
        (OLD, "/docs/a.md", "publish", NOW + timedelta(microseconds=1), Decision.EXPIRED),
        # Expiry is checked before the operation and the path.
        (OLD, "/docs/a.md", "nothing", NOW + timedelta(days=1), Decision.EXPIRED),
        (hash_token(WRITER), "/docs/a.md", "publish", NOW, Decision.INVALID_TOKEN),
    ],
)
def test_authorize_order(
    grants: Grants, token: str, path: str, op: str, now: datetime, expected: Decision
) -> None:
    assert grants.authorize(token, path, op, now) is expected


def test_expiry_compares_instants_across_offsets(grants: Grants) -> None:
    later_clock = NOW.astimezone(timezone(timedelta(hours=5)))
    assert grants.authorize(OLD, "/a.md", "publish", later_clock) is Decision.ALLOW


@pytest.mark.parametrize(
    ("token", "path", "expected"),
    [
        ("", "/docs/a.md", Decision.ALLOW),
        ("nope", "/docs/a.md", Decision.ALLOW),
        ("", "/private/a.md", Decision.NO_TOKEN),
        ("nope", "/private/a.md", Decision.INVALID_TOKEN),
        (WRITER, "/private/a.md", Decision.NOT_PERMITTED),
        (READER, "/private/a.md", Decision.ALLOW),
        (READER, "/team", Decision.ALLOW),
        ("", "/team", Decision.NO_TOKEN),
        ("", "/team/", Decision.NO_TOKEN),
        ("", "/private", Decision.ALLOW),
        ("", MANIFEST_PATH, Decision.ALLOW),
        (WRITER, MANIFEST_PATH, Decision.ALLOW),
    ],
)
def test_authorize_read_like_the_reference(
    grants: Grants, token: str, path: str, expected: Decision
) -> None:
    assert grants.authorize_read(token, path, NOW) is expected


def test_expired_read_grants_still_protect() -> None:
    grants = Grants([grant("old", OLD, ("/**",), {"read"}, expires=NOW)])
    later = NOW + timedelta(days=1)
    assert grants.is_protected("/docs/a.md")
    assert grants.authorize_read("", "/docs/a.md", later) is Decision.NO_TOKEN
    assert grants.authorize_read(OLD, "/docs/a.md", later) is Decision.EXPIRED
    assert not grants.is_protected(MANIFEST_PATH)
    assert grants.authorize_read("", MANIFEST_PATH, later) is Decision.ALLOW


def test_no_read_grants_means_everything_is_public() -> None:
    only_writers = Grants([grant("w", WRITER, ("/**",), {"publish"})])
    assert not only_writers.is_protected("/anything.md")
    assert only_writers.authorize_read("bogus", "/anything.md", NOW) is Decision.ALLOW
    empty = Grants([])
    assert len(empty) == 0
    assert empty.authorize_read("", "/a.md", NOW) is Decision.ALLOW
    assert empty.authorize("x", "/a.md", "publish", NOW) is Decision.INVALID_TOKEN


def test_duplicate_hashes_are_refused() -> None:
    with pytest.raises(InvalidGrant, match="tokens 'a' and 'b' have the same hash"):
        Grants([grant("a", WRITER, (), {"read"}), grant("b", WRITER, (), {"publish"})])


def test_bad_pattern_names_the_token() -> None:
    with pytest.raises(InvalidPattern, match="token 'bad': '/a\\*\\*'"):
        Grants([grant("bad", WRITER, ("/a**",), {"read"})])


def test_naive_expiry_is_refused() -> None:
    with pytest.raises(InvalidGrant, match="expires needs a UTC offset"):
        Grants([grant("n", WRITER, (), {"read"}, expires=datetime(2026, 1, 1))])


HASH = hash_token(WRITER)


def test_grant_from_entry() -> None:
    entry = {
        "hash": HASH,
        "paths": ["/docs/*", "/notes/**"],
        "operations": ["read", "publish"],
        "expires": "2026-12-31T23:59:59Z",
    }
    expected = Grant(
        "ci",
        HASH,
        ("/docs/*", "/notes/**"),
        frozenset({"read", "publish"}),
        datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC),
    )
    assert grant_from_entry("ci", entry) == expected


def test_grant_from_entry_defaults() -> None:
    assert grant_from_entry("x", {"hash": HASH}) == Grant("x", HASH, (), frozenset(), None)
    assert grant_from_entry("x", {"hash": HASH, "expires": ""}).expires is None


@pytest.mark.parametrize(
    ("expires", "expected"),
    [
        ("2026-12-31T23:59:59+02:00", datetime(2026, 12, 31, 21, 59, 59, tzinfo=UTC)),
        ("2026-12-31T23:59:59-00:30", datetime(2027, 1, 1, 0, 29, 59, tzinfo=UTC)),
        ("2026-12-31T23:59:59.5Z", datetime(2026, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)),
        ("2026-12-31T23:59:59.123456789Z", datetime(2026, 12, 31, 23, 59, 59, 123456, tzinfo=UTC)),
        # Go's time.Parse takes these too (tests/protocol/test_times.py)
        ("2026-12-31T23:59:59,5Z", datetime(2026, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)),
        ("2026-12-31T23:59:59+24:00", datetime(2026, 12, 30, 23, 59, 59, tzinfo=UTC)),
        ("2026-12-31T23:59:59+02:60", datetime(2026, 12, 31, 20, 59, 59, tzinfo=UTC)),
        (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)),
    ],
)
def test_expires_forms(expires: object, expected: datetime) -> None:
    assert grant_from_entry("x", {"hash": HASH, "expires": expires}).expires == expected


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({}, "token 'x': hash must be"),
        ({"hash": ""}, "token 'x': hash must be"),
        ({"hash": HASH.upper()}, "token 'x': hash must be"),
        ({"hash": HASH.removeprefix("sha256-")}, "token 'x': hash must be"),
        ({"hash": HASH[:-1]}, "token 'x': hash must be"),
        ({"hash": 7}, "token 'x': hash must be"),
        ({"hash": HASH, "path": ["/**"]}, "token 'x': unknown key 'path'"),
        ({"hash": HASH, "paths": "/**"}, "token 'x': paths must be a list of strings"),
        ({"hash": HASH, "paths": ["/a", 1]}, "token 'x': paths must be a list of strings"),
        ({"hash": HASH, "operations": "read"}, "token 'x': operations must be a list of strings"),
        ({"hash": HASH, "paths": ["/a/**b"]}, "token 'x': '/a/\\*\\*b': \\*\\* must be delimited"),
        ({"hash": HASH, "paths": ["/[a"]}, "token 'x': '/\\[a': syntax error"),
        ({"hash": HASH, "expires": "2026-12-31"}, "token 'x': expires '2026-12-31' is not"),
        ({"hash": HASH, "expires": "2026-12-31T23:59:59"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": "2026-12-31 23:59:59Z"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": "2026-12-31t23:59:59z"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": "2026-13-01T00:00:00Z"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": "2026-12-31T24:00:00Z"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": "2026-12-31T23:59:60Z"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": "2026-12-31T23:59:59+25:00"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": "2026-12-31T23:59:59+02:61"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": "2026-12-31T23:59:59.Z"}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": 1767225599}, "is not an RFC 3339 time"),
        ({"hash": HASH, "expires": datetime(2026, 1, 1)}, "expires needs a UTC offset"),
    ],
)
def test_grant_from_entry_refusals(entry: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidGrant, match=message) as caught:
        grant_from_entry("x", entry)
    assert isinstance(caught.value, ValueError)


@given(
    token=st.sampled_from(["", "nobody", READER, WRITER, OLD]),
    path=st.sampled_from(["/docs/a.md", "/notes/x/y.md", "/private/s.md", "/other.md"]),
    op=st.sampled_from(["read", "publish"]),
    later=st.booleans(),
)
def test_a_refusal_names_the_check_that_failed(token: str, path: str, op: str, later: bool) -> None:
    """The logged reason agrees with ``authorize`` in every case, and never holds the token."""
    grants = three_grants()
    now = NOW + timedelta(seconds=1) if later else NOW
    decision = grants.authorize(token, path, op, now)
    reason, label = grants.refusal(token, path, op, now)
    expected = {
        Decision.ALLOW: {""},
        Decision.NO_TOKEN: {"no token"},
        Decision.INVALID_TOKEN: {"unknown token"},
        Decision.EXPIRED: {"expired"},
        Decision.NOT_PERMITTED: {"wrong operation", "wrong path"},
    }[decision]
    assert reason in expected
    if decision in (Decision.NO_TOKEN, Decision.INVALID_TOKEN):
        assert label == ""
    assert token == "" or token not in reason + label


def test_refusal_reasons(grants: Grants) -> None:
    later = NOW + timedelta(seconds=1)
    assert grants.refusal("nobody", "/docs/a.md", "publish", NOW) == ("unknown token", "")
    assert grants.refusal(OLD, "/docs/a.md", "publish", later) == ("expired", "old")
    assert grants.refusal(READER, "/private/a.md", "publish", NOW) == ("wrong operation", "reader")
    assert grants.refusal(WRITER, "/other.md", "publish", NOW) == ("wrong path", "writer")
