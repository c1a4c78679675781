"""The status vocabulary (SPEC §3.3), the error-body titles and every fixed message (§3.4).

Every message a server response carries is spelled here once, constants for the fixed ones and a
function for each that names a path, key or value, so that no reply drifts from the reference's
wording by a retyped character. The rule modules (metadata, cursor, paths) and the server raise or
answer with these. A quoted argument is already quoted the way Go's ``%q`` writes it
(`metadata.go_quote`). ``resync`` and ``closing`` end WATCH streams only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from markproto.protocol.limits import (
    LINK_DEPTH_MAX,
    LIST_PAGE_MAX,
    LOOKUP_MAX_TERMS,
    LOOKUP_MIN_QUERY_RUNES,
    MAX_META_BYTES,
    MAX_META_KEYS,
    MAX_SEGMENTS,
)


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
    RESYNC = "resync"
    """WATCH only: the subscriber must rebuild (it was lapped, or its cursor is not resumable)."""
    CLOSING = "closing"
    """WATCH only: the server is draining."""


SUCCESS: Final[frozenset[str]] = frozenset({Status.OK, Status.CREATED, Status.NOT_MODIFIED})


def title(status: str) -> str:
    """The error-body heading: ``not-found`` -> ``Not found``."""
    text = status.replace("-", " ")
    return text[:1].upper() + text[1:]


# -- the request and the server (§1.3, §2.2, §8.6) -------------------------------------------------

BAD_REQUEST_MESSAGE: Final = "bad request"
"""A request that breaks the grammar (``bad-request``)."""
READ_FAILED: Final = "could not read request"
"""A request over a size limit, or an empty stream (``server-error``)."""
RATE_LIMIT_EXCEEDED: Final = "rate limit exceeded"
INTERNAL: Final = "internal error"
"""Any other fault (``server-error``): never a timeout."""
TIMED_OUT: Final = "request timed out"
"""A read past the request timeout, or any request that never got its turn (``server-error``)."""
WRITE_NOT_APPLIED: Final = "write not applied: timed out waiting for the writer"
"""A write past the request timeout before it started: retrying it is safe (``server-error``)."""
WRITE_OUTCOME_UNKNOWN: Final = "write timed out while in progress: it may have been applied"
"""A write past the request timeout after it started: fetch the document to know
(``server-error``)."""
INDEX_BUILDING: Final = "the search index is still being built: try again shortly"
"""A LOOKUP the startup build kept waiting too long (``server-error``)."""
INSUFFICIENT_STORAGE: Final = "insufficient storage"
NOT_WRITABLE: Final = "storage is not writable"


def unsupported_verb(verb: str) -> str:
    return f"unsupported verb: {verb}"


# -- authorization (§8) ----------------------------------------------------------------------------

AUTH_REQUIRED: Final = "authentication required"
INSUFFICIENT: Final = "insufficient permissions"
READ_ONLY: Final = "server is read-only"
PUBLISH_NEEDS_AUTH: Final = "publishing requires auth configuration"
ARCHIVE_NEEDS_AUTH: Final = "archiving requires auth configuration"
APPEND_NEEDS_AUTH: Final = "appending requires auth configuration"


# -- reads (§5.1-5.3) ------------------------------------------------------------------------------


def not_found(path: str) -> str:
    return f"{path} not found"


def is_archived(path: str) -> str:
    return f"{path} is archived"


def hash_not_found(content_hash: str) -> str:
    return f"content not found for hash {content_hash}"


PAGE_SIZE_RANGE: Final = f"page-size must be between 1 and {LIST_PAGE_MAX}"
INCLUDE_ARCHIVED_FLAG: Final = "include-archived must be true or false"
INVALID_CURSOR: Final = "invalid LIST cursor"
UNSUPPORTED_CURSOR: Final = "unsupported LIST cursor"
CURSOR_MISMATCH: Final = "LIST cursor does not match this request"
CURSOR_TOO_LONG: Final = "LIST cursor exceeds limit"
CHAIN_ERROR: Final = "chain integrity check failed"
"""The ``chain-error`` value of a VERSIONS response whose hash chain does not hold."""


# -- LOOKUP (§5.7) ---------------------------------------------------------------------------------

QUERY_TOO_SHORT: Final = f"query must be at least {LOOKUP_MIN_QUERY_RUNES} characters"
INVALID_LIMIT: Final = "invalid limit"


def too_many_terms(terms: int) -> str:
    return f"query has too many terms: {terms} > {LOOKUP_MAX_TERMS}"


def unknown_match(quoted_mode: str) -> str:
    return f'match must be "catalog" or "body", got {quoted_mode}'


# -- WATCH (§5.8) ----------------------------------------------------------------------------------

INVALID_SINCE: Final = "invalid since cursor"
WATCHES_PER_CONNECTION: Final = "too many subscriptions on this connection"
WATCHES_IN_ALL: Final = "too many subscriptions on this server"
# -- LOOKUP match: links (§5.9, a markproto extension) ------------------------------------------

BAD_RELATIONS: Final = (
    "relations must be a comma list of at most 32 predicates ([a-z0-9-], empty for body links)"
)
BAD_DEPTH: Final = f"depth must be an integer from 1 to {LINK_DEPTH_MAX}"
BAD_LINKS_CURSOR: Final = "invalid links cursor"


def bad_direction(quoted_value: str) -> str:
    return f'direction must be "incoming", "outgoing" or "both", got {quoted_value}'


# -- writes (§5.4-5.6) -----------------------------------------------------------------------------

HASH_PATH_RESERVED: Final = "paths matching /sha256-<hash> are reserved"
"""Sent verbatim: ``<hash>`` is part of the reference's text, not a placeholder."""
TOO_LARGE: Final = "content exceeds size limit"
NOT_MARKDOWN: Final = "publish path must end in .md"
NOT_UTF8: Final = "document body must be valid UTF-8 text"
APPEND_NEEDS_BODY: Final = "append requires a body"
UNARCHIVE_FIRST: Final = "document is archived; unarchive first"
INVALID_EXPECTED_VERSION: Final = "invalid expected-version"
APPEND_NEEDS_EXPECTED_VERSION: Final = "APPEND requires expected-version metadata"
INVALID_APPEND_EXPECTED_VERSION: Final = "invalid expected-version for APPEND (must be >= 1)"


# -- publisher metadata (§6.4) ---------------------------------------------------------------------

TOO_MANY_KEYS: Final = f"too many metadata keys (max {MAX_META_KEYS})"
METADATA_TOO_LARGE: Final = f"metadata too large (max {MAX_META_BYTES} bytes)"


def reserved_key(quoted_key: str) -> str:
    return f"metadata key {quoted_key} is reserved"


def invalid_key(quoted_key: str) -> str:
    return f"metadata key {quoted_key} contains invalid characters"


def multiline_value(quoted_key: str) -> str:
    return f"metadata value for key {quoted_key} contains newlines"


def store_reserved_key(quoted_key: str) -> str:
    return f"invalid publisher metadata: key {quoted_key} is reserved for the store"


def invalid_retention(quoted_value: str) -> str:
    return f"invalid publisher metadata: retention must be a positive integer, got {quoted_value}"


# -- paths no document may have (§2.3) -------------------------------------------------------------

ROOT_IS_DIRECTORY: Final = "the root is a directory"
TOO_MANY_SEGMENTS: Final = f"path has more than {MAX_SEGMENTS} segments"
CONTROL_CHARACTER: Final = "path contains a control character"


def not_canonical(path: str, canonical: str) -> str:
    return f"{path} is not a canonical path (use {canonical})"


def reserved_name(name: str) -> str:
    return f'the name "{name}" is reserved for version history'


def segment_too_long(limit: int) -> str:
    return f"path segment longer than {limit} bytes"


def temporary_name(path: str) -> str:
    return f"{path}: names like .tmp-<hex> are reserved for the store"


def document_above(path: str) -> str:
    return f"{path} is a document, not a directory"


def not_a_directory(path: str) -> str:
    return f"{path} is not a directory"


def is_a_directory(path: str) -> str:
    return f"{path} is a directory"


def not_versioned(path: str) -> str:
    return f"{path} exists but is not a versioned document"
