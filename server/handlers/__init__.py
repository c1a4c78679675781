"""One module per verb. A handler takes the parsed request and its canonical path and returns a
value: a ``Response``, a `CurrentDocument` (a current version, whose bytes the dispatcher's cache
may already hold), or, for writes and for VERSIONS on a history not verified before, an awaitable
of a ``Response``. A handler never writes bytes and never raises for a refusal; whatever it raises
is a fault. WATCH alone answers with a `streaming.LongResponse` instead: the subscription that
keeps its stream (handlers/watch)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from markproto.protocol import grants as grantrules
from markproto.protocol import status, wire
from markproto.server.logsetup import MAX_PATH_CHARS, sanitize

if TYPE_CHECKING:
    from markproto.server.search.service import Lookup
    from markproto.server.storage.content import Content
    from markproto.server.storage.store import Version
    from markproto.server.watch import Hub


auth_log = logging.getLogger("markproto.auth")


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
    refresh: Callable[[], bool] | None = None
    """Reread the tokens file if it changed (rate-bounded by its owner); True when ``grants``
    changed. Asked when a token is unknown, so a token made a moment ago works at once."""

    def read_decision(self, path: str, token: str, *, quiet: bool = False) -> grantrules.Decision:
        """Read auth on ``path``; a refusal is logged with its reason unless ``quiet``."""
        if self.grants is None:
            return grantrules.Decision.ALLOW
        return self._decide(token, path, grantrules.READ, quiet)

    def write_decision(self, path: str, token: str) -> grantrules.Decision:
        """Write auth on ``path`` (every write needs ``publish``); a refusal is logged."""
        return self._decide(token, path, grantrules.PUBLISH, False)

    def can_publish(self, path: str, token: str) -> bool:
        """Whether ``token`` may write ``path`` (asked silently: a read that shows it)."""
        return (
            self.grants is not None
            and self._decide(token, path, grantrules.PUBLISH, True) is grantrules.Decision.ALLOW
        )

    def can_read(self, path: str, token: str) -> bool:
        """The silent filter for LIST entries and LOOKUP rows."""
        return self.read_decision(path, token, quiet=True) is grantrules.Decision.ALLOW

    def _decide(self, token: str, path: str, op: str, quiet: bool) -> grantrules.Decision:
        decision = self._ask(token, path, op)
        if decision is grantrules.Decision.INVALID_TOKEN and self.refresh and self.refresh():
            decision = self._ask(token, path, op)
        refused = decision not in (grantrules.Decision.ALLOW, grantrules.Decision.NO_TOKEN)
        if refused and not quiet and self.grants is not None:
            reason, label = self.grants.refusal(token, path, op, self.clock())
            auth_log.info(
                "auth: token refused",
                extra={
                    "reason": reason,
                    "label": label or "-",
                    "op": op,
                    "path": sanitize(path, MAX_PATH_CHARS),
                },
            )
        return decision

    def _ask(self, token: str, path: str, op: str) -> grantrules.Decision:
        if self.grants is None:  # the tokens file went away: reads public, writes refused
            if op == grantrules.READ:
                return grantrules.Decision.ALLOW
            return grantrules.Decision.NOT_PERMITTED
        if op == grantrules.READ:
            return self.grants.authorize_read(token, path, self.clock())
        return self.grants.authorize(token, path, op, self.clock())


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
