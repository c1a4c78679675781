"""Reading tools: ``mark_fetch``, ``mark_list``, ``mark_versions`` and ``mark_discover``.

A fetched document shows its version, title and tags (what the agent needs to cite it and to
republish it without losing its catalog entry); a body over 8 KB comes back as its outline
unless forced, and ``url#anchor`` returns one section.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from markproto.client import AnchorNotFound, Result
from markproto.client.mcp.bridge import Bridge
from markproto.client.mcp.envelope import check, envelope, error_body, generated, guard
from markproto.client.mcp.params import Force, Offset, PageSize, Url, Verbose
from markproto.protocol import document, mdoutline
from markproto.protocol.limits import MANIFEST_PATH, OUTLINE_THRESHOLD
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL

LEAN = ("version", "title", "tags")


def register(bridge: Bridge) -> None:
    client = bridge.client
    reader = bridge.tool(read_only=True)

    @reader
    async def mark_fetch(
        url: Url, force: Force = False, verbose: Verbose = False, offset: Offset = 0
    ) -> str:
        """Fetch a document: status, version, title, tags, markdown. url#anchor returns one
        section. Bodies over 8 KB return an outline with #anchors unless force=true."""
        target = bridge.resolve(url)
        result = await guard(client.fetch(dataclasses.replace(target, anchor="")))
        return render(target, result, force, verbose, offset)

    @reader
    async def mark_list(
        url: Url,
        include_archived: bool = False,
        cursor: str | None = None,
        page_size: PageSize = None,
        verbose: Verbose = False,
        offset: Offset = 0,
    ) -> str:
        """List one page of a folder. While complete is false, pass next-cursor as cursor."""
        folder = bridge.folder(url, "mark_list")
        result = await guard(
            client.list(
                folder, cursor=cursor, page_size=page_size, include_archived=include_archived
            )
        )
        return generated(
            "mark_list", result, ("entries", "complete", "next-cursor"), verbose, offset
        )

    @reader
    async def mark_versions(url: Url, verbose: Verbose = False, offset: Offset = 0) -> str:
        """A document's versions, newest first, and whether their hash chain is intact."""
        result = await guard(client.versions(bridge.document(url, "mark_versions")))
        lean = ("total", "current", "chain-valid", "chain-error")
        return generated("mark_versions", result, lean, verbose, offset)

    @bridge.tool(read_only=True, advanced=True)
    async def mark_discover(
        url: Annotated[str, Field(description="mark://host (optional with -host)")] = "",
    ) -> str:
        """The server's agent manifest: what it holds and how to use it."""
        target = bridge.resolve(url) if url else bridge.default
        if target is None:
            raise ToolError("url: required without -host (give mark://host)")
        manifest = target.with_path(MANIFEST_PATH)
        result = await guard(client.fetch(manifest))
        return render(manifest, result, True, False, 0, via=f"mark_fetch url={manifest}")


def render(
    url: MarkURL,
    result: Result,
    force: bool,
    verbose: bool,
    offset: int,
    *,
    via: str = "mark_fetch",
) -> str:
    """A fetched document as the agent sees it: one section, the outline, or (a page of) all."""
    check(result)
    if result.status != Status.OK:
        return envelope(result, (), verbose, error_body(result))
    text = result.body.decode("utf-8", "replace")
    extra = {"title": document.title(url.path, result.meta, document.own_facts(text))}
    resume = _fetch_resume(via)
    if url.anchor:
        part = mdoutline.section(text, url.anchor)
        if part is None:
            anchors = [h.anchor for h in mdoutline.headings(text)]
            raise ToolError(f"url: {AnchorNotFound(url, anchors)}")
        return envelope(result, LEAN, verbose, part, offset=offset, resume=resume, extra=extra)
    if force or offset or len(result.body) <= OUTLINE_THRESHOLD:
        return envelope(result, LEAN, verbose, text, offset=offset, resume=resume, extra=extra)
    extra["note"] = (
        f"{len(result.body):,} bytes, over {OUTLINE_THRESHOLD // 1024} KB: the outline follows. "
        f"Fetch a section with {url}#<anchor>, or everything with force=true."
    )
    tree = mdoutline.outline(text) or "(no headings)\n"
    return envelope(
        result,
        LEAN,
        verbose,
        tree,
        resume=lambda end: "fetch sections by #anchor, or everything with force=true",
        extra=extra,
    )


def _fetch_resume(via: str) -> Callable[[int], str]:
    return lambda end: f"call {via} with force=true, offset={end} to continue"
