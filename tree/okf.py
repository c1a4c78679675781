"""The Open Knowledge Format (OKF v0.1) over a folder: validation, and the frontmatter an export
gives a document that has none.

An OKF bundle is a folder of markdown: each *concept* document carries YAML frontmatter with a
non-empty ``type`` (and optionally ``title``, ``description``, ``resource``, ``tags`` and an RFC
3339 ``timestamp``); ``index.md`` is a folder's summary, with no frontmatter except that the
bundle's root one may declare ``okf_version``; ``log.md`` is a dated history. The frontmatter is
read by the one reader (``document.frontmatter``: no type coercion).

A check is a function from a `Bundle` to findings; `validate` runs the checks it is given,
`CHECKS` by default. Link checks (``mark check``) are more checks of the same shape, added to
that tuple by whoever wants them, so a bundle is read once for all of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from markproto.protocol import document, mdoutline, metadata, times
from markproto.protocol.gotext import trim_space
from markproto.tree.source import Skipped, Source, walk

INDEX = "index.md"
LOG = "log.md"
ERROR, WARNING = "error", "warning"
FIELDS = ("type", "title", "description", "resource", "tags", "timestamp")
"""The fields OKF defines, in the order an export writes them."""
_DATED = re.compile(r"#+\s+([0-9]\S*)")


@dataclass(frozen=True, slots=True)
class Finding:
    rel: str
    severity: str
    message: str

    def line(self) -> str:
        return f"{self.rel}: {self.severity}: {self.message}"


@dataclass(frozen=True, slots=True)
class Bundle:
    """A folder read once: its markdown files and what an import would skip."""

    folder: Path
    files: tuple[Source, ...]
    skipped: tuple[Skipped, ...]

    @classmethod
    def read(cls, folder: Path) -> Bundle:
        found = list(walk(folder))
        files = tuple(f for f in found if isinstance(f, Source))
        return cls(folder, files, tuple(f for f in found if isinstance(f, Skipped)))


Check = Callable[[Bundle], Iterable[Finding]]


@dataclass
class Validation:
    files: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    @property
    def warnings(self) -> int:
        return len(self.findings) - self.errors

    def summary(self) -> str:
        def count(n: int, word: str) -> str:
            return f"{n} {word}" + "s" * (n != 1)

        return f"{count(self.files, 'file')}: {count(self.errors, 'error')}, " + count(
            self.warnings, "warning"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "errors": self.errors,
            "warnings": self.warnings,
            "findings": [
                {"file": f.rel, "severity": f.severity, "message": f.message} for f in self.findings
            ],
        }


def _kind(rel: str) -> str:
    return rel.rsplit("/", 1)[-1] if rel.rsplit("/", 1)[-1] in (INDEX, LOG) else "concept"


def concepts(bundle: Bundle) -> Iterator[Finding]:
    """Every concept document has frontmatter with a non-empty ``type``; a ``timestamp`` is
    RFC 3339."""
    for file in bundle.files:
        if _kind(file.rel) != "concept":
            continue
        text = file.body.decode()
        if mdoutline.split_frontmatter(text)[0] is None:
            yield Finding(file.rel, ERROR, "no frontmatter: a concept document needs a `type`")
            continue
        own = document.frontmatter(text)
        if own is None:
            yield Finding(file.rel, ERROR, "the frontmatter is not a YAML mapping")
            continue
        if not trim_space(own.get("type", "")):
            yield Finding(file.rel, ERROR, "no `type` in the frontmatter")
        stamp = own.get("timestamp")
        if stamp and times.parse_time(stamp) is None:
            yield Finding(file.rel, WARNING, f"timestamp {stamp!r} is not RFC 3339")


def reserved(bundle: Bundle) -> Iterator[Finding]:
    """``index.md`` has no frontmatter but the root one's ``okf_version``; ``log.md``'s dated
    headings are ``YYYY-MM-DD``."""
    for file in bundle.files:
        kind, text = _kind(file.rel), file.body.decode()
        if kind == INDEX and mdoutline.split_frontmatter(text)[0] is not None:
            if file.rel != INDEX:
                yield Finding(file.rel, ERROR, "a folder's index.md has no frontmatter")
                continue
            for key in sorted(document.frontmatter(text) or {}):
                if key != "okf_version":
                    yield Finding(file.rel, WARNING, f"{key!r} is not an index.md field")
        elif kind == LOG:
            for heading in _DATED.finditer(text):
                if times.parse_date(heading.group(1)) is None:
                    yield Finding(file.rel, WARNING, f"{heading.group(1)!r} is not YYYY-MM-DD")


def importable(bundle: Bundle) -> Iterator[Finding]:
    """Markdown an import would leave out (other files are not the bundle's concern)."""
    for skipped in bundle.skipped:
        if skipped.rel.endswith((".md", "/")) and skipped.reason != "not a .md file":
            yield Finding(skipped.rel, WARNING, f"not imported: {skipped.reason}")


CHECKS: tuple[Check, ...] = (concepts, reserved, importable)


def validate(bundle: Bundle, checks: Sequence[Check] = CHECKS) -> Validation:
    found = [finding for check in checks for finding in check(bundle)]
    found.sort(key=lambda f: (f.rel, f.severity, f.message))
    return Validation(len(bundle.files), found)


def with_frontmatter(rel: str, body: bytes, meta: Mapping[str, str]) -> bytes:
    """The bytes an OKF export writes for a document, so that the bundle validates: a reserved
    file, or a concept document whose frontmatter has a ``type``, as it is; a concept document
    without frontmatter gets a block made from its metadata (the OKF fields in their order,
    then the rest); one whose frontmatter lacks a ``type`` gets its type line first in it."""
    text = body.decode("utf-8", "replace")
    if _kind(rel) != "concept":
        return body
    own = {k: v for k, v in meta.items() if k not in metadata.RESERVED_KEYS}
    kind = trim_space(own.get("type", "")) or metadata.DEFAULT_TYPE
    if mdoutline.split_frontmatter(text)[0] is not None:
        declared = document.frontmatter(text)
        if declared is None or trim_space(declared.get("type", "")):
            return body
        first = body.index(b"\n") + 1
        return body[:first] + _yaml("type", kind) + body[first:]
    block: dict[str, object] = {"type": kind}
    for key in (*FIELDS, *sorted(own)):
        if key not in block and own.get(key):
            block[key] = metadata.split_tags(own[key]) if key == "tags" else own[key]
    return b"---\n" + b"".join(_yaml(k, v) for k, v in block.items()) + b"---\n" + body


def _yaml(key: str, value: object) -> bytes:
    """One ``key: value`` line as YAML writes it (a list in flow style: ``tags: [a, b]``)."""
    line = yaml.safe_dump(
        {key: value},
        allow_unicode=True,
        default_flow_style=None if isinstance(value, list) else False,
        width=1 << 30,
    )
    return line.encode()
