"""One module per verb. A handler takes the parsed request and its canonical path and returns a
value: a ``Response``, a `CurrentDocument` (a current version, whose bytes the dispatcher's cache
may already hold), or, for writes and for VERSIONS on a history not verified before, an awaitable
of a ``Response``. A handler never writes bytes and never raises for a refusal; whatever it raises
is a fault. WATCH alone answers with a `streaming.LongResponse` instead: the subscription that
keeps its stream (handlers/watch)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from markproto.protocol import grants as grantrules
from markproto.protocol import status, wire

if TYPE_CHECKING:
    from markproto.server.search.service import Lookup
    from markproto.server.storage.content import Content
    from markproto.server.storage.store import Version
    from markproto.server.watch import Hub


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Context:
    """Everything a handler may use. Auth is a decision the handler asks for, not a wrapper."""

    content: Content
    lookup: Lookup | None = None
    grants: grantrules.Grants | None = None
    """None when no token store is configured: every read is public and every write refused."""
    read_only: bool = False
    watch: Hub | None = None
    """The WATCH subscriptions; None when WATCH is not served."""
    clock: Callable[[], datetime] = field(default=utc_now)

    def read_decision(self, path: str, token: str) -> grantrules.Decision:
        if self.grants is None:
            return grantrules.Decision.ALLOW
        return self.grants.authorize_read(token, path, self.clock())

    def can_read(self, path: str, token: str) -> bool:
        """The silent filter for LIST entries and LOOKUP rows."""
        return self.read_decision(path, token) is grantrules.Decision.ALLOW


@dataclass(frozen=True, slots=True)
class CurrentDocument:
    """The answer to a FETCH of a current version: `responses.document` of it, which the
    dispatcher encodes (or finds encoded already)."""

    version: Version


Reply = wire.Response | CurrentDocument | Awaitable[wire.Response]
Handler = Callable[[wire.Request, str, Context], Reply]


def denied(decision: grantrules.Decision) -> wire.Response:
    """The response for a refused authorization decision."""
    return wire.error_response(decision.status, decision.message)


def not_found(path: str) -> wire.Response:
    return wire.error_response(status.Status.NOT_FOUND, status.not_found(path))


def bad_request(message: str) -> wire.Response:
    return wire.error_response(status.Status.BAD_REQUEST, message)
