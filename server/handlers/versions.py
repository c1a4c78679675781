"""VERSIONS (SPEC §5.3): a document's stored history, newest first, and whether its chain holds.

Verifying the chain reads every version file. Version files never change once written, so the
verdict is cached per history (a digest of each version's number, file and mtime, so a key stays
small however long the history): repeated VERSIONS on a long history reads no version file, and any
new, pruned or replaced version makes a new key.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from markproto.protocol import bodies, paths, status, wire
from markproto.protocol.grants import Decision
from markproto.server.handlers import Context, denied, not_found
from markproto.server.storage.store import VersionFile

CHAIN_ERROR = "chain integrity check failed"
_CACHE_SIZE = 4096

_verdicts: OrderedDict[bytes, bool] = OrderedDict()


def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    decision = ctx.read_decision(path, request.meta.get("auth", ""))
    if decision is not Decision.ALLOW:
        return denied(decision)
    history = None if paths.is_hash_path(path) else ctx.content.history(path)
    if not history:
        return not_found(path)
    out = {"total": str(len(history)), "current": str(history[-1].number)}
    if _chain_valid(ctx, history):
        out["chain-valid"] = "true"
    else:
        out["chain-valid"] = "false"
        out["chain-error"] = CHAIN_ERROR
    entries = [bodies.HistoryEntry(v.number, v.modified) for v in reversed(history)]
    return wire.Response(status.Status.OK, out, bodies.render_history(path, entries))


def _chain_valid(ctx: Context, history: list[VersionFile]) -> bool:
    key = hashlib.sha256(
        "\n".join(f"{v.number}\t{v.file}\t{v.modified.isoformat()}" for v in history).encode(
            "utf-8", "surrogateescape"
        )
    ).digest()
    verdict = _verdicts.get(key)
    if verdict is None:
        verdict = ctx.content.chain_valid(history)
        _verdicts[key] = verdict
        if len(_verdicts) > _CACHE_SIZE:
            _verdicts.popitem(last=False)
    else:
        _verdicts.move_to_end(key)
    return verdict
