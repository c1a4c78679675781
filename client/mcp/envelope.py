"""What a tool result looks like, and which outcomes are tool errors.

A result is one text block, the lean envelope: ``status: <s>``, a few ``key: value`` lines (every
metadata key with ``verbose``), a blank line, the body. No result exceeds ``MAX_RESULT``
characters: a longer body is cut after a whole line and ends with a marker naming the call that
continues it.

A tool error (``isError``) means the call cannot succeed as made: no answer came (transport,
trust), or the answer says the request itself is wrong (``bad-request``), needs a token
(``unauthorized``) or time (``server-error``, ``rate-limited``). A refusal the agent can act on
(``not-found``, ``conflict``, ``archived``, ``not-permitted``) is an ordinary result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from markproto.client import MarkError, Result
from markproto.protocol.metadata import split_tags
from markproto.protocol.status import Status

MAX_RESULT = 40_000
"""Characters of one tool result, envelope and truncation marker included."""
MARKER_ROOM = 200
"""Characters kept free for the truncation marker."""
TAGS_SHOWN = 10
FAILURES = frozenset(
    {Status.UNAUTHORIZED, Status.BAD_REQUEST, Status.SERVER_ERROR, Status.RATE_LIMITED}
)
"""Statuses that are tool errors: retrying the call unchanged is pointless (bad-request), needs a
token (unauthorized) or time (server-error, rate-limited)."""

T = TypeVar("T")
Resume = Callable[[int], str]


async def guard(job: Awaitable[T]) -> T:
    """Run one client call; every failure to get an answer becomes a one-line ``ToolError``."""
    try:
        return await job
    except MarkError as exc:
        raise ToolError(one_line(exc)) from None


def one_line(exc: Exception) -> str:
    """The message on one line (a changed certificate's warning has several)."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def check(result: Result) -> None:
    """Raise the tool error a failure status is; let every other answer through."""
    if result.status in FAILURES:
        hint = (
            " (give the bridge a token for this server: -token, or `mark token add`)"
            if result.status == Status.UNAUTHORIZED
            else ""
        )
        raise ToolError(f"{result.status}: {result.message}{hint}")


def envelope(
    result: Result,
    lean: Iterable[str],
    verbose: bool,
    body: str,
    *,
    offset: int = 0,
    resume: Resume | None = None,
    extra: dict[str, str] | None = None,
) -> str:
    """``status: <s>``, the lean keys present (every key with ``verbose``), a blank line, and the
    body from ``offset``, cut to keep the whole within ``MAX_RESULT``. ``extra`` keys are the
    bridge's own (title, note, ...) and always shown; lean ``tags`` are capped at ten."""
    fields = {**result.meta, **(extra or {})}
    if not verbose and "tags" in fields:
        fields["tags"] = capped_tags(fields["tags"])
    names = dict.fromkeys([*lean, *(fields if verbose else extra or {})])
    head = f"status: {result.status}\n" + "".join(
        f"{name}: {fields[name]}\n" for name in names if name in fields
    )
    if not body and not offset:
        return head
    return head + "\n" + page(body, offset, MAX_RESULT - len(head) - 1, resume)


def capped_tags(value: str) -> str:
    """A comma list of at most ten tags, then ``+N more``."""
    tags = split_tags(value)
    if len(tags) <= TAGS_SHOWN:
        return value
    return ",".join([*tags[:TAGS_SHOWN], f"+{len(tags) - TAGS_SHOWN} more"])


def page(text: str, offset: int, room: int, resume: Resume | None) -> str:
    """``text[offset:]`` in at most ``room`` characters: cut after the last whole line that fits
    and marked, so the agent sees that more exists and how to ask for it."""
    total = len(text)
    if offset > total:
        raise ToolError(f"offset: {offset} is past the end of the result ({total} characters)")
    if offset == 0 and total <= room:
        return text
    end = total
    if total - offset > room - MARKER_ROOM:
        limit = offset + room - MARKER_ROOM
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


def error_body(result: Result) -> str:
    """A generated body (a refusal's message, an index, a history) without its leading newline."""
    return result.body.decode("utf-8", "replace").lstrip("\n")


def generated(tool: str, result: Result, lean: Iterable[str], verbose: bool, offset: int) -> str:
    """A LIST or VERSIONS answer: the server's markdown under the lean envelope."""
    check(result)
    return envelope(
        result,
        lean,
        verbose,
        error_body(result),
        offset=offset,
        resume=lambda end: f"call {tool} with the same arguments and offset={end}",
    )
