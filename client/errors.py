"""Every failure the client library raises, as one tree under ``MarkError``.

A caller who only wants to know that a request did not work catches ``MarkError``; one who acts
on the kind of failure catches a branch::

    MarkError
    ├── UsageError (a ValueError)    the call cannot be made as written; nothing was sent
    │   └── InvalidURL               a target that is no usable mark:// URL
    ├── TransportError               no usable answer came back; ``sent``: did a request byte leave?
    │   ├── Unreachable, ConnectionLost, StreamReset, RequestTimeout   (reads retry these)
    │   ├── ResponseTooLarge, ALPNMismatch, UnreadableResponse
    │   ├── OutcomeUnknown           a write that may or may not have been applied
    │   └── TrustError               the peer's certificate was refused; nothing was sent
    │       └── HandshakeFailed, Untrusted, CertificateChanged, KnownHostsError
    ├── StatusError                  ``Result.raise_for_status()``: the server refused the request
    ├── AnchorNotFound               ``url#anchor`` names no section of the document
    └── TokenStoreError              the tokens file cannot be read back exactly or written

A server's refusal (``not-found``, ``conflict``, ...) is an answer, so the verbs return it as a
``Result``; ``raise_for_status`` turns it into a ``StatusError`` for callers who prefer that.
Every message is one line, except ``CertificateChanged``'s deliberately loud warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from markproto.protocol import errors as protocol_errors

if TYPE_CHECKING:
    from markproto.client.results import Result
    from markproto.protocol.url import MarkURL

MAX_ANCHORS_SHOWN = 20


class MarkError(Exception):
    """Base of every failure the client library raises."""


class UsageError(MarkError, ValueError):
    """An argument the call cannot be made with; raised before anything is sent."""


class InvalidURL(UsageError, protocol_errors.InvalidURL):
    """A target that is not a usable ``mark://`` URL (or a bare path without a default host)."""


class TransportError(MarkError):
    """No usable answer came back. ``sent`` is whether any request byte was handed to QUIC: when
    false the request may be sent again; when true a write's outcome is unknown."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class Unreachable(TransportError):
    """No usable connection: name not resolved, refused, no answer or no stream within the dial
    timeout."""


class ConnectionLost(TransportError):
    """The connection ended (closed by the peer, idle timeout, refused, client closed)
    mid-request."""


class StreamReset(TransportError):
    """The server reset the request's stream."""


class RequestTimeout(TransportError):
    """The request was sent but no complete response came within the request timeout."""


class ResponseTooLarge(TransportError):
    """The response passed the size cap; the stream was stopped."""


class ALPNMismatch(TransportError):
    """The peer speaks QUIC but not the Mark Protocol."""


class UnreadableResponse(TransportError):
    """The server's bytes are not a Mark Protocol response the client can read."""


class OutcomeUnknown(TransportError):
    """A write's bytes may have reached the server but no readable answer came back: fetch
    before retrying, or risk a second version."""


class TrustError(TransportError):
    """The peer's certificate was refused, or the trust store cannot be used; nothing was sent."""


class HandshakeFailed(TrustError):
    """TLS refused the peer. ``reason`` is aioquic's; ``fingerprint`` is set when the certificate
    failed verification, the one case pinning it could resolve."""

    def __init__(
        self, message: str, *, reason: str = "", fingerprint: str | None = None, sent: bool = False
    ) -> None:
        super().__init__(message, sent=sent)
        self.reason = reason
        self.fingerprint = fingerprint


class Untrusted(TrustError):
    """A certificate no CA vouches for, which the policy (or the user) declined to pin."""


class CertificateChanged(TrustError):
    """A pinned authority presented another certificate; the message is the loud multi-line one."""


class KnownHostsError(TrustError):
    """A ``known_hosts`` file that cannot be read back exactly or written; never guessed around."""


class StatusError(MarkError):
    """The server answered with a status other than ``ok``, ``created`` or ``not-modified``.
    ``status`` is that status, ``message`` the server's one-line reason, ``result`` the answer."""

    def __init__(self, result: Result) -> None:
        self.status = result.status
        self.message = result.message
        self.result = result
        super().__init__(f"{self.status}: {self.message}" if self.message else self.status)


class AnchorNotFound(MarkError):
    """``url#anchor`` names no section of the fetched document; ``anchors`` lists those it has."""

    def __init__(self, url: MarkURL, anchors: list[str]) -> None:
        shown = ", ".join(f"#{a}" for a in anchors[:MAX_ANCHORS_SHOWN])
        hidden = len(anchors) - MAX_ANCHORS_SHOWN
        more = f" and {hidden} more" if hidden > 0 else ""
        where = f"sections: {shown}{more}" if anchors else "the document has no headings"
        super().__init__(f"{url}: no section #{url.anchor} ({where})")
        self.anchors = anchors


class TokenStoreError(MarkError):
    """The tokens file cannot be read back exactly or cannot be written."""
