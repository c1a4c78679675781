"""LOOKUP ``match: links`` (docs/SPEC.md §5.9) over a real store: validation, the path checks, the
body the spec quotes, paging, the walk, read auth on both ends of every link (with proof that
the leak checks fail with the filter off), and every LOOKUP a reference client sends answered
byte for byte as before."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.exchange import seed

from markproto.protocol import bodies, paths, status, wire
from markproto.protocol.grants import Grant, Grants, hash_token
from markproto.protocol.status import Status
from markproto.server.handlers import Context
from markproto.server.handlers.lookup import handle
from markproto.server.search.service import Lookup
from markproto.server.storage.content import Content

READER = "read-secret"
SPEC_DOCS = [
    (
        "/docs/a.md",
        "# Alpha\n\nSee [beta](b.md#body) and <https://x.org>.\n\n## Two\n\n[gone](nope.md)\n",
        {"rel-supersedes": "/docs/old.md"},
    ),
    ("/docs/b.md", "# Beta\n\n## Body\n\nback to [a](/docs/a)\n", {}),
    ("/docs/old.md", "# Old\n", {}),
    ("/docs/gone.md", "# Gone\n\n[a](a.md)\n", {}),
]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Context]:
    seed(tmp_path, SPEC_DOCS)
    lookup = Lookup()
    content = Content.open(tmp_path, [lookup])
    yield Context(content, lookup=lookup)
    content.close()


def handled(ctx: Context, path: str, **keys: str) -> wire.Response:
    meta = {"match": "links", **{k.replace("_", "-"): v for k, v in keys.items()}}
    return handle(wire.Request("LOOKUP", path, meta, b""), paths.clean(path), ctx)


def refusal(response: wire.Response) -> tuple[str, str]:
    return response.status, response.body.decode().split("\n")[3]


def rows(response: wire.Response) -> list[bodies.LinkRow]:
    assert response.status == Status.OK, response
    return bodies.parse_links(response.body)[0]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"direction": "up"}, 'direction must be "incoming", "outgoing" or "both", got "up"'),
        (
            {"direction": "Both", "depth": "9"},
            'direction must be "incoming", "outgoing" or "both", got "Both"',
        ),
        (
            {"relations": "See-also"},
            status.BAD_RELATIONS,
        ),
        (
            {"relations": ",".join("r" * 33)},
            status.BAD_RELATIONS,
        ),
        ({"depth": "0"}, "depth must be an integer from 1 to 5"),
        ({"depth": "6"}, "depth must be an integer from 1 to 5"),
        ({"depth": "two"}, "depth must be an integer from 1 to 5"),
        ({"limit": "0"}, "invalid limit"),
        ({"cursor": "-1"}, "invalid links cursor"),
        ({"cursor": "next"}, "invalid links cursor"),
    ],
)
def test_validation(served: Context, keys: dict[str, str], message: str) -> None:
    assert refusal(handled(served, "/docs/a.md", **keys)) == (Status.BAD_REQUEST, message)


def test_the_path(served: Context) -> None:
    assert refusal(handled(served, "/docs/nope.md")) == (
        Status.NOT_FOUND,
        "/docs/nope.md not found",
    )
    assert refusal(handled(served, "/nowhere/")) == (Status.NOT_FOUND, "/nowhere not found")
    assert handled(served, "/docs/").status == Status.OK
    assert handled(served, "/").status == Status.OK


async def test_an_archived_document(served: Context) -> None:
    await served.content.set_archived("/docs/gone.md", True)
    assert refusal(handled(served, "/docs/gone.md")) == (
        Status.ARCHIVED,
        "/docs/gone.md is archived",
    )
    assert [r.source for r in rows(handled(served, "/docs/a.md", direction="incoming"))] == [
        "/docs/b.md"
    ]


def test_the_body_the_spec_quotes(served: Context) -> None:
    spec = (Path(__file__).parents[2] / "docs" / "SPEC.md").read_text()
    quoted = re.search(r"<!-- links body -->\n```\n(.*?)```\n", spec, re.DOTALL)
    assert quoted is not None
    hiding = Context(served.content, lookup=served.lookup, grants=_grants(("/docs/gone.md",)))
    response = handled(hiding, "/docs/a.md")  # gone.md's link to a.md is not the reader's
    assert response.body.decode() == "\n" + quoted.group(1)
    assert response.meta == {"match": "links", "matches": "5", "total": "5", "complete": "true"}


def test_pages_continue_where_the_last_stopped(served: Context) -> None:
    whole = rows(handled(served, "/docs/", depth="2"))
    seen, cursor = [], "0"
    while True:
        page = handled(served, "/docs/", depth="2", limit="2", cursor=cursor)
        seen += rows(page)
        assert page.meta["total"] == str(len(whole))
        if page.meta["complete"] == "true":
            assert "next-cursor" not in page.meta
            break
        cursor = page.meta["next-cursor"]
    assert seen == whole


def test_the_walk_steps_out(served: Context) -> None:
    one = handled(served, "/docs/b.md", direction="outgoing")
    assert [r.target for r in rows(one)] == ["/docs/a.md"]
    two = handled(served, "/docs/b.md", direction="outgoing", depth="2")
    assert [r.target for r in rows(two)] == [
        "/docs/a.md",
        "/docs/b.md",
        "https://x.org",
        "/docs/nope.md",
        "/docs/old.md",
    ]
    documents = bodies.parse_links(two.body)[1]
    assert [(d.path, d.title, d.depth) for d in documents] == [
        ("/docs/b.md", "Beta", 0),
        ("/docs/a.md", "Alpha", 1),
        ("/docs/old.md", "Old", 2),
    ]
    only = handled(served, "/docs/a.md", direction="outgoing", relations="supersedes")
    assert [(r.kind, r.predicate) for r in rows(only)] == [("relation", "supersedes")]
    body = handled(served, "/docs/a.md", direction="outgoing", relations="")
    assert "relation" not in {r.kind for r in rows(body)}


# --- read auth on both ends ------------------------------------------------------------------

LEAK_DOCS = [
    ("/public/hub.md", "# Hub\n\n[secret](../private/secret.md) [[secret]] [pub](doc.md)\n", {}),
    ("/public/doc.md", "# Doc\n\n[hub](hub.md)\n", {}),
    ("/private/secret.md", "# Secret\n\n[hub](/public/hub.md) [doc](/public/doc.md#top)\n", {}),
    ("/private/also.md", "# Also\n\n[hub](/public/hub)\n", {"rel-mentions": "/public/doc.md"}),
]
PRIVATE = ("/private/secret.md", "/private/also.md", "Secret", "hushword")


class Unfiltered(Context):
    """The same server with the read filter switched off."""

    def can_read(self, path: str, token: str) -> bool:
        return True


def _grants(protected: tuple[str, ...] = ("/private/**",)) -> Grants:
    return Grants([Grant("reader", hash_token(READER), protected, frozenset({"read"}))])


@pytest.fixture
def leaky(tmp_path: Path) -> Iterator[Content]:
    seed(tmp_path, LEAK_DOCS)
    content = Content.open(tmp_path, [Lookup()])
    yield content
    content.close()


def guarded(content: Content, context: type[Context] = Context) -> Context:
    lookup = content.indexes[0]
    assert isinstance(lookup, Lookup)
    return context(
        content, lookup=lookup, grants=_grants(), clock=lambda: datetime(2026, 1, 1, tzinfo=UTC)
    )


def answers(ctx: Context, token: str = "") -> dict[tuple[str, str, str], wire.Response]:
    out = {}
    for path in ("/public/hub.md", "/public/doc.md", "/public/", "/"):
        for direction in ("incoming", "outgoing", "both"):
            for depth in ("1", "3"):
                keys: Mapping[str, str] = {"direction": direction, "depth": depth}
                if token:
                    keys = {**keys, "auth": token}
                out[path, direction, depth] = handled(ctx, path, **keys)
    return out


def assert_nothing_leaks(ctx: Context) -> None:
    """Links out of unreadable documents are not shown, links into them lead nowhere, and
    neither is counted: each answer is the one a server without them would give."""
    for (path, direction, _), response in answers(ctx).items():
        text = response.body.decode()
        found = rows(response)
        assert not any(r.source.startswith("/private/") for r in found), (path, direction)
        assert not any(r.target.startswith("/private/") and r.state == "ok" for r in found)
        assert "Secret" not in text and "Also" not in text
        for row in found:
            if row.raw in ("../private/secret.md", "secret"):
                assert row.state == "missing"
        assert int(response.meta["total"]) == len(found)


def test_unreadable_documents_never_leak_through_links(
    leaky: Content, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ctx = guarded(leaky)
    assert_nothing_leaks(ctx)
    public = tmp_path_factory.mktemp("public-only")
    seed(public, [doc for doc in LEAK_DOCS if doc[0].startswith("/public/")])
    alone = Content.open(public, [Lookup()])
    try:
        lookup = alone.indexes[0]
        assert isinstance(lookup, Lookup)
        without = answers(Context(alone, lookup=lookup))
        assert {key: r.body for key, r in answers(ctx).items()} == {
            key: r.body for key, r in without.items()
        }
    finally:
        alone.close()


def test_the_leak_checks_catch_a_missing_filter(leaky: Content) -> None:
    with pytest.raises(AssertionError):
        assert_nothing_leaks(guarded(leaky, Unfiltered))


def test_a_reader_sees_both_ends(leaky: Content) -> None:
    ctx = guarded(leaky)
    incoming = rows(handled(ctx, "/public/hub.md", direction="incoming", auth=READER))
    assert [r.source for r in incoming] == [
        "/private/also.md",
        "/private/secret.md",
        "/public/doc.md",
    ]
    hub = rows(handled(ctx, "/public/hub.md", direction="outgoing", auth=READER))
    assert [(r.target, r.state) for r in hub][:2] == [
        ("/private/secret.md", "ok"),
        ("/private/secret.md", "ok"),
    ]
    assert refusal(handled(ctx, "/private/secret.md")) == (
        Status.UNAUTHORIZED,
        "authentication required",
    )
    assert refusal(handled(ctx, "/private/")) == (Status.UNAUTHORIZED, "authentication required")


# --- what a reference client sends is answered as before --------------------------------------


@pytest.mark.parametrize(
    "meta",
    [
        {"query": "alpha"},
        {"query": "alpha", "match": "body"},
        {"query": "alpha", "match": "Links"},
        {"query": "alpha", "match": "links "},
        {"query": "alpha", "direction": "incoming", "depth": "2"},
    ],
)
def test_other_lookups_are_untouched(served: Context, meta: dict[str, str]) -> None:
    response = handle(wire.Request("LOOKUP", "/docs/", meta, b""), "/docs", served)
    assert "total" not in response.meta and response.meta.get("match") != "links"
