"""VERSIONS (SPEC §5.3): a document's stored history, newest first, and whether its chain holds.

Verifying the chain reads every version file, so it never runs on the event loop: a history
verified before answers at once from `Content`'s verdicts, any other waits for the reader thread.
"""

from __future__ import annotations

from collections.abc import Awaitable

from markproto.protocol import bodies, paths, status, wire
from markproto.protocol.grants import Decision
from markproto.server.handlers import Context, denied, not_found
from markproto.server.storage.store import History


def handle(
    request: wire.Request, path: str, ctx: Context
) -> wire.Response | Awaitable[wire.Response]:
    decision = ctx.read_decision(path, request.meta.get("auth", ""))
    if decision is not Decision.ALLOW:
        return denied(decision)
    history = None if paths.is_hash_path(path) else ctx.content.history(path)
    if history is None:
        return not_found(path)
    verdict = ctx.content.chain_verdict(history)
    if verdict is None:
        return _verified(history, ctx)
    return _response(history, verdict)


async def _verified(history: History, ctx: Context) -> wire.Response:
    return _response(history, await ctx.content.verify_chain(history))


def _response(history: History, chain_valid: bool) -> wire.Response:
    out = {"total": str(len(history.entries)), "current": str(history.entries[-1].version)}
    if chain_valid:
        out["chain-valid"] = "true"
    else:
        out["chain-valid"] = "false"
        out["chain-error"] = status.CHAIN_ERROR
    body = bodies.render_history(history.path, history.entries[::-1])
    return wire.Response(status.Status.OK, out, body)
