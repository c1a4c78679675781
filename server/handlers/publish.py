"""PUBLISH (SPEC §5.4): a new version, an idempotent no-op, or, with an empty body, unarchive.

Checks run in the reference's order, so a request with several faults gets the reference's answer:
document path and UTF-8, then the empty-body unarchive, then publisher metadata, the type default,
the store-level keys and ``expected-version``; then the store's own refusals (conflict, archived,
collision, size), which come back as values and are answered here, with the ``expected-version``
already parsed, in one place for PUBLISH and APPEND.
"""

from __future__ import annotations

from markproto.protocol import bodies, metadata, status, times, wire
from markproto.protocol.errors import InvalidMetadata
from markproto.server.handlers import Context, bad_request, not_found
from markproto.server.storage import store


def check_document(path: str, body: bytes) -> wire.Response | None:
    """The reference's ``ValidateDocumentContent``, shared with APPEND (also for empty bodies)."""
    if not path.endswith(".md"):
        return bad_request(status.NOT_MARKDOWN)
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return bad_request(status.NOT_UTF8)
    return None


def outcome(
    result: store.Written | store.Refusal, path: str, expected: int | None, *, append: bool
) -> wire.Response:
    """The answer to a write the store took or refused (SPEC §5.4-5.6)."""
    match result:
        case store.Written(version=version, created=created):
            code = status.Status.CREATED if created else status.Status.OK
            meta = {"modified": times.format_time(version.modified), "version": str(version.number)}
            return wire.Response(code, meta, b"")
        case store.Conflict(current=current):
            return _conflict(expected, current, append=append)
        case store.Missing():
            return not_found(path)
        case store.Archived():
            return wire.error_response(status.Status.ARCHIVED, status.UNARCHIVE_FIRST)
        case store.Collision(reason=reason):
            return bad_request(reason)
        case store.TooLarge():
            return wire.error_response(status.Status.SERVER_ERROR, status.TOO_LARGE)
        case store.Invalid(message=message):
            return bad_request(message)


def _conflict(expected: int | None, server: int, *, append: bool) -> wire.Response:
    """PUBLISH and APPEND word a conflict differently; ``expected-version: 0`` has its own body."""
    your = server if expected is None else expected  # None: an unconditional PUBLISH lost a race
    if your == 0 and not append:
        body = bodies.exists_conflict_body(server)
    else:
        body = bodies.conflict_body(your, server, append=append)
    meta = {"your-version": str(your), "server-version": str(server)}
    return wire.Response(status.Status.CONFLICT, meta, body)


async def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    refused = check_document(path, request.body)
    if refused is not None:
        return refused
    if not request.body:
        if ctx.content.current(path) is None:
            return not_found(path)
        unarchived = await ctx.content.set_archived(path, False)
        if not isinstance(unarchived, store.Version):
            return outcome(unarchived, path, None, append=False)
        return wire.Response(status.Status.OK, {"version": str(unarchived.number)}, b"")
    try:
        publisher = metadata.for_publish(path, metadata.publisher_meta(request.meta))
        expected = metadata.parse_expected_version(
            request.meta.get("expected-version"), append=False
        )
    except InvalidMetadata as exc:
        return bad_request(str(exc))
    result = await ctx.content.publish(path, request.body, publisher, expected)
    return outcome(result, path, expected, append=False)
