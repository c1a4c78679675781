"""The status vocabulary (SPEC §3.3), the error-body titles and the fixed messages (§3.4).

Handlers take every message from here so that no reply drifts from the reference's wording by a
retyped character. ``resync`` and ``closing`` belong to WATCH, which this project does not serve,
so they are not members.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Status(StrEnum):
    """The ``status`` value of every response."""

    OK = "ok"
    CREATED = "created"
    NOT_MODIFIED = "not-modified"
    NOT_FOUND = "not-found"
    ARCHIVED = "archived"
    UNAUTHORIZED = "unauthorized"
    NOT_PERMITTED = "not-permitted"
    CONFLICT = "conflict"
    BAD_REQUEST = "bad-request"
    SERVER_ERROR = "server-error"
    RATE_LIMITED = "rate-limited"


SUCCESS: Final[frozenset[str]] = frozenset({Status.OK, Status.CREATED, Status.NOT_MODIFIED})


def title(status: str) -> str:
    """The error-body heading: ``not-found`` -> ``Not found``."""
    text = status.replace("-", " ")
    return text[:1].upper() + text[1:]


BAD_REQUEST_MESSAGE: Final = "bad request"
"""A request that breaks the grammar (``bad-request``)."""
READ_FAILED: Final = "could not read request"
"""A request over a size limit, or an empty stream (``server-error``)."""
AUTH_REQUIRED: Final = "authentication required"
INSUFFICIENT: Final = "insufficient permissions"
READ_ONLY: Final = "server is read-only"
TOO_LARGE: Final = "content exceeds size limit"
INTERNAL: Final = "internal error"
HASH_PATH_RESERVED: Final = "paths matching /sha256-<hash> are reserved"
"""Sent verbatim: ``<hash>`` is part of the reference's text, not a placeholder."""
PUBLISH_NEEDS_AUTH: Final = "publishing requires auth configuration"
ARCHIVE_NEEDS_AUTH: Final = "archiving requires auth configuration"
APPEND_NEEDS_AUTH: Final = "appending requires auth configuration"


def not_found(path: str) -> str:
    return f"{path} not found"


def is_archived(path: str) -> str:
    return f"{path} is archived"


def hash_not_found(content_hash: str) -> str:
    return f"content not found for hash {content_hash}"


def unsupported_verb(verb: str) -> str:
    return f"unsupported verb: {verb}"
