"""The Mark Protocol client: typed verbs over the connection pool.

Everything a face (the ``mark`` CLI, the MCP bridge, a script) needs and should not decide for
itself lives here: which token a request carries, when a failed request may be sent again, when
the on-disk cache answers, and how ``url#anchor`` selects a section.

Retries. A read is sent again after a transient transport failure, a few times with a short
delay, but only while the first attempt is recent: a timeout already cost its full wait, and
repeating it would multiply the wait. A write is sent again only when the pool says no byte of it
left (``sent`` is false); once any byte may have reached the server its outcome is unknown, and
``OutcomeUnknown`` says to fetch before retrying instead of risking a second version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING

from markproto.client import environment
from markproto.client.cache import Cache, conditions
from markproto.client.connection import DIAL_TIMEOUT, Pool
from markproto.client.errors import (
    AnchorNotFound,
    ConnectionLost,
    InvalidURL,
    MarkError,
    OutcomeUnknown,
    RequestTimeout,
    StreamReset,
    TransportError,
    Unreachable,
    UnreadableResponse,
    UsageError,
)
from markproto.client.results import LinksResult, LookupResult, Result
from markproto.client.tokenstore import Tokens, TokenStore, valid_token
from markproto.client.trust import Trust
from markproto.client.watch import STALL_TIMEOUT, Changes, Watch, changes
from markproto.protocol import errors as protocol_errors
from markproto.protocol.limits import LINK_DEPTH_MAX, LIST_PAGE_MAX, MANIFEST_PATH, MAX_BODY
from markproto.protocol.metadata import CONTROL_KEYS, validate
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL, parse_url
from markproto.protocol.watch import Cursor, InvalidWatchCursor
from markproto.protocol.wire import Request, Response, emit_request, parse_response

if TYPE_CHECKING:
    from markproto.protocol.bodies import LinkDocument, LinkRow

READ_ATTEMPTS = 3
RETRY_DELAY = 0.1
RETRY_WINDOW = 2.0
"""Seconds after the first attempt during which a failed request may still be retried."""
RATE_WAIT = 30.0
"""Seconds a request answered ``rate-limited`` is asked again before that answer is returned: a
server's bucket refills within a second or two, and an import or export of thousands of
documents must not lose the requests that met an empty one."""
RATE_DELAY = 0.05
RATE_DELAY_MAX = 1.0
KEEPALIVE = 25.0
"""Seconds between PINGs on idle pooled connections, inside any server's idle timeout (the
reference's 30 s), so a long-lived client keeps its connections."""
_TRANSIENT = (Unreachable, ConnectionLost, StreamReset, RequestTimeout)
"""Failures another attempt may cure; TLS, ALPN, pin and size failures would only repeat."""
_CACHED_VERBS = frozenset({"FETCH", "LIST"})


class Client:
    """Typed verbs on one pool, which the client owns and closes (by default: system CAs, the
    pins in ``environment.home()/known_hosts``, keepalive PINGs, no token, no cache;
    ``from_environment`` sets up what the ``mark`` CLI uses). ``tokens`` decides each request's
    token; ``cache`` serves tokenless FETCH and LIST; ``default_host`` lets targets be bare
    paths. Targets are ``MarkURL`` values or strings for ``parse_url``.

    A server's refusal (``not-found``, ``conflict``, ...) comes back as a ``Result``; every
    failure to get one raises a ``MarkError``."""

    def __init__(
        self,
        pool: Pool | None = None,
        *,
        tokens: Tokens | None = None,
        cache: Cache | None = None,
        default_host: str | None = None,
        attempts: int = READ_ATTEMPTS,
        retry_delay: float = RETRY_DELAY,
        rate_wait: float = RATE_WAIT,
    ) -> None:
        self.pool = pool if pool is not None else Pool(keepalive=KEEPALIVE)
        self.tokens = tokens if tokens is not None else Tokens()
        self.cache = cache
        self.default_host = default_host
        self.attempts = attempts
        self.retry_delay = retry_delay
        self.rate_wait = rate_wait

    @classmethod
    def from_environment(
        cls,
        host: MarkURL | str | None = None,
        *,
        token: str | None = None,
        insecure: bool = False,
        trust_new: bool = False,
        timeout: float = DIAL_TIMEOUT,
        cache: bool = True,
        confirm: Callable[[str, str], bool] | None = None,
        note: Callable[[str], None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Client:
        """The client as ``mark`` sets it up. State lives where ``environment`` says (``MARK_HOME``,
        else ``~/.mark`` where it exists, else the XDG directories): stored tokens for every
        host, certificate pins, and the cache unless ``cache`` is false. Bare
        paths name documents on ``host`` (else ``MARK_HOST``), and ``token`` (else
        ``MARK_AUTH``) goes to that server only, never to another host.

        ``timeout`` bounds each dial and each response. ``confirm(authority, fingerprint)`` may
        pin a certificate no CA vouches for (without it only loopback servers, or all with
        ``trust_new``, are pinned); ``note`` receives one-line notices (a new pin, a broken
        tokens file), by default as log records. ``environ`` stands in for ``os.environ``."""
        if host is None:
            host = environment.variable(environment.HOST, environ)
        server = _server(host)
        explicit = token if token is not None else environment.variable(environment.AUTH, environ)
        if server is None:
            if token is not None:
                raise UsageError("a token needs the host it is for (give host or set MARK_HOST)")
            explicit = None  # MARK_AUTH is for the MARK_HOST server; there is none
        if explicit is not None and not valid_token(explicit):
            raise UsageError("a token is one word without spaces")
        home = environment.home(environ)
        trust = Trust(
            insecure=insecure,
            known_hosts=home / "known_hosts",
            trust_new=trust_new,
            confirm=confirm,
            note=note,
        )
        overrides = {server.authority: explicit} if server is not None and explicit else {}
        return cls(
            Pool(trust, dial_timeout=timeout, request_timeout=timeout, keepalive=KEEPALIVE),
            tokens=Tokens(TokenStore(home / "tokens.toml", warn=note), overrides),
            cache=Cache(environment.cache_dir(environ), warn=note) if cache else None,
            default_host=None if server is None else server.identity,
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.pool.close()

    def url(self, target: MarkURL | str) -> MarkURL:
        """The target as a ``MarkURL``; ``InvalidURL`` for a string that names no server."""
        if isinstance(target, MarkURL):
            return target
        try:
            return parse_url(target, default_host=self.default_host)
        except protocol_errors.InvalidURL as exc:
            raise InvalidURL(str(exc)) from None

    # reads

    async def fetch(
        self,
        target: MarkURL | str,
        *,
        if_none_match: str | None = None,
        if_modified_since: str | None = None,
    ) -> Result:
        """The document; with ``#anchor``, only that heading's section (``AnchorNotFound`` when
        the document has none of that name). Metadata is the whole document's. A document that
        ``if_none_match`` (an etag) or ``if_modified_since`` (RFC 3339) says is unchanged comes
        back as a bodiless ``not-modified``."""
        url = self.url(target)
        meta = {} if if_none_match is None else {"if-none-match": if_none_match}
        if if_modified_since is not None:
            meta["if-modified-since"] = if_modified_since
        result = await self._read(url, "FETCH", meta)
        if url.anchor and result.status == Status.OK:
            result = _section(url, result)
        return result

    async def manifest(self, target: MarkURL | str) -> Result:
        """The server's agent manifest (only the host of ``target`` matters)."""
        return await self.fetch(self.url(target).with_path(MANIFEST_PATH))

    async def list(
        self,
        target: MarkURL | str,
        *,
        cursor: str | None = None,
        page_size: int | None = None,
        include_archived: bool = False,
    ) -> Result:
        """One page of a folder; ``Result.next_cursor`` continues it."""
        if page_size is not None and not 1 <= page_size <= LIST_PAGE_MAX:
            raise UsageError(f"page size must be between 1 and {LIST_PAGE_MAX}")
        meta = {"cursor": cursor} if cursor else {}
        if page_size is not None:
            meta["page-size"] = str(page_size)
        if include_archived:
            meta["include-archived"] = "true"
        return await self._read(self.url(target), "LIST", meta)

    async def versions(self, target: MarkURL | str) -> Result:
        """The document's versions, newest first; the metadata says whether their hash chain
        is intact."""
        return await self._read(self.url(target), "VERSIONS", {})

    async def lookup(
        self,
        target: MarkURL | str,
        query: str,
        *,
        filter: str | None = None,
        limit: int | None = None,
        match: str | None = None,
    ) -> LookupResult:
        """Ranked rows under the scope ``target``. Arguments left out are not sent, so the
        server's defaults apply (and an older server sees the request it knows)."""
        if not query.strip():
            raise UsageError("a lookup needs a query ('*' matches everything)")
        if match not in (None, "catalog", "body"):
            raise UsageError(f'match must be "catalog" or "body", got {match!r}')
        if limit is not None and limit < 1:
            raise UsageError("limit must be at least 1")
        meta = {"query": query}
        if filter:
            meta["filter"] = filter
        if limit is not None:
            meta["limit"] = str(limit)
        if match is not None:
            meta["match"] = match
        url = self.url(target)
        result = await self._read(url, "LOOKUP", meta)
        from markproto.protocol.bodies import parse_lookup  # only LOOKUP parses a body

        try:
            rows = tuple(parse_lookup(result.body)) if result.status == Status.OK else ()
        except protocol_errors.ProtocolError as exc:
            raise _unreadable(url, exc) from exc
        return LookupResult(
            result.status, result.meta, result.body, rows=rows, body_requested=match == "body"
        )

    # changes

    def watch(
        self,
        target: MarkURL | str,
        *,
        since: Cursor | str | None = None,
        stall_timeout: float = STALL_TIMEOUT,
        on_reconnect: Callable[[MarkError], None] | None = None,
    ) -> Watch:
        """Change hints for a document or a folder and everything below it, as an async
        iterator of ``WatchEvent`` and ``Resync`` values; ``async with`` it to subscribe at once.
        It resumes after ``since`` when given, reconnects and resumes on its own when a stream
        ends (``on_reconnect`` hears why), and raises ``StatusError`` when the server refuses or
        ends it for good."""
        return Watch(
            self,
            self.url(target),
            _cursor(since),
            stall_timeout=stall_timeout,
            on_reconnect=on_reconnect,
        )

    async def changes(
        self, target: MarkURL | str, *, since: Cursor | str | None = None, limit: int = 1000
    ) -> Changes:
        """What changed under ``target`` after ``since`` (at most ``limit`` events), in one
        short WATCH; without ``since`` no events, only the cursor to ask from later."""
        if limit < 1:
            raise UsageError("limit must be at least 1")
        url = self.url(target)
        quiet = self.pool.request_timeout
        return await changes(self, url, _cursor(since), limit=limit, quiet=quiet)

    async def links(
        self,
        target: MarkURL | str,
        *,
        direction: str | None = None,
        relations: Sequence[str] | None = None,
        depth: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> LinksResult:
        """One page of the links around a document or a folder (SPEC §5.9): the links it holds
        (``direction="outgoing"``), those that lead to it (``"incoming"``) or both (the
        default), walked ``depth`` steps out (1-5). ``relations`` keeps only those kinds: a
        relation's predicate, or ``""`` for the links in bodies. ``LinksResult.next_cursor``
        continues; a server without links answers ``bad-request`` (``unsupported``)."""
        if direction not in (None, "incoming", "outgoing", "both"):
            raise UsageError(f"direction must be incoming, outgoing or both, got {direction!r}")
        if depth is not None and not 1 <= depth <= LINK_DEPTH_MAX:
            raise UsageError(f"depth must be from 1 to {LINK_DEPTH_MAX}")
        if limit is not None and limit < 1:
            raise UsageError("limit must be at least 1")
        meta = {"match": "links"}
        for key, value in (("direction", direction), ("depth", depth), ("limit", limit)):
            if value is not None:
                meta[key] = str(value)
        if relations is not None:
            meta["relations"] = ",".join(relations)
        if cursor:
            meta["cursor"] = cursor
        url = self.url(target)
        result = await self._read(replace(url, anchor=""), "LOOKUP", meta)
        from markproto.protocol.bodies import parse_links  # only links parse this body

        found: tuple[list[LinkRow], list[LinkDocument]] = ([], [])
        try:
            if result.status == Status.OK:
                found = parse_links(result.body)
        except protocol_errors.ProtocolError as exc:
            raise _unreadable(url, exc) from exc
        return LinksResult(
            result.status,
            result.meta,
            result.body,
            rows=tuple(found[0]),
            documents=tuple(found[1]),
        )

    # writes

    async def publish(
        self,
        target: MarkURL | str,
        body: bytes,
        *,
        expected_version: int | None,
        meta: Mapping[str, str] | None = None,
    ) -> Result:
        """A new version. ``expected_version`` 0 creates only, N replaces version N only, None
        overwrites whatever is there. An empty body unarchives (the protocol's rule)."""
        if expected_version is not None and expected_version < 0:
            raise UsageError("expected_version must be 0 or more (None skips the check)")
        return await self._write(
            _whole(self.url(target), "PUBLISH"), "PUBLISH", body, expected_version, meta
        )

    async def append(
        self,
        target: MarkURL | str,
        body: bytes,
        *,
        expected_version: int | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> Result:
        """Add ``body`` to the end. Without ``expected_version`` the current version is fetched
        first; if that fetch fails, its result is returned and nothing is appended."""
        if not body:
            raise UsageError("an append needs a non-empty body")
        if expected_version is not None and expected_version < 1:
            raise UsageError("expected_version of an append must be 1 or more")
        url = _whole(self.url(target), "APPEND")
        if expected_version is None:
            current = await self._read(url, "FETCH", {})
            if current.status != Status.OK:
                return current
            if current.version is None:
                raise UnreadableResponse(f"{url}: the server sent no version", sent=True)
            expected_version = current.version
            separator = 0 if current.body.endswith(b"\n") else 1  # the server's rule
            _check_size(len(current.body) + separator + len(body), "the appended document")
        return await self._write(url, "APPEND", body, expected_version, meta)

    async def archive(self, target: MarkURL | str) -> Result:
        """Archive the document: fetches answer ``archived``, its history stays, and publishing
        an empty body unarchives it."""
        return await self._write(_whole(self.url(target), "ARCHIVE"), "ARCHIVE", b"", None, None)

    # private

    async def _read(self, url: MarkURL, verb: str, meta: dict[str, str]) -> Result:
        token = self.tokens.for_authority(url.authority)
        cache = self.cache if verb in _CACHED_VERBS and not meta and token is None else None
        entry = None if cache is None else cache.get(verb, url.authority, url.path)
        request_meta = dict(meta)
        if token is not None:
            request_meta["auth"] = token
        if entry is not None:
            request_meta.update(conditions(entry))
        response = await self._exchange(url, _request(verb, url, request_meta, b""), False)
        if entry is not None and response.status == Status.NOT_MODIFIED:
            return Result(entry.status, entry.meta, entry.body, from_cache=True)
        if cache is not None:
            cache.put(verb, url.authority, url.path, response)
        return Result(response.status, response.meta, response.body)

    async def _write(
        self,
        url: MarkURL,
        verb: str,
        body: bytes,
        expected_version: int | None,
        meta: Mapping[str, str] | None,
    ) -> Result:
        _check_size(len(body), "body")
        request_meta = dict(meta or {})
        control = sorted(CONTROL_KEYS.intersection(request_meta))
        if control:
            raise UsageError(f"metadata key {control[0]!r} is set by the client, not by callers")
        try:
            validate(request_meta)
        except protocol_errors.InvalidMetadata as exc:
            raise UsageError(f"metadata: {exc}") from None
        token = self.tokens.for_authority(url.authority)
        if token is not None:
            request_meta["auth"] = token
        if expected_version is not None:
            request_meta["expected-version"] = str(expected_version)
        response = await self._exchange(url, _request(verb, url, request_meta, body), True)
        return Result(response.status, response.meta, response.body)

    async def _exchange(self, url: MarkURL, request: Request, write: bool) -> Response:
        """The server's answer; a ``rate-limited`` one (the server did nothing with the request)
        is asked again, waiting longer each time, for up to ``rate_wait`` seconds."""
        delay, waited = RATE_DELAY, 0.0
        while True:
            response = await self._attempt(url, request, write)
            if response.status != Status.RATE_LIMITED or waited >= self.rate_wait:
                return response
            await asyncio.sleep(delay)
            waited += delay
            delay = min(2 * delay, RATE_DELAY_MAX)

    async def _attempt(self, url: MarkURL, request: Request, write: bool) -> Response:
        data = emit_request(request)
        loop = asyncio.get_running_loop()
        start = loop.time()
        attempt = 1
        while True:
            try:
                raw = await self.pool.request(url.authority, data)
                break
            except TransportError as exc:
                if write and exc.sent:
                    raise OutcomeUnknown(_unknown(request.verb, url, exc), sent=True) from exc
                if (
                    not isinstance(exc, _TRANSIENT)
                    or attempt >= self.attempts
                    or loop.time() - start > RETRY_WINDOW
                ):
                    raise
            attempt += 1
            await asyncio.sleep(self.retry_delay)
        try:
            return parse_response(raw)
        except protocol_errors.MalformedResponse as exc:
            if write:
                raise OutcomeUnknown(_unknown(request.verb, url, exc), sent=True) from exc
            raise _unreadable(url, exc) from exc


def _server(host: MarkURL | str | None) -> MarkURL | None:
    """The server a default host names: a ``MarkURL``'s own, or ``mark://host[:port]``."""
    if host is None or isinstance(host, MarkURL):
        return host
    try:
        return parse_url("/", default_host=host)
    except protocol_errors.InvalidURL as exc:
        raise InvalidURL(str(exc)) from None


def _cursor(since: Cursor | str | None) -> Cursor | None:
    if since is None or isinstance(since, Cursor):
        return since
    try:
        return Cursor.parse(since)
    except InvalidWatchCursor:
        raise UsageError(f"{since!r} is not a WATCH cursor (<epoch>:<seq>)") from None


def _whole(url: MarkURL, verb: str) -> MarkURL:
    """A write's target: ``url#anchor`` is refused, as a write replaces the whole document."""
    if url.anchor:
        raise UsageError(
            f"{url}: {verb} writes the whole document, not one section: drop #{url.anchor}"
        )
    return url


def _check_size(size: int, what: str) -> None:
    """Refuse a write the server would refuse for its size, before any byte is sent."""
    if size > MAX_BODY:
        raise UsageError(f"{what} is {size:,} bytes; a document holds at most {MAX_BODY:,} (1 MiB)")


def _request(verb: str, url: MarkURL, meta: dict[str, str], body: bytes) -> Request:
    """The request value; one the protocol cannot carry is the caller's error, not the wire's."""
    try:
        return Request(verb, url.path, meta, body)
    except (protocol_errors.ProtocolError, ValueError) as exc:
        raise UsageError(f"{url}: {exc}") from None


def _unreadable(url: MarkURL, cause: Exception) -> UnreadableResponse:
    return UnreadableResponse(f"{url.authority}: unreadable response ({cause})", sent=True)


def _unknown(verb: str, url: MarkURL, cause: Exception) -> str:
    return (
        f"{cause}; the outcome of {verb} is unknown: it may have been applied, "
        f"so fetch {replace(url, anchor='')} before retrying"
    )


def _section(url: MarkURL, result: Result) -> Result:
    """Cut out the anchor's section (imported here: the parser costs a third of a second)."""
    from markproto.protocol import mdoutline

    text = result.body.decode("utf-8", "replace")
    part = mdoutline.section(text, url.anchor)
    if part is None:
        raise AnchorNotFound(url, [h.anchor for h in mdoutline.headings(text)])
    return replace(result, body=part.encode())
