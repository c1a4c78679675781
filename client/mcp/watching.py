"""Changes: resource subscriptions backed by WATCH, and ``mark_changes``.

An agent subscribes to a document or folder resource (``mark://host/docs/a.md``,
``mark://host/docs/``) the way its MCP era does: ``resources/subscribe`` up to 2025-11-25, a
``subscriptions/listen`` stream naming the URI from 2026-07-28 on. Either way the bridge opens one
WATCH per URI, shared by every subscriber of it, and sends ``notifications/resources/updated``
with that URI for each change the server reports (a resync counts: something changed that cannot
be told). The notification says only that the resource changed; ``mark_changes`` with a cursor
says what changed, and is also the way in for clients without subscriptions.

Serving ``resources/subscribe`` needs the SDK's low-level server, which ``MCPServer`` keeps
private (``_lowlevel_server``); that one attribute is read here, in `register`, and nowhere else.
The bus the 2026 listen streams are fed from is the one ``bridge.build_server`` gives the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Annotated, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams
from pydantic import Field

from markproto.client import Changes, Client, MarkError, Watch
from markproto.client.mcp.bridge import Bridge
from markproto.client.mcp.envelope import guard, one_line
from markproto.protocol.errors import InvalidURL
from markproto.protocol.url import MarkURL, parse_url

log = logging.getLogger("markproto.client.mcp")

CHANGES_LIMIT = 200
"""Changes one ``mark_changes`` call returns at most; ``complete: false`` says more follow."""

Since = Annotated[
    str | None,
    Field(description="cursor from an earlier mark_changes; omit to get the current cursor"),
]
WatchUrl = Annotated[str, Field(description="a document, or a folder and everything below it")]


class Subscriptions:
    """The resources subscribed to, each followed by one WATCH while anyone subscribes."""

    def __init__(self, client: Client, bus: SubscriptionBus) -> None:
        self.client = client
        self.bus = bus
        self._subscribers: dict[str, set[object]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.session: Any = None
        """Where legacy updates go: the bridge serves one client (stdio), and the SDK hands each
        request a session of its own over the one connection, so the latest will do."""

    def __len__(self) -> int:
        return len(self._tasks)

    async def subscribe(self, uri: str, subscriber: object) -> None:
        """Follow ``uri`` for ``subscriber`` (a legacy session, or a listen stream); an
        ``MCPError`` the client sees when the server will not watch it."""
        if uri not in self._tasks:
            watch = self.client.watch(_watch_url(uri))
            try:
                await watch.start()  # the server's answer now, not in the background
            except MarkError as exc:
                raise _mcp_error(f"{uri}: {one_line(exc)}") from None
            self._tasks[uri] = asyncio.create_task(self._follow(uri, watch))
        self._subscribers.setdefault(uri, set()).add(subscriber)

    def unsubscribe(self, uri: str, subscriber: object) -> None:
        subscribers = self._subscribers.get(uri)
        if subscribers is None:
            return
        subscribers.discard(subscriber)
        if not subscribers:
            del self._subscribers[uri]
            task = self._tasks.pop(uri, None)
            if task is not None:
                task.cancel()

    async def close(self) -> None:
        """Stop every WATCH (the bridge is exiting)."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._subscribers.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _follow(self, uri: str, watch: Watch) -> None:
        try:
            async for _ in watch:
                await self._updated(uri)
        except MarkError as exc:
            log.warning("no more updates for %s: %s", uri, one_line(exc))
            self._tasks.pop(uri, None)
        finally:
            await watch.aclose()

    async def _updated(self, uri: str) -> None:
        subscribers = self._subscribers.get(uri, set())
        if LEGACY in subscribers and self.session is not None:
            with contextlib.suppress(Exception):  # the client is gone; stdin's end stops us
                await self.session.send_resource_updated(uri)
        if any(isinstance(s, _Listen) for s in subscribers):
            await self.bus.publish(ResourceUpdated(uri=uri))


class _Listen:
    """One ``subscriptions/listen`` stream, as a subscriber."""

    __slots__ = ()


LEGACY = "resources/subscribe"
"""The subscriber that ``resources/subscribe`` adds (one client per bridge)."""


def register(bridge: Bridge) -> None:
    """Resource subscriptions (both eras) and the ``mark_changes`` tool."""
    server, client = bridge.server, bridge.client
    assert server.bus is not None
    subscriptions = server.watches = Subscriptions(client, server.bus)

    async def on_subscribe(ctx: ServerRequestContext[Any, Any], params: Any) -> EmptyResult:
        subscriptions.session = ctx.session
        await subscriptions.subscribe(params.uri, LEGACY)
        return EmptyResult()

    async def on_unsubscribe(ctx: ServerRequestContext[Any, Any], params: Any) -> EmptyResult:
        subscriptions.unsubscribe(params.uri, LEGACY)
        return EmptyResult()

    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, on_subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, on_unsubscribe)

    async def listening(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Follow the resources a ``subscriptions/listen`` stream names, while it lasts."""
        if ctx.method != "subscriptions/listen" or ctx.request_id is None:
            return await call_next(ctx)
        notifications = (ctx.params or {}).get("notifications") or {}
        uris = [str(uri) for uri in notifications.get("resourceSubscriptions") or ()]
        listener = _Listen()
        try:
            for uri in uris:
                await subscriptions.subscribe(uri, listener)
            return await call_next(ctx)
        finally:
            for uri in uris:
                subscriptions.unsubscribe(uri, listener)

    server.middleware.append(listening)

    @bridge.tool(read_only=True, advanced=True)
    async def mark_changes(url: WatchUrl, since: Since = None) -> str:
        """What changed under a document or folder since a cursor: one line per change
        (op, path, version), oldest first, and the cursor to pass next time. Without since,
        only the current cursor. Subscribe to the resource to be told when to call this."""
        found = await guard(client.changes(bridge.resolve(url), since=since, limit=CHANGES_LIMIT))
        return render(found, since is None)


def render(found: Changes, fresh: bool) -> str:
    """The envelope the bridge's tools share: ``status``, keys, a blank line, the lines."""
    head = "status: ok\n"
    if found.cursor is not None:
        head += f"cursor: {found.cursor}\n"
    if found.resync:
        head += (
            "resync: true\nnote: the server cannot replay changes since that cursor (it "
            "restarted, or the cursor is too old): re-read what you rely on, then use cursor\n"
        )
    elif not found.complete:
        head += "complete: false\nnote: more changes follow; call again with since=cursor\n"
    elif fresh:
        head += "note: the current position; pass it as since to get later changes\n"
    lines = []
    for event in found.events:
        agent = f" by {event.agent}" if event.agent else ""
        lines.append(f"{event.op} {event.path} v{event.version}{agent}\n")
    if not lines:
        return head if fresh or found.resync else head + "\n(no changes)\n"
    return head + "\n" + "".join(lines)


def _watch_url(uri: str) -> MarkURL:
    """The document or folder a resource URI names (an ``#anchor`` watches its document)."""
    try:
        url = parse_url(uri)
    except InvalidURL as exc:
        raise _mcp_error(str(exc)) from None
    return url.with_path(url.path)


def _mcp_error(message: str) -> MCPError:
    return MCPError(INVALID_PARAMS, message)
