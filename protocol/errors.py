"""The protocol's exceptions. Parsers raise only these (and subclasses), never a bare ValueError."""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class: something did not follow the Mark Protocol."""


class MalformedRequest(ProtocolError):
    """A grammar error in a request. Servers answer ``bad-request`` ``bad request``."""


class RequestTooLarge(ProtocolError):
    """A request over a size limit (or an empty stream). Servers answer ``server-error``
    ``could not read request``: the reference treats every read failure alike."""


class MalformedResponse(ProtocolError):
    """A response a client cannot parse."""


class StoreFormatError(ProtocolError):
    """A stored version file that breaks the strict version-file grammar."""


class InvalidURL(ProtocolError):
    """A string that is not a usable ``mark://`` URL."""


class InvalidMetadata(ProtocolError):
    """Publisher metadata that breaks a rule; ``str(exc)`` is the exact wire message."""


class InvalidCursor(ProtocolError):
    """A LIST cursor that cannot be used; ``str(exc)`` is the exact wire message."""


class InvalidPattern(ProtocolError):
    """A token path pattern that cannot be compiled."""
