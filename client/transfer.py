"""Folders in and out over the protocol: `import_folder` and `export_folder`.

An import walks the folder (`markproto.tree.source`), learns what the server holds under the
prefix (LIST of every folder, then FETCH of every document a file would replace), plans by
content hash (`markproto.tree.plan`: an unchanged file sends no write) and sends the writes,
``window`` at a time on the client's one connection to the server: PUBLISH with
``expected-version`` 0 for a new document and the fetched version for a changed one, so a
document someone changed meanwhile is refused, never overwritten. An export lists the same way
and writes each current version's body (``versions``: every stored version too, as
``name.vN.md``) byte for byte, so exporting what was imported gives the folder back.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import stat
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from markproto import durable
from markproto.client.client import Client
from markproto.client.errors import MarkError, UnreadableResponse
from markproto.client.results import Result
from markproto.protocol import bodies, paths, times
from markproto.protocol.chars import has_control
from markproto.protocol.errors import ProtocolError
from markproto.protocol.status import Status
from markproto.protocol.url import MarkURL
from markproto.tree import plan as plans
from markproto.tree import source

WINDOW = 32
"""Requests in flight at once: the streams a server grants by default."""

T = TypeVar("T")
Progress = Callable[[int, int], None]
"""Called with (done, total) as writes (or fetches, for an export) finish."""
Render = Callable[[str, bytes, dict[str, str]], bytes]


async def import_folder(
    client: Client,
    folder: Path,
    target: MarkURL,
    *,
    archive_missing: bool = False,
    dry_run: bool = False,
    window: int = WINDOW,
    progress: Progress | None = None,
) -> plans.Report:
    """Import ``folder`` under the folder ``target`` names (its path is the prefix).

    When the server holds nothing under the prefix (a first import), every file is a create
    known as soon as the file is read, so the writes go out while the folder is still being
    read instead of after it: reading and parsing a folder costs the client about 0.1 ms a file,
    time the server would otherwise spend idle."""
    prefix = source.prefix_of(target.path)
    items = source.walk(folder, prefix)
    found = list(itertools.islice(items, 1))  # a folder that is none fails before any request
    listed = await remote_documents(client, target, include_archived=True, window=window)
    writes = _Writes(client, target, window, progress)
    try:
        existing: dict[str, plans.State] = {}
        if listed or dry_run:
            found += items
            local = {item.path for item in found if isinstance(item, source.Source)}
            wanted = [path for path in listed if archive_missing or path in local]
            states = await _gather((_state(client, target, path) for path in wanted), window)
            existing = {path: state for path, state in zip(wanted, states, strict=True) if state}
        else:
            for item in _reading(found, items):
                if isinstance(item, source.Source):
                    await writes.start(plans.step_for(item, None))
        steps, report = plans.plan(
            found, existing, prefix, archive_missing=archive_missing, dry_run=dry_run
        )
        if dry_run:
            return report
        for step in steps:
            await writes.start(step)  # those not started while the folder was read
        writes.count(len(steps))
        for step in steps:
            report.add(step, await writes.refusal(step))
        return report
    finally:
        writes.cancel()


def _reading(found: list[T], rest: Iterator[T]) -> Iterator[T]:
    """The items in ``found``, then the rest, each added to ``found`` as it is read."""
    yield from found[:]
    for item in rest:
        found.append(item)
        yield item


class _Writes:
    """An import's writes, at most ``window`` in flight, each started as soon as it is known;
    ``progress`` is told of them once their total is known (`count`)."""

    def __init__(
        self, client: Client, target: MarkURL, window: int, progress: Progress | None
    ) -> None:
        self._client = client
        self._target = target
        self._gate = asyncio.Semaphore(window)
        self._progress = progress
        self._tasks: dict[str, asyncio.Task[str | None]] = {}
        self._done = 0
        self._total: int | None = None

    async def start(self, step: plans.Step) -> None:
        """Send ``step``'s write once a place in the window is free (once per path)."""
        if step.path in self._tasks:
            return
        await self._gate.acquire()
        self._tasks[step.path] = asyncio.ensure_future(self._run(step))

    async def _run(self, step: plans.Step) -> str | None:
        try:
            refusal = await _write(self._client, self._target, step)
        finally:
            self._gate.release()
        self._done += 1
        if self._progress is not None and self._total is not None:
            self._progress(self._done, self._total)
        return refusal

    def count(self, total: int) -> None:
        """Every write is started: from now on ``progress`` hears of each one done."""
        self._total = total
        if self._progress is not None and self._done:
            self._progress(self._done, total)

    async def refusal(self, step: plans.Step) -> str | None:
        """The write's refusal in one line, or None when the server took it."""
        return await self._tasks[step.path]

    def cancel(self) -> None:
        """Stop what is still running (the import failed part way)."""
        for task in self._tasks.values():
            task.cancel()


async def _state(client: Client, target: MarkURL, path: str) -> plans.State | None:
    result = await client.fetch(target.with_path(path))
    if result.status == Status.ARCHIVED:
        return plans.State(0, "", archived=True)
    if result.status not in (Status.OK, Status.NOT_FOUND):
        result.raise_for_status()  # what the server holds is unknown: planning would guess
    version, digest = result.version, result.meta.get("content-hash")
    if result.status != Status.OK or version is None or digest is None:
        return None  # not a document after all (gone meanwhile): the write will say
    return plans.State(version, digest)


async def _write(client: Client, target: MarkURL, step: plans.Step) -> str | None:
    """One planned write; None when the server took it, else its refusal in one line."""
    url = target.with_path(step.path)
    try:
        if step.action is plans.Action.ARCHIVE:
            result = await client.archive(url)
        else:
            assert step.source is not None
            result = await client.publish(
                url, step.source.body, expected_version=step.expected, meta=step.source.meta
            )
    except MarkError as exc:
        return str(exc)
    if result.ok:
        return None
    if result.status == Status.CONFLICT:
        now = result.meta.get("server-version", "?")
        return f"changed on the server meanwhile (now version {now}); import again"
    return f"{result.status}: {result.message}"


# -- export --------------------------------------------------------------------------------------


@dataclass
class ExportReport:
    """What an export wrote."""

    documents: list[str] = field(default_factory=list)
    """Paths of the documents written (current versions)."""
    versions: int = 0
    """History files written (``--versions``)."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(document path, reason)."""

    def summary(self) -> str:
        history = f", {self.versions} history files" if self.versions else ""
        count = len(self.documents)
        return f"{count} document{'s' * (count != 1)}{history}, {len(self.skipped)} skipped"

    def lines(self) -> list[str]:
        return [self.summary(), *(f"skipped {path}: {why}" for path, why in self.skipped)]

    def as_json(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "versions": self.versions,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
        }


async def export_folder(
    client: Client,
    target: MarkURL,
    folder: Path,
    *,
    versions: bool = False,
    window: int = WINDOW,
    progress: Progress | None = None,
    render: Render | None = None,
) -> ExportReport:
    """Write every current document under the folder ``target`` names into ``folder``.

    ``render(rel, body, meta)`` gives the bytes to write in place of the body (OKF export adds
    frontmatter where there is none)."""
    prefix = source.prefix_of(target.path)
    listed = await remote_documents(client, target, window=window)
    report = ExportReport()
    folder.mkdir(parents=True, exist_ok=True)
    done = 0

    async def one(path: str) -> None:
        nonlocal done
        rel = path[len(prefix) + 1 :]
        why = _unsafe(rel)
        if why is None:
            why = await _export(client, target, path, folder, rel, versions, report, render)
        if why is None:
            report.documents.append(path)
        else:
            report.skipped.append((path, why))
        done += 1
        if progress is not None:
            progress(done, len(listed))

    await _gather(map(one, listed), window)
    report.documents.sort()
    report.skipped.sort()
    return report


async def _export(
    client: Client,
    target: MarkURL,
    path: str,
    folder: Path,
    rel: str,
    versions: bool,
    report: ExportReport,
    render: Render | None,
) -> str | None:
    current = await client.fetch(target.with_path(path))
    if current.status != Status.OK:
        return f"{current.status}: {current.message}"
    files = [(rel, current)]
    if versions:
        history = await client.versions(target.with_path(path))
        if history.status != Status.OK:
            return f"{history.status}: {history.message}"
        try:
            numbers = [entry.version for entry in bodies.parse_history(history.body)]
        except ProtocolError as exc:
            raise UnreadableResponse(f"{path}: unreadable history ({exc})", sent=True) from exc
        stem = rel.removesuffix(".md")
        for number in numbers:
            old = await client.fetch(target.with_path(f"{path}/v{number}"))
            if old.status == Status.OK:
                files.append((f"{stem}.v{number}.md", old))
    for name, result in files:
        if render is not None:
            result = replace(result, body=render(name, result.body, result.meta))
        why = _save(folder, name, result)
        if why is not None:
            return why
    report.versions += len(files) - 1
    return None


def _unsafe(rel: str) -> str | None:
    """Why a document's path cannot be a file under the export folder (a hostile server)."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return "the path has an empty, hidden or '..' segment"
    if has_control(rel) or "\x00" in rel:
        return "the path has control characters"
    return None


def _save(folder: Path, rel: str, result: Result) -> str | None:
    """Write one body under ``folder`` without following any symlink; None when written."""
    here = str(folder)
    parts = rel.split("/")
    for part in parts[:-1]:
        here = os.path.join(here, part)
        with contextlib.suppress(FileExistsError):
            os.mkdir(here)
        if not stat.S_ISDIR(os.lstat(here).st_mode):
            return f"{os.path.relpath(here, folder)} is not a folder here"
    file = os.path.join(here, parts[-1])
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(file).st_mode):
            return f"{rel} is a folder here"
    tmp = os.path.join(here, durable.temp_name())
    durable.create(tmp, result.body, sync=False)
    os.replace(tmp, file)  # replaces a symlink itself, never what it points to
    modified = times.parse_time(result.meta.get("modified", ""))
    if modified is not None:
        os.utime(file, (modified.timestamp(), modified.timestamp()), follow_symlinks=False)
    return None


# -- listing -------------------------------------------------------------------------------------


async def remote_documents(
    client: Client, target: MarkURL, *, include_archived: bool = False, window: int = WINDOW
) -> list[str]:
    """Every document path under the folder ``target`` names, sorted (LIST of each folder,
    every page). A folder the server does not have holds none."""
    found: list[str] = []
    folders = [paths.clean(target.path)]
    while folders:
        pages = await _gather(
            (_folder(client, target, f, include_archived) for f in folders), window
        )
        folders = []
        for docs, subfolders in pages:
            found += docs
            folders += subfolders
    return sorted(found)


async def _folder(
    client: Client, target: MarkURL, folder: str, include_archived: bool
) -> tuple[list[str], list[str]]:
    docs: list[str] = []
    subfolders: list[str] = []
    cursor: str | None = None
    url = replace(target.with_path(folder), anchor="")
    while True:
        result = await client.list(url, cursor=cursor, include_archived=include_archived)
        if result.status == Status.NOT_FOUND:
            return docs, subfolders
        result.raise_for_status()
        try:
            entries = bodies.parse_index(result.body)
        except ProtocolError as exc:
            raise UnreadableResponse(f"{url}: unreadable listing ({exc})", sent=True) from exc
        for entry in entries:
            (subfolders if entry.is_dir else docs).append(paths.join(folder, entry.name))
        cursor = result.next_cursor
        if cursor is None:
            return docs, subfolders


async def _gather(jobs: Iterable[Awaitable[T]], window: int) -> list[T]:
    """Await every job, at most ``window`` at a time, results in order."""
    gate = asyncio.Semaphore(window)

    async def gated(job: Awaitable[T]) -> T:
        async with gate:
            return await job

    return list(await asyncio.gather(*(gated(job) for job in jobs)))
