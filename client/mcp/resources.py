"""Resources, for MCP clients that let a person pick documents: a template per server
(``<host>/{+path}``, or ``mark://{host}/{+path}`` without ``-host``; ``#anchor`` selects one
section), each server's index hub and agent manifest, and its top-level documents.

The top-level documents are listed when the client asks (one LIST of ``/`` per server, at most
``LISTED`` documents each), so the list is current without a background task or change
notifications. A server that cannot be listed contributes its fixed entries only. A resource read
is never outlined or cut: the client application asked for it, not the model.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.types import Resource as MCPResource

from markproto.client import AnchorNotFound, MarkError
from markproto.client.mcp.bridge import Bridge
from markproto.client.mcp.envelope import one_line
from markproto.protocol import bodies
from markproto.protocol.errors import InvalidURL, MalformedResponse
from markproto.protocol.limits import MANIFEST_PATH
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL, parse_url

MD = "text/markdown"
LISTED = 50
"""Top-level documents listed per server."""
FIXED = (("/index.md", "Index hub"), (MANIFEST_PATH, "Agent manifest"))
DESCRIPTION = "A markdown document; #anchor selects one section"


def register(bridge: Bridge) -> None:
    client = bridge.client
    server = bridge.server

    async def read(url: MarkURL) -> str:
        try:
            result = await client.fetch(url)
        except AnchorNotFound as exc:
            raise ResourceNotFoundError(str(exc)) from None
        except MarkError as exc:
            raise ResourceError(one_line(exc)) from None
        if result.status == Status.NOT_FOUND:
            raise ResourceNotFoundError(f"{url}: not found")
        if not result.ok:
            raise ResourceError(f"{url}: {result.status}: {result.message}")
        try:
            return result.body.decode("utf-8")
        except UnicodeDecodeError:
            return f"({len(result.body):,} bytes that are not UTF-8 text: not shown)"

    def template(base: str) -> Callable[[str], Awaitable[str]]:
        async def document(path: str) -> str:
            return await read(_resource_url(base, path))

        return document

    def fixed(url: MarkURL) -> Callable[[], Awaitable[str]]:
        async def document() -> str:
            return await read(url)

        return document

    if not bridge.hosts:

        @server.resource(
            "mark://{host}/{+path}", name="document", description=DESCRIPTION, mime_type=MD
        )
        async def document(host: str, path: str) -> str:
            return await read(_resource_url(f"mark://{host}", path))

    for host in bridge.hosts:
        base = host.identity
        server.resource(base + "/{+path}", name="document", description=DESCRIPTION, mime_type=MD)(
            template(base)
        )
        for path, name in FIXED:
            server.resource(base + path, name=name, mime_type=MD)(fixed(host.with_path(path)))

    async def listing() -> list[MCPResource]:
        found = await asyncio.gather(*(_top_level(bridge, host) for host in bridge.hosts))
        return [resource for resources in found for resource in resources]

    server.listing = listing


async def _top_level(bridge: Bridge, host: MarkURL) -> list[MCPResource]:
    """The ``.md`` documents at the top of ``host`` (not the fixed ones), [] when unlistable."""
    try:
        result = await bridge.client.list(host.with_path("/"))
        entries = bodies.parse_index(result.body) if result.status == Status.OK else []
    except (MarkError, MalformedResponse):
        return []
    fixed = {path for path, _ in FIXED}
    names = [
        e.name
        for e in entries
        if not e.is_dir and e.name.endswith(".md") and f"/{e.name}" not in fixed
    ]
    return [
        MCPResource(uri=str(host.with_path(f"/{name}")), name=name, mime_type=MD)
        for name in names[:LISTED]
    ]


def _resource_url(server: str, path: str) -> MarkURL:
    try:
        url = parse_url(server)
    except InvalidURL as exc:
        raise ResourceNotFoundError(str(exc)) from None
    path, _, anchor = path.partition("#")
    return dataclasses.replace(url, path="/" + path, anchor=anchor)
