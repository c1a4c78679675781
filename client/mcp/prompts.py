"""Prompts, the reference's three: ``orient`` on a document, ``recall`` a subject, ``whats-new``
since a date. Each is one user message naming the tools and the order that answers it cheaply,
and the rule every answer keeps: cite ``path/vN#anchor``, never invent, never infer absence.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated

from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS
from pydantic import Field

from markproto.client.mcp.bridge import Bridge

WHATS_NEW_DAYS = 7
CITE = (
    "Cite every fact as path/vN#anchor (from the >>> frames, or the fetched version and "
    "section). If a call fails, say so and stop: never infer that something is absent, and "
    "never invent what the documents do not say."
)


def register(bridge: Bridge) -> None:
    server = bridge.server

    @server.prompt(name="orient", description="Get oriented around one document")
    async def orient(
        url: Annotated[str, Field(description="the document: mark://host/path or /path")],
    ) -> str:
        return (
            f"Orient yourself around {url}. Call mark_explore on it: its outline with #anchors, "
            "the documents it links to, those that link to it, and its siblings. Then "
            "mark_fetch the one or two sections that matter most (url#anchor) and summarise "
            "what the document covers and how it relates to its neighbours (follow a link with "
            f"mark_explore if that helps). {CITE}"
        )

    @server.prompt(name="recall", description="Recall what the documents say about a subject")
    async def recall(
        subject: Annotated[str, Field(description="what to recall, in a few words")],
    ) -> str:
        return (
            f"Recall what is written about: {subject}. Call mark_lookup at / with "
            f'query "{subject}", match "body", limit 3 and budget 1200. If nothing relevant '
            "comes back, try once more with fewer or broader words. Read the sections in the "
            "result; mark_fetch a path#anchor only when a section is missing or cut. Answer "
            f"from what you read. {CITE}"
        )

    @server.prompt(name="whats-new", description="A digest of what changed recently")
    async def whats_new(
        since: Annotated[
            str | None, Field(description=f"YYYY-MM-DD (default: {WHATS_NEW_DAYS} days ago)")
        ] = None,
    ) -> str:
        start = _day(since) if since else datetime.now(UTC).date() - timedelta(WHATS_NEW_DAYS)
        day = start.isoformat()
        return (
            f'Summarise what changed since {day}. Call mark_lookup at / with query "*" and '
            f'filter "modified-after={day}" (limit 50). Digest the documents '
            "newest and most important first, one line each with what it is about; mark_fetch "
            f"only those whose title does not say enough. {CITE}"
        )


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise MCPError(INVALID_PARAMS, f"since: {text!r} is not a date like 2025-01-31") from None
