"""``mark mcp``: the MCP bridge, a thin face over ``client.Client`` for agents.

Every byte of a result costs the agent tokens, so a result is a lean envelope
(``status: <s>``, a few ``key: value`` lines, a blank line, the body; ``verbose`` adds every
metadata key), a body over 8 KB comes back as its outline unless forced, and no result exceeds
``MAX_RESULT`` characters: a longer one is cut at a line and ends with a marker naming the
call that continues it. A failure to get an answer (transport, auth, server, a wrong argument) is
a tool error the agent cannot mistake for an empty result; ``not-found``, ``conflict``,
``archived`` and ``not-permitted`` are ordinary results it can act on.

Only ``mark mcp`` imports this module: the SDK costs most of a second to import.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Iterable
from importlib import metadata
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.types import ToolAnnotations
from pydantic import Field

from markproto.client import AnchorNotFound, Client, LookupResult, MarkError, Result, mcpwatch
from markproto.client.results import CATALOG_FALLBACK_NOTE
from markproto.protocol import bodies, mdoutline, paths
from markproto.protocol.errors import InvalidURL
from markproto.protocol.limits import MANIFEST_PATH, OUTLINE_THRESHOLD
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL, parse_url

MAX_RESULT = 40_000
"""Characters of one tool result, envelope and truncation marker included."""
_MARKER_ROOM = 200
"""Characters kept free for the truncation marker."""
_TAGS_SHOWN = 10
_FAILURES = frozenset(
    {Status.UNAUTHORIZED, Status.BAD_REQUEST, Status.SERVER_ERROR, Status.RATE_LIMITED}
)
"""Statuses that are tool errors: the call cannot succeed as made; retrying it unchanged is
pointless (bad-request), needs a token (unauthorized) or time (server-error, rate-limited)."""

_READ = ToolAnnotations(read_only_hint=True)
_WRITE = ToolAnnotations(read_only_hint=False)

T = TypeVar("T")
_Tool = TypeVar("_Tool", bound=Callable[..., Awaitable[str]])

# Parameter types. The SDK builds each tool's input schema from its signature, evaluating the
# annotations in this module's namespace, so they are module-level names.
Url = Annotated[str, Field(description="mark://host/path, or /path on the -host server")]
Force = Annotated[bool, Field(description="whole body even over 8 KB")]
Verbose = Annotated[bool, Field(description="all metadata in the envelope")]
Offset = Annotated[int, Field(ge=0, description="continue a truncated result")]
Body = Annotated[str, Field(description="markdown")]
Metadata = Annotated[
    dict[str, str] | None,
    Field(
        description="string values; replaces the current metadata. "
        "tags: comma list; importance: 0-1; type; title; rel-<predicate>: /path"
    ),
]


def instructions(host: MarkURL | None) -> str:
    """What the agent reads once: where it is connected and the cheapest way to an answer."""
    where = (
        f"Connected to {host.identity}; use bare paths like /index.md."
        if host is not None
        else "Use full mark:// URLs like mark://host/index.md."
    )
    return (
        f"{where} Cheap path: mark_lookup scoped to the likely folder with match "
        '"body" and limit 3, then mark_fetch the best path#anchor; fetch whole documents only '
        "when a section is not enough. If a lookup or fetch fails, say so and stop: never infer "
        "that something is absent. A lookup answered from the catalog (its note says so) is "
        "inconclusive for a question about body text. A result cut at "
        f"{MAX_RESULT:,} characters ends with a [truncated: ...] line naming the call that "
        "continues it."
    )


def build_server(client: Client, host: MarkURL | None = None) -> _Server:
    """The bridge's tools and resource template over ``client`` (which the caller closes);
    with ``host``, bare paths name documents on that server."""
    bus = InMemorySubscriptionBus()
    server = _Server(
        "markproto",
        instructions=instructions(host),
        version=metadata.version("markproto"),
        log_level="ERROR",
        subscriptions=bus,
    )

    def resolve(text: str) -> MarkURL:
        try:
            return parse_url(text, default_host=None if host is None else host.identity)
        except InvalidURL as exc:
            raise ToolError(str(exc)) from None

    def tool(annotations: ToolAnnotations) -> Callable[[_Tool], _Tool]:
        """Register a tool; its docstring, dedented, is the description the agent reads."""

        def add(fn: _Tool) -> _Tool:
            description = inspect.cleandoc(fn.__doc__ or "")
            server.add_tool(
                fn, description=description, structured_output=False, annotations=annotations
            )
            return fn

        return add

    reader, writer = tool(_READ), tool(_WRITE)

    @reader
    async def mark_fetch(
        url: Url, force: Force = False, verbose: Verbose = False, offset: Offset = 0
    ) -> str:
        """Fetch a document: status, version, title, markdown. url#anchor returns one section.
        Bodies over 8 KB return an outline with #anchors unless force=true."""
        target = resolve(url)
        result = await _guard(client.fetch(dataclasses.replace(target, anchor="")))
        return _document(target, result, force, verbose, offset)

    @reader
    async def mark_list(
        url: Url,
        include_archived: bool = False,
        cursor: str | None = None,
        page_size: Annotated[int | None, Field(ge=1, le=1000)] = None,
        verbose: Verbose = False,
        offset: Offset = 0,
    ) -> str:
        """List one page of a folder. While complete is false, pass next-cursor as cursor."""
        result = await _guard(
            client.list(
                resolve(url),
                cursor=cursor,
                page_size=page_size,
                include_archived=include_archived,
            )
        )
        return _generated(
            "mark_list", result, ("entries", "complete", "next-cursor"), verbose, offset
        )

    @reader
    async def mark_versions(url: Url, verbose: Verbose = False, offset: Offset = 0) -> str:
        """A document's versions, newest first, and whether their hash chain is intact."""
        result = await _guard(client.versions(resolve(url)))
        lean = ("total", "current", "chain-valid", "chain-error")
        return _generated("mark_versions", result, lean, verbose, offset)

    @reader
    async def mark_lookup(
        url: Annotated[str, Field(description="scope: / or a folder")],
        query: Annotated[str, Field(description="2+ characters; * matches all")],
        filter: Annotated[
            str | None, Field(description="tag=x,modified-after=2025-01-01,key=value")
        ] = None,
        limit: Annotated[int | None, Field(ge=1, le=1000, description="default 10")] = None,
        match: Literal["catalog", "body"] | None = None,
        verbose: Verbose = False,
        offset: Offset = 0,
    ) -> str:
        """Find documents by tags and titles (match catalog, the default) or sections by their
        text (match body: rows are path#anchor with a snippet), ranked by importance.
        A long table: narrow the scope or lower the limit, or continue it with offset."""
        scope = resolve(url)
        result = await _guard(client.lookup(scope, query, filter=filter, limit=limit, match=match))
        return _lookup(result, query, scope, verbose, offset)

    @writer
    async def mark_publish(
        url: Url,
        body: Body,
        expected_version: Annotated[int, Field(ge=0, description="0 creates; N replaces vN")],
        metadata: Metadata = None,
    ) -> str:
        """Publish a new version of a .md document; an empty body unarchives it.
        A conflict returns your-version and server-version: fetch, merge, retry.
        Requires -token."""
        target = resolve(url)
        result = await _guard(
            client.publish(target, body.encode(), expected_version=expected_version, meta=metadata)
        )
        return _written(result)

    @writer
    async def mark_append(
        url: Url,
        body: Body,
        expected_version: Annotated[
            int, Field(ge=0, description="append to vN only; 0: the current version")
        ] = 0,
        metadata: Metadata = None,
    ) -> str:
        """Append markdown to the end of a document. Requires -token."""
        target = resolve(url)
        result = await _guard(
            client.append(
                target, body.encode(), expected_version=expected_version or None, meta=metadata
            )
        )
        return _written(result)

    @writer
    async def mark_archive(url: Url) -> str:
        """Archive a document: fetches answer archived, its history stays. Requires -token."""
        return _written(await _guard(client.archive(resolve(url))))

    @reader
    async def mark_discover(
        url: Annotated[str, Field(description="mark://host (optional with -host)")] = "",
    ) -> str:
        """The server's agent manifest: what it holds and how to use it."""
        target = resolve(url) if url else host
        if target is None:
            raise ToolError("give url: mark://host (the bridge runs without -host)")
        manifest = target.with_path(MANIFEST_PATH)
        result = await _guard(client.fetch(manifest))
        return _document(manifest, result, True, False, 0, via=f"mark_fetch url={manifest}")

    async def read(url: MarkURL) -> str:
        """A resource read: the whole document or one section, never outlined or cut (the
        client application asked for it, not the model)."""
        try:
            result = await client.fetch(url)
        except AnchorNotFound as exc:
            raise ResourceNotFoundError(str(exc)) from None
        except MarkError as exc:
            raise ResourceError(_one_line(exc)) from None
        if result.status == Status.NOT_FOUND:
            raise ResourceNotFoundError(f"{url}: not found")
        if not result.ok:
            raise ResourceError(f"{url}: {result.status}: {result.message}")
        return result.body.decode("utf-8", "replace")

    description = "A markdown document; #anchor selects one section"
    if host is None:

        @server.resource(
            "mark://{host}/{+path}", name="document", description=description, mime_type=_MD
        )
        async def document(host: str, path: str) -> str:
            return await read(_resource_url(f"mark://{host}", path))

    else:
        base = host.identity

        @server.resource(base + "/{+path}", name="document", description=description, mime_type=_MD)
        async def host_document(path: str) -> str:
            return await read(_resource_url(base, path))

    server.watches = mcpwatch.install(server, client, resolve, bus)
    return server


async def serve(client: Client, host: MarkURL | None = None) -> None:
    """Serve the bridge on stdin and stdout until stdin ends, then close ``client``."""
    async with client:
        server = build_server(client, host)
        try:
            await server.run_stdio_async()
        finally:
            await server.watches.close()


_MD = "text/markdown"


class _Server(MCPServer[Any]):
    """``MCPServer`` whose resource URIs may carry ``#anchor``: the SDK's template matcher stops
    ``{+path}`` at ``#``, so the first ``#`` is escaped before matching and split off again by
    ``_resource_url``. ``watches`` follows the resources agents subscribe to (`mcpwatch`)."""

    watches: mcpwatch.Subscriptions

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        return await super().read_resource(str(uri).replace("#", "%23", 1), context)


def _resource_url(server: str, path: str) -> MarkURL:
    try:
        url = parse_url(server)
    except InvalidURL as exc:
        raise ResourceNotFoundError(str(exc)) from None
    path, _, anchor = path.partition("#")
    return dataclasses.replace(url, path="/" + path, anchor=anchor)


# --- errors ---------------------------------------------------------------------------------


async def _guard(job: Awaitable[T]) -> T:
    """Run one client call; every failure to get an answer becomes a one-line ``ToolError``."""
    try:
        return await job
    except MarkError as exc:
        raise ToolError(_one_line(exc)) from None


def _one_line(exc: Exception) -> str:
    """The message on one line (a changed certificate's warning has several)."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _check(result: Result) -> None:
    if result.status in _FAILURES:
        hint = (
            " (give the bridge a token for this server: -token, or `mark token add`)"
            if result.status == Status.UNAUTHORIZED
            else ""
        )
        raise ToolError(f"{result.status}: {result.message}{hint}")


# --- results --------------------------------------------------------------------------------


def _envelope(
    result: Result,
    lean: Iterable[str],
    verbose: bool,
    body: str,
    *,
    offset: int = 0,
    resume: Callable[[int], str] | None = None,
    extra: dict[str, str] | None = None,
) -> str:
    """``status: <s>``, the lean keys present (every key with ``verbose``), a blank line, and the
    body from ``offset``, cut to keep the whole within ``MAX_RESULT``."""
    fields = {**result.meta, **(extra or {})}
    names = dict.fromkeys([*lean, *(fields if verbose else extra or {})])
    head = f"status: {result.status}\n" + "".join(
        f"{name}: {fields[name]}\n" for name in names if name in fields
    )
    if not body and not offset:
        return head
    return head + "\n" + page(body, offset, MAX_RESULT - len(head) - 1, resume)


def page(text: str, offset: int, room: int, resume: Callable[[int], str] | None) -> str:
    """``text[offset:]`` in at most ``room`` characters: cut after the last whole line that fits
    and marked, so the agent sees that more exists and how to ask for it."""
    total = len(text)
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of the result ({total} characters)")
    if offset == 0 and total <= room:
        return text
    end = total
    if total - offset > room - _MARKER_ROOM:
        limit = offset + room - _MARKER_ROOM
        end = text.rfind("\n", offset, limit) + 1
        if end <= offset:
            end = limit
    shown = text[offset:end]
    gap = "" if not shown or shown.endswith("\n") else "\n"
    span = f"showing characters {offset:,}-{end:,} of {total:,}"
    if end == total:
        return f"{shown}{gap}[{span}: the end]\n"
    how = resume(end) if resume is not None else "nothing continues it"
    return f"{shown}{gap}[truncated: {span}; {how}]\n"


def _document(
    url: MarkURL,
    result: Result,
    force: bool,
    verbose: bool,
    offset: int,
    *,
    via: str = "mark_fetch",
) -> str:
    """A fetched document as the agent sees it: one section, the outline, or (a page of) all."""
    _check(result)
    if result.status != Status.OK:
        return _envelope(result, (), verbose, _error_body(result))
    text = result.body.decode("utf-8", "replace")
    extra = {"title": _title(result.meta, text, url.path)}
    lean = ("version", "title")
    if url.anchor:
        part = mdoutline.section(text, url.anchor)
        if part is None:
            anchors = [h.anchor for h in mdoutline.headings(text)]
            raise ToolError(str(AnchorNotFound(url, anchors)))
        return _envelope(
            result, lean, verbose, part, offset=offset, resume=_fetch_resume(via), extra=extra
        )
    if force or offset or len(result.body) <= OUTLINE_THRESHOLD:
        return _envelope(
            result, lean, verbose, text, offset=offset, resume=_fetch_resume(via), extra=extra
        )
    extra["note"] = (
        f"{len(result.body):,} bytes, over {OUTLINE_THRESHOLD // 1024} KB: the outline follows. "
        f"Fetch a section with {url}#<anchor>, or everything with force=true."
    )
    tree = mdoutline.outline(text) or "(no headings)\n"
    return _envelope(
        result,
        lean,
        verbose,
        tree,
        resume=lambda end: "fetch sections by #anchor, or everything with force=true",
        extra=extra,
    )


def _fetch_resume(via: str) -> Callable[[int], str]:
    return lambda end: f"call {via} with force=true, offset={end} to continue"


def _title(meta: dict[str, str], text: str, path: str) -> str:
    """The catalog's title rule: the declared title, else the first ``# `` line, else the
    file name."""
    declared = meta.get("title", "").strip()
    if declared:
        return declared
    _, start = mdoutline.split_frontmatter(text)
    for line in text[start:].splitlines():
        line = line.lstrip()
        if line.startswith("# "):
            return line[2:].strip()
    return paths.base(path)


def _error_body(result: Result) -> str:
    return result.body.decode("utf-8", "replace").lstrip("\n")


def _generated(tool: str, result: Result, lean: Iterable[str], verbose: bool, offset: int) -> str:
    """A LIST or VERSIONS answer: the server's markdown under the lean envelope."""
    _check(result)
    return _envelope(
        result,
        lean,
        verbose,
        _error_body(result),
        offset=offset,
        resume=lambda end: f"call {tool} with the same arguments and offset={end}",
    )


def _lookup(result: LookupResult, query: str, scope: MarkURL, verbose: bool, offset: int) -> str:
    """The ranked table; lean rows show at most ten tags each."""
    _check(result)
    body = _error_body(result)
    if not verbose and any(len(row.tags) > _TAGS_SHOWN for row in result.rows):
        rows = [
            dataclasses.replace(
                row, tags=(*row.tags[:_TAGS_SHOWN], f"+{len(row.tags) - _TAGS_SHOWN} more")
            )
            if len(row.tags) > _TAGS_SHOWN
            else row
            for row in result.rows
        ]
        body_mode = result.meta.get("match") == "body"
        scope_path = paths.normalize_scope(scope.path)
        table = bodies.render_lookup(query, scope_path, rows, body_mode=body_mode)
        body = table.decode().lstrip("\n")
    extra = {"note": CATALOG_FALLBACK_NOTE} if result.answered_from_catalog else {}
    return _envelope(
        result,
        ("matches", "match"),
        verbose,
        body,
        offset=offset,
        resume=lambda end: (
            f"narrow the scope or lower the limit, or call mark_lookup with the same arguments "
            f"and offset={end}"
        ),
        extra=extra,
    )


def _written(result: Result) -> str:
    """A write's answer: the new version, or what the agent must know to act on a refusal."""
    _check(result)
    lean = ("version", "modified", "archived", "your-version", "server-version")
    body = "" if result.ok else _error_body(result)
    return _envelope(result, lean, False, body)
