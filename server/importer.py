"""``mark-server import``: a folder of markdown straight into a content root, offline.

For a first load, or a root served read-only. Each file becomes a document through the store's
own write path (`Store.publish`, so every rule and refusal of a PUBLISH holds), with the plan
every import makes (`markproto.tree.plan`): an unchanged file is left alone, a changed one gets
a new version, and with ``archive_missing`` a document whose file is gone is archived.

Safe beside a server running on the same root: every write holds the root's write lock, which
the server's writes take too, so the two never interleave inside a document, and the server
picks the new documents up at its next change scan (or SIGHUP). Writes are group-committed in
batches of `BATCH` (one filesystem sync per batch, `Store.batch`), which is what makes a large
import fast; the server's own writes wait at most one batch.

A folder inside the content root (the root itself, say, full of plain ``.md`` files) is
imported in place: each plain file becomes version 1 of its own document, its bytes kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from markproto.protocol import metadata, paths
from markproto.protocol.errors import InvalidMetadata
from markproto.server.storage import recovery, store
from markproto.tree import plan as plans
from markproto.tree import source

BATCH = 256
"""Writes per group commit: long enough to amortize the sync, short enough that a running
server's writes never wait long for the lock."""


def run(
    root: Path,
    folder: Path,
    prefix: str = "",
    *,
    archive_missing: bool = False,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> plans.Report:
    """Import ``folder`` under ``prefix`` into the content root. ``prefix`` is a folder in any
    form `source.prefix_of` reads ("/", "docs/", "/a/b"); ValueError for one no document can
    be under."""
    prefix = source.prefix_of(prefix)
    real_root, real_folder = os.path.realpath(root), os.path.realpath(folder)
    inside = _within(real_folder, real_root)
    holds_root = not inside and _within(real_root, real_folder)
    found = list(source.walk(folder, prefix, store=inside, exclude=root if holds_root else None))
    target = store.Store(root)
    try:
        with target.exclusive():
            recovery.recover(target.layout)
        existing = _existing(target, prefix)
        writes, report = plans.plan(
            found, existing, prefix, archive_missing=archive_missing, dry_run=dry_run
        )
        if dry_run:
            return report
        for start in range(0, len(writes), BATCH):
            with target.batch():
                for step in writes[start : start + BATCH]:
                    report.add(step, _write(target, step, adopt=inside))
            if progress is not None:
                progress(min(start + BATCH, len(writes)), len(writes))
        return report
    finally:
        target.close()


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def _existing(target: store.Store, prefix: str) -> dict[str, plans.State]:
    """The current version of every document under ``prefix``, read as served."""
    scope = prefix or "/"
    existing = {}
    for kind, path in target.layout.walk():
        if kind != "doc" or not paths.in_scope(path, scope):
            continue
        try:
            version = target.load(path)
        except store.Corrupt:
            continue
        if version is not None:
            existing[path] = plans.State(version.number, version.content_hash, version.archived)
    return existing


def _write(target: store.Store, step: plans.Step, *, adopt: bool) -> str | None:
    """Make one planned write; None when it was made, else why the store refused it."""
    if step.action is plans.Action.ARCHIVE:
        archived = target.set_archived(step.path, True)
        return None if isinstance(archived, store.Version) else _refusal(archived)
    assert step.source is not None
    try:
        meta = metadata.for_publish(step.path, step.source.meta)
    except InvalidMetadata as exc:
        return str(exc)
    outcome = target.publish(step.path, step.source.body, meta, step.expected, adopt=adopt)
    return None if isinstance(outcome, store.Written) else _refusal(outcome)


def _refusal(refusal: store.Refusal) -> str:
    match refusal:
        case store.Conflict(current=current):
            return f"changed meanwhile (now version {current}); import again"
        case store.Archived():
            return plans.ARCHIVED_REFUSAL
        case store.Collision(reason=reason) | store.Invalid(message=reason):
            return reason
        case store.Missing():
            return "no longer exists"
        case store.TooLarge():
            return "content exceeds size limit"
