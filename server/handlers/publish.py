"""PUBLISH (SPEC §5.4): a new version, an idempotent no-op, or, with an empty body, unarchive.

Checks run in the reference's order, so a request with several faults gets the reference's answer:
document path and UTF-8, then the empty-body unarchive, then publisher metadata, the type default,
the store-level keys and ``expected-version``. Refusals raised by the store (conflict, archived,
collision, size) and by the metadata rules are turned into responses by the dispatcher, in one
place for every write verb.
"""

from __future__ import annotations

from markproto.protocol import bodies, metadata, status, wire
from markproto.server.handlers import Context, bad_request, not_found
from markproto.server.storage.store import Written


def check_document(path: str, body: bytes) -> wire.Response | None:
    """The reference's ``ValidateDocumentContent``, shared with APPEND (also for empty bodies)."""
    if not path.endswith(".md"):
        return bad_request("publish path must end in .md")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return bad_request("document body must be valid UTF-8 text")
    return None


def written(result: Written) -> wire.Response:
    """``created`` for a new version; ``ok`` naming the existing version for a no-op."""
    code = status.Status.CREATED if result.created else status.Status.OK
    meta = {"modified": bodies.rfc3339(result.doc.modified), "version": str(result.doc.number)}
    return wire.Response(code, meta, b"")


async def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    refused = check_document(path, request.body)
    if refused is not None:
        return refused
    if not request.body:
        if ctx.content.current(path) is None:
            return not_found(path)
        doc = await ctx.content.set_archived(path, False)
        return wire.Response(status.Status.OK, {"version": str(doc.number)}, b"")
    publisher = metadata.publisher_meta(request.meta)
    metadata.validate(publisher)
    publisher = metadata.with_type_default(path, publisher)
    metadata.validate_store(publisher)
    expected = metadata.parse_expected_version(request.meta.get("expected-version"), append=False)
    result = await ctx.content.publish(path, request.body, metadata.normalize(publisher), expected)
    return written(result)
