"""The bridge's frame: the servers it was started for, the profile, how a tool is registered, and
the few places the SDK's defaults do not suit an agent.

Tool groups live in their own modules (``documents``, ``lookup``, ``publishing``, ...), each with
a ``register(bridge)`` that adds its tools through ``Bridge.tool``; ``build_server`` calls them in
the order the tools are listed. A new group (the link graph, say) is one more module and one
more line in ``GROUPS``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.subscriptions import InMemorySubscriptionBus, SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ToolAnnotations
from mcp.types import Resource as MCPResource
from mcp.types import Tool as MCPTool
from pydantic import ValidationError

from markproto.client import Client
from markproto.client.mcp.envelope import MAX_RESULT
from markproto.protocol import paths
from markproto.protocol.errors import InvalidURL
from markproto.protocol.url import MarkURL, parse_url

if TYPE_CHECKING:
    from markproto.client.mcp.watching import Subscriptions

Profile = Literal["lean", "full"]
PROFILES: tuple[Profile, ...] = ("lean", "full")
_Tool = TypeVar("_Tool", bound=Callable[..., Awaitable[str]])


@dataclasses.dataclass
class Bridge:
    """What every tool group needs: the client, the servers, the profile and the SDK server."""

    client: Client
    hosts: tuple[MarkURL, ...]
    """The ``-host`` servers, the first the default for bare paths; may be empty."""
    profile: Profile
    server: _Server

    @property
    def default(self) -> MarkURL | None:
        return self.hosts[0] if self.hosts else None

    def resolve(self, text: str, *, argument: str = "url") -> MarkURL:
        """A URL argument; a bad one is a tool error naming the argument."""
        default = self.default
        try:
            return parse_url(text, default_host=None if default is None else default.identity)
        except InvalidURL as exc:
            raise ToolError(f"{argument}: {exc}") from None

    def folder(self, text: str, tool: str, *, argument: str = "url") -> MarkURL:
        """A URL that must name a folder (LIST, LOOKUP): a document is refused before sending,
        since the server would answer only ``not-found``."""
        url = self.resolve(text, argument=argument)
        document = _document_of(url.path)
        if document is not None:
            where = paths.parent(document).rstrip("/")
            raise ToolError(
                f"{argument}: {url.path} is a document, not a folder: {tool} takes a folder "
                f"such as {where}/ (read the document with mark_fetch)"
            )
        return url

    def document(self, text: str, tool: str) -> MarkURL:
        """A URL that must name a document (VERSIONS): a folder is refused before sending."""
        url = self.resolve(text)
        if url.path.endswith("/"):
            raise ToolError(
                f"url: {url.path} is a folder, not a document: {tool} takes a document such as "
                f"{url.path}index.md (list the folder with mark_list)"
            )
        return url

    def tool(
        self,
        *,
        read_only: bool,
        destructive: bool = False,
        idempotent: bool = True,
        advanced: bool = False,
    ) -> Callable[[_Tool], _Tool]:
        """Register a tool; its docstring, dedented, is the description the agent reads. An
        ``advanced`` tool is left out of the lean profile."""
        if read_only:
            annotations = ToolAnnotations(read_only_hint=True)
        else:
            annotations = ToolAnnotations(
                read_only_hint=False, destructive_hint=destructive, idempotent_hint=idempotent
            )

        def add(fn: _Tool) -> _Tool:
            if advanced and self.profile == "lean":
                return fn
            description = inspect.cleandoc(fn.__doc__ or "")
            self.server.add_tool(
                fn, description=description, structured_output=False, annotations=annotations
            )
            return fn

        return add


def _document_of(path: str) -> str | None:
    """The document a path names (``/a.md``, or ``/a.md/v3`` pinned), None for a folder."""
    if path.endswith(".md"):
        return path
    pinned = paths.split_version(path)
    return pinned[0] if pinned is not None and pinned[0].endswith(".md") else None


def instructions(hosts: Sequence[MarkURL]) -> str:
    """What the agent reads once: where it is connected and the cheapest way to an answer."""
    if hosts:
        where = f"Connected to {hosts[0].identity}; use bare paths like /index.md."
        if len(hosts) > 1:
            others = ", ".join(host.identity for host in hosts[1:])
            where += f" Also {others}: full URLs, or mark_lookup_all to search them all."
    else:
        where = "Use full mark:// URLs like mark://host/index.md."
    return (
        f"{where} Cheap path: mark_lookup scoped to the likely folder with match "
        '"body", limit 3 and budget 1200: the best sections come in the same result, framed '
        "by >>> path/vN#anchor lines to cite; otherwise mark_fetch the best path#anchor. Fetch "
        "whole documents only when a section is not enough. If a lookup or fetch fails, say so "
        "and stop: never infer that something is absent. A lookup answered from the catalog "
        "(its note says so) is inconclusive for a question about body text. A result cut at "
        f"{MAX_RESULT:,} characters ends with a [truncated: ...] line naming the call that "
        "continues it."
    )


def build_server(
    client: Client, hosts: Sequence[MarkURL] = (), profile: Profile = "full"
) -> _Server:
    """The bridge's tools, prompts and resources over ``client`` (which the caller closes);
    bare paths name documents on the first of ``hosts``."""
    from markproto.client.mcp import (
        documents,
        graph,
        lookup,
        prompts,
        publishing,
        resources,
        watching,
    )

    bus = InMemorySubscriptionBus()
    server = _Server(
        "markproto",
        instructions=instructions(hosts),
        version=metadata.version("markproto"),
        log_level="ERROR",
        subscriptions=bus,
    )
    server.bus = bus
    bridge = Bridge(client, tuple(hosts), profile, server)
    for group in (documents, lookup, graph, publishing, resources, prompts, watching):
        group.register(bridge)
    return server


async def serve(client: Client, hosts: Sequence[MarkURL] = (), profile: Profile = "full") -> None:
    """Serve the bridge on stdin and stdout until stdin ends, then close ``client``."""
    async with client:
        server = build_server(client, hosts, profile)
        try:
            await server.run_stdio_async()
        finally:
            if server.watches is not None:
                await server.watches.close()


class _Server(MCPServer[Any]):
    """``MCPServer`` with five changes for agents: an argument the schema refuses is one line
    naming the argument and the rule (not pydantic's multi-line text with a URL), and so is a
    prompt's missing argument; ``tools/list``
    leaves out pydantic's ``title`` annotations (a tenth of its bytes, read every session);
    resource URIs may carry ``#anchor`` (the SDK's template matcher stops ``{+path}`` at ``#``,
    so the first ``#`` is escaped before matching); and ``resources/list`` adds what
    ``listing`` finds. ``bus`` carries resource updates to listen streams, and ``watches``
    follows the resources subscribed to (``watching``)."""

    listing: Callable[[], Awaitable[list[MCPResource]]] | None = None
    bus: SubscriptionBus | None = None
    watches: Subscriptions | None = None

    async def list_tools(self) -> list[MCPTool]:
        return [
            tool.model_copy(update={"input_schema": _untitled(tool.input_schema)})
            for tool in await super().list_tools()
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {argument_errors(cause)}") from cause

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Any = None
    ) -> Any:
        """A missing argument or unknown prompt is a clear protocol error (the SDK's own check
        raises a ValueError, which the 2026 dispatcher reports as an internal error)."""
        prompts = {prompt.name: prompt for prompt in await self.list_prompts()}
        if name not in prompts:
            raise MCPError(INVALID_PARAMS, f"no prompt {name!r} (prompts: {', '.join(prompts)})")
        given = arguments or {}
        for argument in prompts[name].arguments or []:
            if argument.required and not given.get(argument.name):
                raise MCPError(INVALID_PARAMS, f"{argument.name}: required")
        return await super().get_prompt(name, arguments, context)

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        return await super().read_resource(str(uri).replace("#", "%23", 1), context)

    async def list_resources(self) -> list[MCPResource]:
        fixed = await super().list_resources()
        return fixed + (await self.listing() if self.listing is not None else [])


def _untitled(schema: Any) -> Any:
    """A JSON schema without its ``title`` keywords (a property named ``title`` stays)."""
    if isinstance(schema, list):
        return [_untitled(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: {name: _untitled(sub) for name, sub in value.items()}
        if key == "properties"
        else _untitled(value)
        for key, value in schema.items()
        if key != "title"
    }


def argument_errors(exc: ValidationError) -> str:
    """Pydantic's complaints as one line: ``argument: rule (got value)``, joined by ``; ``."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "missing":
            parts.append(f"{where}: required")
            continue
        rule = str(error["msg"]).removeprefix("Input ").removeprefix("Value error, ")
        got = repr(error.get("input"))
        got = got if len(got) <= 40 else got[:37] + "..."
        parts.append(f"{where}: {rule[:1].lower()}{rule[1:]} (got {got})")
    return "; ".join(parts)
