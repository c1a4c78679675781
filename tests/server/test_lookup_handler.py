"""The LOOKUP verb (docs/SPEC.md §5.7) over a real store: validation in the reference's order with
its messages, the response keys, the golden bytes, and read auth filtering rows silently in both
modes, with proof that the leakage checks fail when the filter is switched off."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.exchange import seed

from markproto.protocol import paths, wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.protocol.status import Status
from markproto.server.handlers import Context
from markproto.server.handlers.lookup import handle
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content

READER = "read-secret"


GOLDEN_DOCS = [
    (
        "/docs/a.md",
        "# Alpha\n\nSecond body.\n\n## Details\n\nSee [beta](b.md).\n\n## Appended\n\nMore.\n",
        {"importance": "0.7", "tags": "alpha, wire", "type": "Note"},
    ),
    ("/docs/b.md", "# Beta | piped\n\nBody of beta.\n", {"importance": "0.4", "tags": "beta"}),
    ("/docs/sub/c d.md", "# Gamma\n", {}),
]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Context]:
    seed(tmp_path, GOLDEN_DOCS)
    lookup = Lookup()
    content = Content.open(tmp_path, [lookup])
    yield Context(content, lookup=lookup)
    content.close()


def handled(ctx: Context, meta: Mapping[str, str], path: str = "/") -> wire.Response:
    """The LOOKUP handler itself, on the canonical path the dispatcher would give it."""
    return handle(wire.Request("LOOKUP", path, dict(meta), b""), paths.clean(path), ctx)


def refusal(response: wire.Response) -> tuple[str, str]:
    return response.status, response.body.decode().split("\n")[3]


# --- validation --------------------------------------------------------------------------------

TOO_MANY = " ".join(f"term{i}" for i in range(40))


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({}, "query must be at least 2 characters"),
        ({"query": ""}, "query must be at least 2 characters"),
        ({"query": "  a  "}, "query must be at least 2 characters"),
        ({"query": "é"}, "query must be at least 2 characters"),
        ({"query": TOO_MANY}, "query has too many terms: 33 > 32"),
        ({"query": "a", "limit": "zero"}, "query must be at least 2 characters"),
        ({"query": "go", "limit": "zero"}, "invalid limit"),
        ({"query": "go", "limit": "0"}, "invalid limit"),
        ({"query": "go", "limit": "-3"}, "invalid limit"),
        ({"query": "go", "limit": " 5"}, "invalid limit"),
        ({"query": "go", "limit": "1.5"}, "invalid limit"),
        ({"query": "go", "limit": "x", "filter": "bad"}, "invalid limit"),
        ({"query": "go", "filter": "project"}, 'malformed filter clause "project"'),
        (
            {"query": "go", "filter": "modified-after=nope", "match": "nope"},
            'filter modified-after: invalid date "nope" (want RFC 3339 or YYYY-MM-DD)',
        ),
        ({"query": "go", "match": "Body"}, 'match must be "catalog" or "body", got "Body"'),
        ({"query": "go", "match": " body"}, 'match must be "catalog" or "body", got " body"'),
    ],
)
def test_validation(served: Context, meta: dict[str, str], message: str) -> None:
    assert refusal(handled(served, meta)) == (Status.BAD_REQUEST, message)


def test_limits_on_query_terms() -> None:
    ctx = Context(None)  # type: ignore[arg-type]  # validation never reaches the content
    at_cap = " ".join(f"term{i}" for i in range(32))
    for query in (at_cap, at_cap + " " + at_cap.upper()):  # repeats collapse, any case
        assert (
            handled(ctx, {"query": query, "limit": "x"}).body.decode().endswith("invalid limit\n")
        )


def test_scope(served: Context) -> None:
    assert refusal(handled(served, {"query": "alpha"}, "/nope/")) == (
        Status.NOT_FOUND,
        "/nope not found",
    )
    assert refusal(handled(served, {"query": "alpha"}, "/docs/a.md")) == (
        Status.NOT_FOUND,
        "/docs/a.md not found",
    )
    found = handled(served, {"query": "alpha"}, "/docs/")
    assert found.status == Status.OK
    assert b'# Lookup matches for "alpha" in /docs\n' in found.body
    assert handled(served, {"query": "gamma"}, "/docs/sub").meta["matches"] == "1"


def test_response_keys(served: Context) -> None:
    assert handled(served, {"query": "alpha"}).meta == {"matches": "1"}
    assert handled(served, {"query": "alpha", "match": ""}).meta == {
        "matches": "1",
        "match": "catalog",
    }
    assert handled(served, {"query": "alpha", "match": "catalog"}).meta["match"] == "catalog"
    body = handled(served, {"query": "more", "match": "body"})
    assert body.meta == {"matches": "1", "match": "body"}
    assert b"| Path | Importance | Title | Tags | Snippet |" in body.body
    assert handled(served, {"query": "*", "match": "body"}).meta["matches"] == "0"
    assert handled(served, {"query": "*", "limit": "2"}).meta["matches"] == "2"
    assert handled(served, {"query": "*", "limit": "5000"}).meta["matches"] == "3"


@pytest.mark.parametrize(
    ("name", "meta"),
    [
        ("lookup", {"query": "alpha beta"}),
        ("lookup-body", {"match": "body", "query": "appended"}),
        ("lookup-empty", {"query": "zzznothing"}),
    ],
)
def test_golden_bytes(served: Context, golden_dir: Path, name: str, meta: dict[str, str]) -> None:
    want = (golden_dir / f"{name}.golden").read_bytes()
    assert wire.emit_response(handled(served, meta)) == want


# --- read auth: nothing of an unreadable document leaks ----------------------------------------

LEAK_DOCS = [
    ("/public/doc.md", "# Public\n\nauth in the open\n", {"tags": "auth", "importance": "0.2"}),
    (
        "/private/secret.md",
        "# Secret\n\nauth hushword inside\n",
        {"tags": "auth", "importance": "0.9"},
    ),
]


class Unfiltered(Context):
    """The same server with the read filter switched off."""

    def can_read(self, path: str, token: str) -> bool:
        return True


@pytest.fixture
def leaky(tmp_path: Path) -> Iterator[Content]:
    seed(tmp_path, LEAK_DOCS)
    content = Content.open(tmp_path, [Lookup()])
    yield content
    content.close()


def guarded(content: Content, context: type[Context] = Context) -> Context:
    grants = Grants([Grant("reader", hash_token(READER), ("/private/**",), frozenset({"read"}))])
    lookup = content.indexes[0]
    assert isinstance(lookup, Lookup)
    return context(
        content, lookup=lookup, grants=grants, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC)
    )


def assert_nothing_leaks(ctx: Context) -> None:
    for extra in ({}, {"match": "body"}):
        for query, limit in (("auth", "10"), ("auth", "1"), ("hushword", "10"), ("secret", "10")):
            response = handled(ctx, {"query": query, "limit": limit, **extra})
            assert response.status == Status.OK
            table = "\n".join(response.body.decode().split("\n")[5:])  # the rows, no echo
            for secret in ("/private", "Secret", "hushword"):
                assert secret not in table, (query, extra)
            public = "/public/doc.md" in table
            assert response.meta["matches"] == ("1" if public else "0"), (query, extra)
        scoped = handled(ctx, {"query": "auth", **extra}, "/private")
        assert scoped.status == Status.OK  # no read check on the scope itself
        assert scoped.meta["matches"] == "0"


def test_unreadable_rows_never_leak(leaky: Content) -> None:
    assert_nothing_leaks(guarded(leaky))


def test_the_leak_checks_catch_a_missing_filter(leaky: Content) -> None:
    with pytest.raises(AssertionError):
        assert_nothing_leaks(guarded(leaky, Unfiltered))


def test_a_reader_sees_everything(leaky: Content) -> None:
    ctx = guarded(leaky)
    for extra in ({}, {"match": "body"}):
        response = handled(ctx, {"query": "auth", "auth": READER, **extra})
        assert response.meta["matches"] == "2"
        assert response.body.decode().index("/private/secret.md") < response.body.decode().index(
            "/public/doc.md"
        )
    body = handled(ctx, {"query": "hushword", "match": "body", "auth": READER})
    assert "auth hushword inside" in body.body.decode()
