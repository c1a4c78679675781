"""ARCHIVE (SPEC §5.5): hide a document from FETCH, LIST, LOOKUP and the hash index.

No version is created and no version file changes (the flag is kept apart by the store), so the
document's etags and chain stay valid and its history is still served. The body is ignored.
"""

from __future__ import annotations

from markproto.protocol import status, wire
from markproto.server.handlers import Context, not_found
from markproto.server.handlers.publish import outcome
from markproto.server.storage.store import Version


async def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    if ctx.content.current(path) is None:
        return not_found(path)
    result = await ctx.content.set_archived(path, True)
    if not isinstance(result, Version):
        return outcome(result, path, None, append=False)
    meta = {"archived": "true", "version": str(result.number)}
    return wire.Response(status.Status.OK, meta, b"")
