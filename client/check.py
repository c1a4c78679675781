"""``mark check``: a collection's health, on a server or in a local folder before import.

The findings, each tied to a document (and a line where there is one):

- errors: a body that is not UTF-8 text; frontmatter that is malformed YAML, not a mapping, or
  too large to be read as metadata; an internal link to no document, or to a section its
  document does not have;
- warnings: frontmatter opened and never closed, or over the publisher metadata limits (an import
  leaves keys out); two headings with the same anchor (a link names only the first); no title
  (no ``title`` and no ``# `` heading: the document shows as its file name); an orphan (no other
  document links to it; a folder's ``index.md`` is one by nature).

The checks are pure functions of documents (``Document``: a path and its bytes) and of where their
links lead (``LinkRow``s, whose states come from the same rule, ``links.follow``, whether the
server resolved them or ``local_links`` did). On a server the links come from its link index
(LOOKUP ``match: links``, SPEC §5.9) and the bodies from FETCH; in a folder, from the files.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from markproto.protocol import document, linkkinds, links, mdoutline, paths
from markproto.protocol.bodies import LinkRow
from markproto.protocol.limits import MAX_BODY, MAX_FRONTMATTER, MAX_META_BYTES, MAX_META_KEYS

if TYPE_CHECKING:
    from markproto.client.client import Client
    from markproto.protocol.url import MarkURL

ERROR, WARNING = "error", "warning"
FETCHES = 8
"""FETCHes in flight at once while checking a server."""
_LOADER: Any = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
_OPENING = re.compile(r"\ufeff?---[ \t]*\r?\n")
_CLOSING = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Finding:
    path: str
    severity: str
    kind: str
    message: str
    line: int = 0
    """1-based; 0 when the finding is about the whole document."""


@dataclass(frozen=True, slots=True)
class Document:
    """A document to check: its path (on the server, or the one an import would give it) and
    its bytes; ``meta`` is its publisher metadata where it has any (on a server)."""

    path: str
    body: bytes
    meta: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Report:
    """What a check found, grouped by document (in path order)."""

    documents: int
    findings: list[Finding]

    @property
    def errors(self) -> int:
        return sum(finding.severity == ERROR for finding in self.findings)

    @property
    def warnings(self) -> int:
        return len(self.findings) - self.errors

    def exit_code(self, strict: bool) -> int:
        return 1 if self.errors or (strict and self.warnings) else 0

    def summary(self) -> str:
        flagged = len({finding.path for finding in self.findings})
        return (
            f"{self.documents} documents checked, {flagged} with findings: "
            f"{self.errors} errors, {self.warnings} warnings"
        )

    def table(self) -> str:
        """Per document its findings, one a line: line, severity, kind, message."""
        out: list[str] = []
        by_path: dict[str, list[Finding]] = {}
        for finding in self.findings:
            by_path.setdefault(finding.path, []).append(finding)
        for path in sorted(by_path):
            out.append(path)
            for f in sorted(by_path[path], key=lambda f: (f.line, f.severity, f.kind)):
                line = str(f.line) if f.line else "-"
                out.append(f"  {line:>5}  {f.severity:<7}  {f.kind:<17}  {f.message}")
        out += ["", self.summary()] if out else [self.summary()]
        return "\n".join(out) + "\n"

    def as_json(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "errors": self.errors,
            "warnings": self.warnings,
            "findings": [
                {
                    "path": f.path,
                    "line": f.line,
                    "severity": f.severity,
                    "kind": f.kind,
                    "message": f.message,
                }
                for f in sorted(self.findings, key=lambda f: (f.path, f.line, f.kind))
            ],
        }


# --- one document ------------------------------------------------------------------------------


def document_findings(doc: Document) -> list[Finding]:
    """Everything wrong with one document on its own (its links aside)."""
    if len(doc.body) > MAX_BODY:
        what = f"over {MAX_BODY:,} bytes: the server holds a document of at most 1 MiB"
        return [Finding(doc.path, ERROR, "too-large", what)]
    try:
        text = doc.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = doc.body.count(b"\n", 0, exc.start) + 1
        what = f"not UTF-8 text: byte 0x{doc.body[exc.start]:02x} at offset {exc.start}"
        return [Finding(doc.path, ERROR, "not-utf8", what, line)]
    found = list(frontmatter_findings(doc.path, text))
    found += duplicate_headings(doc.path, text)
    facts = document.own_facts(text)
    if not (doc.meta.get("title", "").strip() or facts.frontmatter.get("title") or facts.h1):
        name = paths.base(doc.path)
        found.append(
            Finding(doc.path, WARNING, "no-title", f"no title and no '# ' heading: shown as {name}")
        )
    return found


def own_metadata(text: str) -> dict[str, str]:
    """A document's frontmatter as the flat strings an import makes metadata of (lists joined
    with commas), {} when it has none or it does not read."""
    block, _ = mdoutline.split_frontmatter(text)
    if block is None:
        return {}
    try:
        data = yaml.load(block, Loader=_LOADER)
    except (yaml.YAMLError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for key, value in data.items():
        if isinstance(value, list):
            value = ",".join(item for item in value if isinstance(item, str))
        if isinstance(key, str) and isinstance(value, str):
            out[key] = value
    return out


def frontmatter_findings(path: str, text: str) -> Iterator[Finding]:
    """Frontmatter that is not read as metadata, or not all of it, with its lines."""
    opening = _OPENING.match(text)
    if opening is None:
        return
    closing = _CLOSING.search(text, opening.end())
    if closing is None:
        yield Finding(
            path,
            WARNING,
            "frontmatter",
            "a '---' line opens frontmatter that is never closed: it reads as text",
            1,
        )
        return
    block = text[opening.end() : closing.start()]
    last = text.count("\n", 0, closing.start()) + 1
    if len(block) > MAX_FRONTMATTER:
        yield Finding(
            path,
            ERROR,
            "frontmatter",
            f"frontmatter on lines 1-{last} is {len(block):,} characters, over "
            f"{MAX_FRONTMATTER:,}: it reads as text, not metadata",
            1,
        )
        return
    try:
        data = yaml.load(block, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = 2 + (mark.line if mark is not None else 0)
        problem = " ".join(str(exc.problem or exc).split())
        yield Finding(path, ERROR, "frontmatter", f"frontmatter is not YAML: {problem}", line)
        return
    except (yaml.YAMLError, RecursionError) as exc:
        yield Finding(path, ERROR, "frontmatter", f"frontmatter is not YAML: {exc}", 2)
        return
    if data is not None and not isinstance(data, dict):
        yield Finding(
            path, ERROR, "frontmatter", f"frontmatter on lines 1-{last} is not a YAML mapping", 1
        )
        return
    meta = own_metadata(text)
    size = sum(len(k.encode()) + len(v.encode()) for k, v in meta.items())
    if len(meta) > MAX_META_KEYS or size > MAX_META_BYTES:
        yield Finding(
            path,
            WARNING,
            "frontmatter",
            f"frontmatter on lines 1-{last} holds {len(meta)} keys, {size:,} bytes: over the "
            f"metadata limits ({MAX_META_KEYS} keys, {MAX_META_BYTES:,} bytes), an import "
            "leaves keys out",
            1,
        )


def duplicate_headings(path: str, text: str) -> Iterator[Finding]:
    """Headings that want an anchor another heading took first: ``#anchor`` names only the
    first; one finding per anchor, at the first heading that did not get it."""
    lines: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    for heading in mdoutline.headings(text):
        wanted = mdoutline.slug(heading.text)
        lines.setdefault(wanted, []).append(text.count("\n", 0, heading.start) + 1)
        texts.setdefault(wanted, heading.text)
    for wanted, where in lines.items():
        if len(where) < 2:
            continue
        shown = ", ".join(map(str, where[:5])) + (", ..." if len(where) > 5 else "")
        yield Finding(
            path,
            WARNING,
            "duplicate-heading",
            f"{len(where)} headings {texts[wanted]!r} (lines {shown}): #{wanted} names only "
            f"the first, the others are #{wanted}-1 and on",
            where[1],
        )


# --- links -------------------------------------------------------------------------------------


def link_findings(rows: Iterable[LinkRow], checked: set[str]) -> Iterator[Finding]:
    """Broken links out of the documents checked."""
    for row in rows:
        if row.source not in checked or not row.broken:
            continue
        where = row.raw if row.kind != linkkinds.RELATION else f"rel-{row.predicate}: {row.raw}"
        if row.state == linkkinds.MISSING:
            named = "" if row.target in (row.raw, row.raw.rstrip("/")) else f" {row.target}"
            why = f"broken link {where}: no document{named}"
        else:
            why = f"broken link {where}: {row.target} has no section #{row.anchor}"
        yield Finding(row.source, ERROR, "broken-link", why, row.line)


def orphans(paths_checked: Iterable[str], incoming: Iterable[LinkRow]) -> Iterator[Finding]:
    """Documents no other document links to (a folder's ``index.md`` aside)."""
    linked = {row.target for row in incoming if row.source != row.target and not row.broken}
    for path in sorted(paths_checked):
        if path not in linked and paths.base(path) != "index.md":
            yield Finding(path, WARNING, "orphan", "no other document links here")


def report(
    docs: Sequence[Document], outgoing: Sequence[LinkRow], incoming: Sequence[LinkRow]
) -> Report:
    checked = {doc.path for doc in docs}
    found = [finding for doc in docs for finding in document_findings(doc)]
    found += link_findings(outgoing, checked)
    found += orphans(checked, incoming)
    return Report(len(docs), found)


# --- a local folder ----------------------------------------------------------------------------


class _Folder:
    """The documents of a folder as a ``links.World``: every one exists, for everyone."""

    def __init__(self, docs: Sequence[Document]) -> None:
        self.texts = {doc.path: doc.body.decode("utf-8", "replace") for doc in docs}
        self._named: dict[str, list[str]] = {}
        for path in self.texts:
            self._named.setdefault(paths.base(path).lower(), []).append(path)

    def exists(self, path: str) -> bool:
        return path in self.texts

    def named(self, name: str) -> list[str]:
        return self._named.get(name, [])

    def anchors(self, path: str) -> tuple[list[str], list[str], list[str]]:
        text = self.texts[path]
        found = mdoutline.headings(text)
        extractor = links.Extractor(text)
        if "id" in text or "name" in text:
            for start, stop, section in mdoutline.iter_own_sections(text):
                extractor.section(start, stop, section)
        return [h.anchor for h in found], [h.text for h in found], extractor.ids

    def ours(self, authority: str) -> bool:
        return False


def local_links(docs: Sequence[Document]) -> list[LinkRow]:
    """Every link of the documents, followed among them (``links.follow``): what the server's
    link index would answer once they are published as they are."""
    world = _Folder(docs)
    rows = []
    for doc in docs:
        text = world.texts[doc.path]
        found = links.extract(text)
        found += [
            linkkinds.Link(0, "", target, "", linkkinds.RELATION, predicate)
            for predicate, target in linkkinds.relations(own_metadata(text))
        ]
        for link in found:
            to = links.follow(link, doc.path, world)
            rows.append(
                LinkRow(
                    doc.path,
                    link.section,
                    link.line,
                    to.target,
                    to.anchor,
                    link.target,
                    to.kind,
                    link.predicate,
                    to.state,
                    link.label,
                )
            )
    return rows


def read_folder(folder: Path) -> list[Document]:
    """The ``.md`` files of a folder as the documents an import makes of them (hidden names and
    ``versions`` folders left out), each at ``/`` + its path in the folder.

    The seam to ``markproto.tree``: ``tree.source.walk`` (on the import branch) is the one rule
    for which files a folder offers; once both are in one tree this reads its ``Source`` items
    and reports its ``Skipped`` ones."""
    out = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != paths.VERSIONS_DIR)
        for name in sorted(files):
            file = Path(here) / name
            if name.startswith(".") or not name.endswith(".md") or not file.is_file():
                continue
            rel = file.relative_to(folder).as_posix()
            with open(file, "rb") as f:
                body = f.read(MAX_BODY + 1)
            out.append(Document("/" + rel, body))
    return out


def check_folder(folder: Path) -> Report:
    docs = read_folder(folder)
    readable = [doc for doc in docs if _utf8(doc.body)]
    rows = local_links(readable)
    return report(docs, rows, rows)


def _utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- a server ----------------------------------------------------------------------------------


async def check_server(client: Client, prefix: MarkURL) -> Report:
    """The documents under ``prefix`` (a folder), their bodies fetched, their links and
    backlinks from the server's link index."""
    from markproto.client.graph import gather

    folder = prefix.with_path(paths.clean(prefix.path))
    found = await _documents(client, folder)
    gate = asyncio.Semaphore(FETCHES)

    async def fetch(path: str) -> Document | None:
        async with gate:
            result = await client.fetch(folder.with_path(path))
        if result.status != "ok":
            return None
        return Document(path, result.body, result.publisher_meta)

    fetched = await asyncio.gather(*(fetch(path) for path in found))
    docs = [doc for doc in fetched if doc is not None]
    outgoing = await gather(client, folder, direction="outgoing")
    incoming = await gather(client, folder, direction="incoming")
    for graph in (outgoing, incoming):
        graph.result.raise_for_status()
    return report(docs, outgoing.rows, incoming.rows)


async def _documents(client: Client, folder: MarkURL) -> list[str]:
    """Every document path under ``folder``, listing it and its folders page by page."""
    from markproto.protocol.bodies import parse_index

    out: list[str] = []
    pending = [folder.path]
    while pending:
        here = pending.pop()
        cursor: str | None = None
        while True:
            result = (await client.list(folder.with_path(here), cursor=cursor)).raise_for_status()
            for entry in parse_index(result.body):
                path = paths.join(here, entry.name)
                (pending if entry.is_dir else out).append(path)
            cursor = result.next_cursor
            if cursor is None:
                break
    return sorted(out)
