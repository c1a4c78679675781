"""First-run content for the default root: a welcome page and the agent manifest.

Published through the store like any other document, so both are versioned and hash-chained from
their first byte and a newcomer can edit them with the token printed at first start.
"""

from __future__ import annotations

from pathlib import Path

from markproto.protocol import metadata
from markproto.protocol.limits import MANIFEST_PATH
from markproto.server.storage.store import Store

WELCOME = """\
# Welcome to markproto

This server speaks the Mark Protocol: versioned, hash-chained markdown over QUIC.

## Reading

    mark fetch mark://localhost/index.md
    mark list mark://localhost/
    mark lookup --match body --query "hash chain" mark://localhost/

## Writing

Every write needs a publish token (the server printed one at its first start):

    mark publish --auth TOKEN --expected-version 0 --body "# Hello" mark://localhost/hello.md
    mark fetch mark://localhost/hello.md

Every version is kept: `mark versions mark://localhost/hello.md` lists them, and the chain of hashes
shows that none was changed after the fact.

## Watching

    mark watch mark://localhost/

prints one line for every change as it happens, and resumes where it left off.
"""

MANIFEST = """\
# markproto

## Description

A knowledge server speaking the Mark Protocol: versioned markdown documents, each version linked to
the one before it by its hash.

## Paths

- /index.md — how to read and write here

## Capabilities

- lookup-match: catalog, body
- lookup-links: direction incoming|outgoing|both, relations, depth 1-5, limit, cursor
{watch}
## Guidelines

Use LOOKUP with `match: body` and a small limit to find the section that answers a question, then
fetch that `path#anchor` instead of whole documents. LOOKUP with `match: links` on a document
lists its links and what links to it (`mark links`, `mark backlinks`, `mark graph`).
"""

WATCH_CAPABILITY = "- watch\n"
"""The manifest line that says WATCH is served (advisory, like every manifest line: a server
without WATCH answers it ``bad-request``)."""


def seed(root: Path, *, watch: bool = True) -> list[str]:
    """Publish the first-run documents into ``root`` where they are missing; return their paths.
    The manifest lists ``watch`` under its capabilities when the server serves WATCH."""
    store = Store(root)
    created = []
    manifest = MANIFEST.format(watch=WATCH_CAPABILITY if watch else "")
    documents = {"/index.md": (WELCOME, {"title": "Welcome"}), MANIFEST_PATH: (manifest, {})}
    try:
        for path, (body, meta) in documents.items():
            if store.layout.pointer(path) is None:
                store.publish(
                    path, body.encode(), metadata.with_type_default(path, meta), expected=0
                )
                created.append(path)
    finally:
        store.close()
    return created
