"""What an import writes, and what it reports.

An import compares the folder's files with the documents already under the prefix, by content
hash only: the same body is the same document (its metadata comes from the body), so importing
an unchanged folder again writes nothing. A new file is created (``expected-version: 0``), a
changed one replaces the version it was compared with, an archived document is left alone, and
with ``archive_missing`` a document whose file is gone (not merely skipped) is archived. Both
`mark import` and `mark-server import` plan with this and report with `Report`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from markproto.protocol import digests
from markproto.tree.source import Skipped, Source

ARCHIVED_REFUSAL = "document is archived; unarchive first"


@dataclass(frozen=True, slots=True)
class State:
    """What the store holds at a path: its current version and content hash."""

    version: int
    content_hash: str
    archived: bool = False


class Action(Enum):
    CREATE = "created"
    UPDATE = "updated"
    UNCHANGED = "unchanged"
    ARCHIVE = "archived"
    REFUSE = "refused"


@dataclass(frozen=True, slots=True)
class Step:
    """One document's part in an import: the write to make (or not), with the version the write
    expects to replace (0: none)."""

    path: str
    action: Action
    source: Source | None = None
    expected: int = 0
    reason: str = ""

    @property
    def writes(self) -> bool:
        return self.action in (Action.CREATE, Action.UPDATE, Action.ARCHIVE)


def plan(
    found: Iterable[Source | Skipped],
    existing: Mapping[str, State],
    prefix: str,
    *,
    archive_missing: bool = False,
    dry_run: bool = False,
) -> tuple[list[Step], Report]:
    """The writes of an import (in the folder's order, archives last) and the report that
    already holds the skipped files, frontmatter notes, unchanged and refused documents (and,
    in a dry run, the writes as if made)."""
    report = Report(dry_run=dry_run)
    steps: list[Step] = []
    seen: set[str] = set()
    for item in found:
        if isinstance(item, Skipped):
            report.skipped.append((item.rel, item.reason))
            seen.add(prefix + "/" + item.rel.rstrip("/"))
            continue
        seen.add(item.path)
        report.notes += [(item.rel, note) for note in item.notes]
        steps.append(step_for(item, existing.get(item.path)))
    if archive_missing:
        for path in sorted(existing):
            state = existing[path]
            if not state.archived and path not in seen and not _under_skipped(path, seen):
                steps.append(Step(path, Action.ARCHIVE, expected=state.version))
    for step in steps:
        if dry_run or not step.writes:
            report.add(step)
    return [step for step in steps if step.writes], report


def step_for(item: Source, state: State | None) -> Step:
    """One file's step, given what the store holds at its path (None: nothing)."""
    if state is None:
        return Step(item.path, Action.CREATE, item)
    if state.archived:
        return Step(item.path, Action.REFUSE, item, reason=ARCHIVED_REFUSAL)
    if state.content_hash == digests.hash_ref(item.body):
        return Step(item.path, Action.UNCHANGED, item, state.version)
    return Step(item.path, Action.UPDATE, item, state.version)


def _under_skipped(path: str, seen: set[str]) -> bool:
    """A document inside a skipped folder still has its file: it is not missing."""
    parts = path.split("/")
    return any("/".join(parts[:n]) in seen for n in range(2, len(parts)))


@dataclass
class Report:
    """What an import did (or, in a dry run, would do), for people and for ``--json``."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(document path, reason)."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(file in the folder, reason)."""
    notes: list[tuple[str, str]] = field(default_factory=list)
    """(file in the folder, note): frontmatter keys left out of a document's metadata."""
    dry_run: bool = False

    def add(self, step: Step, refusal: str | None = None) -> None:
        """Record a step's outcome: done as planned, or refused with the reason."""
        if refusal is not None or step.action is Action.REFUSE:
            self.refused.append((step.path, refusal or step.reason))
        else:
            getattr(self, step.action.value).append(step.path)

    @property
    def writes(self) -> int:
        return len(self.created) + len(self.updated) + len(self.archived)

    def summary(self) -> str:
        """One line of counts."""
        verbs = (
            ("to create", "to update", "unchanged", "to archive")
            if self.dry_run
            else (
                "created",
                "updated",
                "unchanged",
                "archived",
            )
        )
        counts = (len(self.created), len(self.updated), len(self.unchanged), len(self.archived))
        parts = [f"{n} {verb}" for n, verb in zip(counts, verbs, strict=True)]
        parts += [f"{len(self.refused)} refused", f"{len(self.skipped)} skipped"]
        return ("dry run: " if self.dry_run else "") + ", ".join(parts)

    def lines(self) -> list[str]:
        """The summary, then one line per refusal, skipped file and note."""
        out = [self.summary()]
        out += [f"refused {path}: {reason}" for path, reason in self.refused]
        out += [f"skipped {rel}: {reason}" for rel, reason in self.skipped]
        out += [f"note {rel}: {note}" for rel, note in self.notes]
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "archived": self.archived,
            "refused": [{"path": p, "reason": r} for p, r in self.refused],
            "skipped": [{"file": f, "reason": r} for f, r in self.skipped],
            "notes": [{"file": f, "note": n} for f, n in self.notes],
        }
