"""WATCH (SPEC §5.8): the checks before a subscription, in the reference's order.

WATCH served at all, not a hash path, a readable ``since`` cursor, read auth on the scope (as for
a folder: the path, then ``<path>/``); then the subscription, which the transport starts on the
stream. Whatever is refused here is an ordinary response in the acknowledgement's place.
"""

from __future__ import annotations

from markproto.protocol import paths, status, wire
from markproto.protocol.grants import Decision
from markproto.protocol.watch import Cursor, InvalidWatchCursor
from markproto.server.handlers import Context, bad_request, denied
from markproto.server.handlers.listing import dir_decision
from markproto.server.watch import Subscription


def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response | Subscription:
    if ctx.watch is None:
        return bad_request(status.unsupported_verb(request.verb))
    if paths.is_hash_path(path):
        return bad_request(status.HASH_PATH_RESERVED)
    since = None
    raw = request.meta.get("since", "")
    if raw:
        try:
            since = Cursor.parse(raw)
        except InvalidWatchCursor:
            return bad_request(status.INVALID_SINCE)
    token = request.meta.get("auth", "")
    decision = dir_decision(ctx, path, token)
    if decision is not Decision.ALLOW:
        return denied(decision)
    return ctx.watch.subscription(path, token, since)
