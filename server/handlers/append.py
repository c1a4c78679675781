"""APPEND (SPEC §5.6): add text to the current version, as a new version.

The order differs from PUBLISH on purpose (the reference's): an empty body is a ``server-error``,
no type default is applied before the store merges the base version's metadata, and
``expected-version`` is required. The store does the merge, the separator newline and the size
check under its write lock, so they see the version actually being extended.
"""

from __future__ import annotations

from markproto.protocol import metadata, status, wire
from markproto.protocol.errors import InvalidMetadata
from markproto.server.handlers import Context, bad_request
from markproto.server.handlers.publish import check_document, outcome


async def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    refused = check_document(path, request.body)
    if refused is not None:
        return refused
    if not request.body:
        return wire.error_response(status.Status.SERVER_ERROR, status.APPEND_NEEDS_BODY)
    try:
        overlay = metadata.publisher_meta(request.meta)
        metadata.validate(overlay)
        metadata.validate_store(overlay)  # the request's own keys, before expected-version
        expected = metadata.parse_expected_version(
            request.meta.get("expected-version"), append=True
        )
    except InvalidMetadata as exc:
        return bad_request(str(exc))
    assert expected is not None  # required for APPEND: the rule raises when it is absent
    result = await ctx.content.append(path, request.body, overlay, expected)
    return outcome(result, path, expected, append=True)
