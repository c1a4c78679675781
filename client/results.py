"""What the client's verbs return: the server's answer, as values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from markproto.client.errors import StatusError
from markproto.protocol.metadata import RESERVED_KEYS
from markproto.protocol.status import SUCCESS, Status

if TYPE_CHECKING:
    from markproto.protocol.bodies import LinkDocument, LinkRow, LookupRow

MAX_MESSAGE = 500
"""Characters of a refusal's message: enough for any fixed message, bounded for a hostile one."""


@dataclass(frozen=True, slots=True)
class Result:
    """A server's answer: ``status``, metadata without ``status``, the body as sent."""

    status: str
    meta: dict[str, str]
    body: bytes
    from_cache: bool = False
    """The server said ``not-modified`` and this is the cached response it confirmed."""

    @property
    def ok(self) -> bool:
        """``ok``, ``created`` or ``not-modified``: the request did what it asked."""
        return self.status in SUCCESS

    @property
    def version(self) -> int | None:
        value = self.meta.get("version", "")
        return int(value) if value.isascii() and value.isdigit() else None

    @property
    def next_cursor(self) -> str | None:
        """The cursor of the next LIST page, None on the last page."""
        if self.meta.get("complete") == "false":
            return self.meta.get("next-cursor") or None
        return None

    @property
    def publisher_meta(self) -> dict[str, str]:
        """The metadata a publisher set (tags, importance, title, ``rel-*`` ...): every key but
        those the server sets in responses (version, modified, etag, ...)."""
        return {k: v for k, v in self.meta.items() if k not in RESERVED_KEYS}

    @property
    def message(self) -> str:
        """A refusal's reason on one line: its body without the ``# Title`` heading ("" when
        the request succeeded, whose body is the document)."""
        if self.ok:
            return ""
        text = self.body.decode("utf-8", "replace")
        lines = (line.strip() for line in text.splitlines() if not line.startswith("# "))
        return " ".join(line for line in lines if line)[:MAX_MESSAGE]

    def raise_for_status(self) -> Self:
        """This result when it is ``ok``; else ``StatusError`` with the status and message."""
        if not self.ok:
            raise StatusError(self)
        return self


@dataclass(frozen=True, slots=True)
class LookupResult(Result):
    """A LOOKUP answer with its table parsed."""

    rows: tuple[LookupRow, ...] = ()
    body_requested: bool = False

    @property
    def answered_from_catalog(self) -> bool:
        """Body match was asked but the server matched the catalog only (an older server): an
        empty table then says nothing about whether section text mentions the query."""
        return self.status == Status.OK and self.body_requested and self.meta.get("match") != "body"


@dataclass(frozen=True, slots=True)
class LinksResult(Result):
    """A ``match: links`` answer (SPEC §5.9) with its tables parsed: one page of links and the
    documents they name."""

    rows: tuple[LinkRow, ...] = ()
    documents: tuple[LinkDocument, ...] = ()

    @property
    def total(self) -> int:
        """Links in the whole answer, every page."""
        value = self.meta.get("total", "")
        return int(value) if value.isascii() and value.isdigit() else len(self.rows)

    @property
    def unsupported(self) -> bool:
        """The server does not answer links: it refused ``match: links`` as an unknown mode
        (the reference's server, or one older than the extension)."""
        return self.status == Status.BAD_REQUEST and 'got "links"' in self.message


LINKS_UNSUPPORTED = (
    "the server does not answer links (LOOKUP match: links, a markproto extension): it is the "
    "reference's or an older one"
)
"""What a face says when ``LinksResult.unsupported`` is true."""

CATALOG_FALLBACK_NOTE = (
    "server answered from the catalog (no body match); an empty table is not evidence of absence"
)
"""What a face says when ``LookupResult.answered_from_catalog`` is true."""
