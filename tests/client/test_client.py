"""The client library: typed verbs against a real server, retries and at-most-once writes against
a scripted pool, the cache end to end, sections. The blocking facade and the environment setup
have their own modules (test_sync.py, test_environment.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.server import WRITE_TOKEN, RunningServer, running_server

from markproto.client import (
    ALPNMismatch,
    AnchorNotFound,
    Cache,
    CertificateChanged,
    Client,
    ConnectionLost,
    HandshakeFailed,
    InvalidURL,
    KnownHostsError,
    LookupResult,
    MarkError,
    OutcomeUnknown,
    Pool,
    RequestTimeout,
    ResponseTooLarge,
    Result,
    StatusError,
    StreamReset,
    Tokens,
    TokenStoreError,
    TransportError,
    Trust,
    TrustError,
    Unreachable,
    UnreadableResponse,
    Untrusted,
    UsageError,
)
from markproto.client import client as client_module
from markproto.client.results import CATALOG_FALLBACK_NOTE
from markproto.protocol import bodies
from markproto.protocol.errors import InvalidURL as ProtocolInvalidURL
from markproto.protocol.wire import Response, emit_response

DOC = (
    b"# Alpha\n\nFirst body.\n\n## Details\n\nThe papaya reverts.\n\n"
    b"### Deeper\n\nx\n\n## Other\n\ny\n"
)


# --- against a real server ----------------------------------------------------------------------


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "root") as srv:
        yield srv


def make_client(
    server: RunningServer, tmp_path: Path, *, token: str | None = WRITE_TOKEN, cache: bool = False
) -> Client:
    pool = Pool(Trust(known_hosts=tmp_path / "known_hosts", note=lambda message: None))
    return Client(
        pool,
        tokens=Tokens(None, {server.authority: token} if token else {}),
        cache=Cache(tmp_path / "cache") if cache else None,
        default_host=server.url,
    )


@pytest.fixture
async def writer(server: RunningServer, tmp_path: Path) -> AsyncIterator[Client]:
    async with make_client(server, tmp_path) as client:
        yield client


async def test_a_rate_limited_answer_is_asked_again_until_the_bucket_refills(
    tmp_path: Path,
) -> None:
    """``rate-limited`` means the server did nothing with the request: the client waits and asks
    again (an export of thousands of documents must not lose the ones that met an empty bucket),
    for ``rate_wait`` seconds at most."""
    async with running_server(tmp_path / "root", rate_limit=20.0, rate_burst=2) as srv:
        async with make_client(srv, tmp_path, token=None) as patient:
            results = [await patient.fetch(f"{srv.url}/health") for _ in range(6)]
        async with make_client(srv, tmp_path, token=None) as hasty:
            hasty.rate_wait = 0.0
            statuses = {(await hasty.fetch(f"{srv.url}/health")).status for _ in range(6)}
    assert [r.status for r in results] == ["ok"] * 6
    assert "rate-limited" in statuses


async def test_write_and_read_verbs(writer: Client) -> None:
    created = await writer.publish("/docs/a.md", DOC, expected_version=0, meta={"tags": "x, y"})
    assert (created.status, created.version, created.ok) == ("created", 1, True)
    fetched = await writer.fetch("/docs/a.md")
    assert (fetched.status, fetched.body, fetched.version) == ("ok", DOC, 1)
    assert fetched.meta["tags"] == "x,y"
    assert fetched.from_cache is False

    conflict = await writer.publish("/docs/a.md", b"# B\n", expected_version=0)
    assert conflict.status == "conflict"
    assert conflict.ok is False
    assert conflict.body == bodies.exists_conflict_body(1)
    forced = await writer.publish("/docs/a.md", DOC + b"more\n", expected_version=None)
    assert (forced.status, forced.version) == ("created", 2)

    appended = await writer.append("/docs/a.md", b"tail\n")
    assert (appended.status, appended.version) == ("created", 3)
    assert (await writer.fetch("/docs/a.md")).body == DOC + b"more\ntail\n"
    stale = await writer.append("/docs/a.md", b"again\n", expected_version=2)
    assert stale.status == "conflict"
    assert stale.body == bodies.conflict_body(2, 3, append=True)

    history = await writer.versions("/docs/a.md")
    assert history.meta["total"] == "3"
    assert [e.version for e in bodies.parse_history(history.body)] == [3, 2, 1]

    await writer.publish("/docs/b.md", b"# B\n", expected_version=0)
    page = await writer.list("/docs/", page_size=1)
    assert bodies.parse_index(page.body) == [bodies.IndexEntry("a.md", False)]
    assert page.next_cursor is not None
    rest = await writer.list("/docs", page_size=1, cursor=page.next_cursor)
    assert bodies.parse_index(rest.body) == [bodies.IndexEntry("b.md", False)]
    assert rest.next_cursor is None

    archived = await writer.archive("/docs/b.md")
    assert (archived.status, archived.meta["archived"]) == ("ok", "true")
    assert (await writer.fetch("/docs/b.md")).status == "archived"
    assert (await writer.append("/docs/b.md", b"x")).status == "archived"
    listed = await writer.list("/docs", include_archived=True)
    assert [e.name for e in bodies.parse_index(listed.body)] == ["a.md", "b.md"]


def test_result_helpers() -> None:
    assert Result("ok", {"version": "12"}, b"").version == 12
    for odd in ("", "-1", "1.5", "\u00b3", "x"):
        assert Result("ok", {"version": odd}, b"").version is None
    page = Result("ok", {"complete": "false", "next-cursor": "AQ"}, b"")
    assert page.next_cursor == "AQ"
    assert Result("ok", {"complete": "true", "next-cursor": "AQ"}, b"").next_cursor is None
    assert [Result(s, {}, b"").ok for s in ("ok", "created", "not-modified", "conflict")] == [
        True,
        True,
        True,
        False,
    ]


async def test_append_to_a_missing_document_reports_the_fetch(writer: Client) -> None:
    result = await writer.append("/docs/missing.md", b"x")
    assert result.status == "not-found"
    assert result.body == b"\n# Not found\n\n/docs/missing.md not found\n"


async def test_lookup_rows(writer: Client) -> None:
    await writer.publish("/docs/a.md", DOC, expected_version=0, meta={"tags": "alpha"})
    catalog = await writer.lookup("/", "alpha")
    assert isinstance(catalog, LookupResult)
    assert catalog.meta == {"matches": "1"}
    assert [(r.path, r.anchor, r.tags, r.snippet) for r in catalog.rows] == [
        ("/docs/a.md", "", ("alpha",), None)
    ]
    assert catalog.answered_from_catalog is False
    body = await writer.lookup("/docs/", "papaya", match="body", limit=3)
    assert body.meta["match"] == "body"
    assert [(r.path, r.anchor) for r in body.rows] == [("/docs/a.md", "details")]
    assert body.rows[0].title == "Alpha › Details"
    assert body.answered_from_catalog is False
    missing = await writer.lookup("/nowhere", "alpha")
    assert (missing.status, missing.rows) == ("not-found", ())


async def test_anchor_selects_the_section(writer: Client) -> None:
    await writer.publish("/a.md", DOC, expected_version=0)
    section = await writer.fetch("/a.md#details")
    assert section.body == b"## Details\n\nThe papaya reverts.\n\n### Deeper\n\nx\n\n"
    assert section.version == 1
    assert (await writer.fetch("/a.md#Details")).body == section.body
    with pytest.raises(AnchorNotFound) as caught:
        await writer.fetch("/a.md#nope")
    assert caught.value.anchors == ["alpha", "details", "deeper", "other"]
    assert "#nope" in str(caught.value)
    assert "#alpha, #details, #deeper, #other" in str(caught.value)
    missing = await writer.fetch("/gone.md#details")
    assert missing.status == "not-found"


async def test_manifest(writer: Client, server: RunningServer) -> None:
    assert (await writer.manifest(server.url + "/any/path")).status == "not-found"
    await writer.publish("/.well-known/agent-manifest.md", b"# Site\n", expected_version=0)
    manifest = await writer.manifest(server.url)
    assert (manifest.status, manifest.body) == ("ok", b"# Site\n")


async def test_cache_revalidates_by_etag(
    writer: Client, server: RunningServer, tmp_path: Path
) -> None:
    await writer.publish("/a.md", b"# One\n", expected_version=0)
    async with make_client(server, tmp_path, token=None, cache=True) as reader:
        first = await reader.fetch("/a.md")
        second = await reader.fetch("/a.md")
        assert (first.from_cache, second.from_cache) == (False, True)
        assert second == Result(first.status, first.meta, first.body, from_cache=True)
        # Same second, new version: if-modified-since alone would call the stale copy current.
        await writer.publish("/a.md", b"# Two\n", expected_version=1)
        third = await reader.fetch("/a.md")
        assert (third.body, third.from_cache) == (b"# Two\n", False)
        assert (await reader.fetch("/a.md#two")).from_cache is True
        assert (await reader.fetch("/a.md", if_none_match="x")).from_cache is False
    assert len(list((tmp_path / "cache").iterdir())) == 1


async def test_requests_with_a_token_are_never_cached(writer: Client, tmp_path: Path) -> None:
    writer.cache = Cache(tmp_path / "cache")
    await writer.publish("/a.md", b"# One\n", expected_version=0)
    assert (await writer.fetch("/a.md")).status == "ok"
    assert (await writer.fetch("/a.md")).from_cache is False
    assert not (tmp_path / "cache").exists()


async def test_bare_paths_need_a_default_host() -> None:
    async with Client() as client:
        with pytest.raises(InvalidURL) as caught:
            await client.fetch("/a.md")
    assert isinstance(caught.value, MarkError)
    assert isinstance(caught.value, ValueError)
    assert "names no server" in str(caught.value)


async def test_raise_for_status_turns_a_refusal_into_a_status_error(writer: Client) -> None:
    created = await writer.publish("/docs/a.md", DOC, expected_version=0)
    assert created.raise_for_status() is created
    with pytest.raises(StatusError) as caught:
        (await writer.fetch("/docs/missing.md")).raise_for_status()
    assert (caught.value.status, caught.value.message) == (
        "not-found",
        "/docs/missing.md not found",
    )
    assert str(caught.value) == "not-found: /docs/missing.md not found"
    assert caught.value.result is not None and caught.value.result.status == "not-found"
    conflict = await writer.publish("/docs/a.md", b"# B\n", expected_version=0)
    with pytest.raises(StatusError, match=r"^conflict: ") as refused:
        conflict.raise_for_status()
    assert "\n" not in refused.value.message
    assert isinstance(refused.value, MarkError)


@pytest.mark.parametrize(
    "failure",
    [
        UsageError,
        InvalidURL,
        TransportError,
        Unreachable,
        ConnectionLost,
        StreamReset,
        RequestTimeout,
        ResponseTooLarge,
        ALPNMismatch,
        UnreadableResponse,
        OutcomeUnknown,
        TrustError,
        HandshakeFailed,
        Untrusted,
        CertificateChanged,
        KnownHostsError,
        StatusError,
        AnchorNotFound,
        TokenStoreError,
    ],
)
def test_every_failure_is_a_mark_error(failure: type[Exception]) -> None:
    assert issubclass(failure, MarkError)


def test_the_branches_of_the_error_tree() -> None:
    assert issubclass(InvalidURL, UsageError) and issubclass(UsageError, ValueError)
    assert issubclass(InvalidURL, ProtocolInvalidURL)
    for trust in (HandshakeFailed, Untrusted, CertificateChanged, KnownHostsError):
        assert issubclass(trust, TrustError) and issubclass(trust, TransportError)
    for transport in (Unreachable, RequestTimeout, UnreadableResponse, OutcomeUnknown):
        assert issubclass(transport, TransportError)
        assert not issubclass(transport, TrustError)
    assert not issubclass(StatusError, TransportError)


# --- retries and at-most-once writes, on a scripted pool ----------------------------------------

OK = emit_response(Response("ok", {"version": "4"}, b"# Doc\n"))
CREATED = emit_response(Response("created", {"version": "5"}, b""))


class ScriptedPool(Pool):
    """Answers each request with the next scripted outcome and records what was sent."""

    def __init__(self, *outcomes: bytes | TransportError) -> None:
        super().__init__()
        self.outcomes = list(outcomes)
        self.sent: list[bytes] = []

    async def request(self, authority: str, data: bytes, **options: Any) -> bytes:
        self.sent.append(data)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, TransportError):
            raise outcome
        return outcome


def scripted(*outcomes: bytes | TransportError) -> tuple[Client, ScriptedPool]:
    pool = ScriptedPool(*outcomes)
    return Client(pool, tokens=Tokens(None, {"h:1": "tok"}), retry_delay=0), pool


@pytest.mark.parametrize(
    "failure",
    [
        Unreachable("h:1: unreachable (connection refused)"),
        ConnectionLost("h:1: connection lost (closed by the server)", sent=True),
        StreamReset("h:1: stream reset by the server (code 0)", sent=True),
        RequestTimeout("h:1: no response within 1 s", sent=True),
    ],
)
async def test_reads_retry_transient_failures(failure: TransportError) -> None:
    client, pool = scripted(failure, failure, OK)
    result = await client.fetch("mark://h:1/a.md")
    assert (result.status, result.version) == ("ok", 4)
    assert pool.sent == [b"FETCH /a.md\n---\nauth: tok\n---\n"] * 3


async def test_reads_give_up_after_the_attempts() -> None:
    failures = [Unreachable(f"h:1: unreachable ({n})") for n in range(3)]
    client, pool = scripted(*failures, OK)
    with pytest.raises(Unreachable, match=r"\(2\)"):
        await client.list("mark://h:1/")
    assert len(pool.sent) == 3


async def test_slow_failures_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "RETRY_WINDOW", -1.0)
    client, pool = scripted(RequestTimeout("h:1: no response within 10 s", sent=True), OK)
    with pytest.raises(RequestTimeout):
        await client.versions("mark://h:1/a.md")
    assert len(pool.sent) == 1


@pytest.mark.parametrize(
    "failure",
    [
        HandshakeFailed("h:1: TLS handshake failed (bad certificate)"),
        ALPNMismatch("h:1: server does not speak mark (ALPN mismatch)"),
        CertificateChanged("@@@ WARNING: THE CERTIFICATE OF h:1 HAS CHANGED @@@"),
        ResponseTooLarge("h:1: response larger than 10 bytes", sent=True),
    ],
)
async def test_permanent_failures_are_not_retried(failure: TransportError) -> None:
    client, pool = scripted(failure, OK)
    with pytest.raises(type(failure)):
        await client.fetch("mark://h:1/a.md")
    assert len(pool.sent) == 1


async def test_a_write_that_may_have_landed_is_never_resent() -> None:
    client, pool = scripted(RequestTimeout("h:1: no response within 10 s", sent=True), CREATED)
    with pytest.raises(OutcomeUnknown) as caught:
        await client.publish("mark://h:1/a.md", b"# A\n", expected_version=3)
    assert caught.value.sent is True
    assert str(caught.value) == (
        "h:1: no response within 10 s; the outcome of PUBLISH is unknown: it may have been "
        "applied, so fetch mark://h:1/a.md before retrying"
    )
    assert pool.sent == [b'PUBLISH /a.md\n---\nauth: tok\nexpected-version: "3"\n---\n# A\n']


@pytest.mark.parametrize("verb", ["publish", "append", "archive"])
async def test_a_write_to_a_section_is_refused_before_anything_is_sent(verb: str) -> None:
    client, pool = scripted(CREATED)
    call = {
        "publish": lambda: client.publish("mark://h:1/a.md#part", b"x", expected_version=None),
        "append": lambda: client.append("mark://h:1/a.md#part", b"x"),
        "archive": lambda: client.archive("mark://h:1/a.md#part"),
    }[verb]
    with pytest.raises(UsageError, match=r"writes the whole document, not one section: drop #part"):
        await call()
    assert pool.sent == []


async def test_a_write_that_never_left_is_retried() -> None:
    client, pool = scripted(Unreachable("h:1: unreachable (connection refused)"), CREATED)
    result = await client.archive("mark://h:1/a.md")
    assert result.status == "created"
    assert pool.sent == [b"ARCHIVE /a.md\n---\nauth: tok\n---\n"] * 2


async def test_an_unreadable_answer() -> None:
    client, _ = scripted(b"no frontmatter at all")
    with pytest.raises(UnreadableResponse) as caught:
        await client.fetch("mark://h:1/a.md")
    assert str(caught.value).startswith("h:1: unreadable response (")
    client, _ = scripted(b"no frontmatter at all")
    with pytest.raises(OutcomeUnknown, match="outcome of APPEND is unknown"):
        await client.append("mark://h:1/a.md", b"x", expected_version=1)


async def test_append_resolves_the_version_first() -> None:
    client, pool = scripted(OK, CREATED)
    result = await client.append("mark://h:1/a.md", b"more", meta={"agent": "bot"})
    assert result.status == "created"
    assert pool.sent == [
        b"FETCH /a.md\n---\nauth: tok\n---\n",
        b'APPEND /a.md\n---\nagent: bot\nauth: tok\nexpected-version: "4"\n---\nmore',
    ]


async def test_lookup_request_bytes_and_catalog_fallback() -> None:
    answer = bodies.render_lookup(
        "alpha",
        "/docs",
        [bodies.LookupRow("/docs/a.md", "", 0.7, "A", ("x",), None)],
        body_mode=False,
    )
    client, pool = scripted(emit_response(Response("ok", {"matches": "1"}, answer)))
    result = await client.lookup("mark://h:1/docs", "alpha", filter="tag=x", limit=3, match="body")
    assert pool.sent == [
        b'LOOKUP /docs\n---\nauth: tok\nfilter: tag=x\nlimit: "3"\nmatch: body\nquery: alpha\n---\n'
    ]
    assert result.answered_from_catalog is True
    assert result.rows[0].importance == 0.7
    assert CATALOG_FALLBACK_NOTE.endswith("is not evidence of absence")


async def test_list_request_bytes() -> None:
    client, pool = scripted(OK)
    await client.list("mark://h:1/d/", cursor="AQ", page_size=5, include_archived=True)
    assert pool.sent == [
        b'LIST /d/\n---\nauth: tok\ncursor: AQ\ninclude-archived: "true"\npage-size: "5"\n---\n'
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.lookup("mark://h:1/", "  "), "needs a query"),
        (lambda c: c.lookup("mark://h:1/", "x", match="fuzzy"), "catalog"),
        (lambda c: c.lookup("mark://h:1/", "xy", limit=0), "limit"),
        (lambda c: c.list("mark://h:1/", page_size=1001), "page size"),
        (lambda c: c.publish("mark://h:1/a.md", b"", expected_version=-1), "expected_version"),
        (lambda c: c.append("mark://h:1/a.md", b""), "non-empty"),
        (lambda c: c.append("mark://h:1/a.md", b"x", expected_version=0), "1 or more"),
        (
            lambda c: c.publish("mark://h:1/a.md", b"x", expected_version=0, meta={"auth": "t"}),
            "'auth'",
        ),
    ],
)
async def test_arguments_are_checked_before_anything_is_sent(call: Any, message: str) -> None:
    client, pool = scripted(OK)
    with pytest.raises(UsageError, match=message) as caught:
        await call(client)
    assert isinstance(caught.value, ValueError)
    assert pool.sent == []
