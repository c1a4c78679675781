"""Writing tools: ``mark_publish``, ``mark_append`` and ``mark_archive``.

``mark_publish`` goes through ``client.publishing``: without ``metadata`` the current version's
metadata carries over (``kept:`` names the keys), with it the keys left out are named
(``dropped:``), and ``on_conflict: merge`` merges a conflict three ways (a clean merge is
published, an overlap comes back with git-style markers to resolve). A body over 1 MiB or bad
metadata is a tool error before anything is sent.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field

from markproto.client import publishing
from markproto.client.mcp.bridge import Bridge
from markproto.client.mcp.envelope import check, envelope, error_body, guard
from markproto.client.mcp.params import Body, Metadata, Url
from markproto.client.results import Result
from markproto.protocol.status import Status

LEAN = ("version", "modified", "archived", "your-version", "server-version")


def register(bridge: Bridge) -> None:
    client = bridge.client

    @bridge.tool(read_only=False, destructive=True, idempotent=True)
    async def mark_publish(
        url: Url,
        body: Body,
        expected_version: Annotated[int, Field(ge=0, description="0 creates; N replaces vN")],
        metadata: Metadata = None,
        on_conflict: Annotated[
            Literal["fail", "merge"],
            Field(description="merge: a clean three-way merge is published, an overlap returned"),
        ] = "fail",
    ) -> str:
        """Publish a new version of a .md document; an empty body unarchives it. A conflict
        returns your-version and server-version (with on_conflict=merge, the merge).
        Requires -token."""
        target = bridge.resolve(url)
        done = await guard(
            publishing.publish(
                client,
                target,
                body.encode(),
                expected_version=expected_version,
                meta=metadata,
                on_conflict=on_conflict,
            )
        )
        return render(done, expected_version, metadata is not None)

    @bridge.tool(read_only=False, destructive=False, idempotent=False)
    async def mark_append(
        url: Url,
        body: Body,
        expected_version: Annotated[
            int, Field(ge=0, description="append to vN only; 0: the current version")
        ] = 0,
        metadata: Annotated[
            dict[str, str] | None, Field(description="keys to set; the others are kept")
        ] = None,
    ) -> str:
        """Append markdown to the end of a document; its metadata is kept. Requires -token."""
        target = bridge.resolve(url)
        result = await guard(
            client.append(
                target, body.encode(), expected_version=expected_version or None, meta=metadata
            )
        )
        return written(result)

    @bridge.tool(read_only=False, destructive=True, idempotent=True)
    async def mark_archive(url: Url) -> str:
        """Archive a document: fetches answer archived, its history stays. Requires -token."""
        return written(await guard(client.archive(bridge.resolve(url))))


def written(result: Result, extra: dict[str, str] | None = None, body: str = "") -> str:
    """A write's answer: the new version, or what the agent must know to act on a refusal."""
    check(result)
    text = body or ("" if result.ok else error_body(result))
    return envelope(
        result,
        LEAN,
        False,
        text,
        resume=lambda end: (
            "too long for one result: fetch the current version and reapply your edit"
        ),
        extra=extra,
    )


def render(done: publishing.Published, expected: int, metadata_given: bool) -> str:
    """A publish's answer with what happened to the metadata and to a conflict."""
    extra = {}
    if done.kept:
        extra["kept"] = f"{', '.join(done.kept)} (metadata of v{expected})"
    if done.dropped:
        extra["dropped"] = f"{', '.join(done.dropped)} (not in metadata; give them to keep them)"
    merge = done.merge
    if merge is None:
        if done.unmerged:
            extra["note"] = f"not merged: {done.unmerged}"
        elif done.result.status == Status.CONFLICT:
            extra["note"] = "publish again with on_conflict=merge to merge your edit"
        return written(done.result, extra)
    between = f"your edit of v{merge.base_version} and server v{merge.server_version}"
    if merge.published:
        extra["merged"] = f"{between}, clean: published"
        return written(done.result, extra)
    if merge.conflicts:
        regions = f"{merge.conflicts} overlapping region{'s' * (merge.conflicts != 1)}"
        todo = "resolve the <<<<<<< markers in the text below, then publish it"
        extra["merged"] = f"{regions} between {between}: {todo}"
    else:
        todo = "publish the merged text below with the metadata you mean"
        extra["merged"] = f"{between}: the text merges cleanly but the metadata clashes: {todo}"
    extra["merged"] += f" with expected_version={merge.server_version}"
    if merge.clashes:
        extra["clashes"] = f"{', '.join(merge.clashes)} (changed on both sides; yours kept)"
    if metadata_given or merge.clashes:
        extra["metadata"] = json.dumps(merge.meta, ensure_ascii=False, sort_keys=True)
    return written(done.result, extra, merge.text)
