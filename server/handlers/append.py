"""APPEND (SPEC §5.6): add text to the current version, as a new version.

The order differs from PUBLISH on purpose (the reference's): an empty body is a ``server-error``,
no type default is applied before the store merges the base version's metadata, and
``expected-version`` is required. The store does the merge, the separator newline and the size
check under its write lock, so they see the version actually being extended.
"""

from __future__ import annotations

from markproto.protocol import metadata, status, wire
from markproto.server.handlers import Context
from markproto.server.handlers.publish import check_document, written


async def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    refused = check_document(path, request.body)
    if refused is not None:
        return refused
    if not request.body:
        return wire.error_response(status.Status.SERVER_ERROR, "append requires a body")
    overlay = metadata.publisher_meta(request.meta)
    metadata.validate(overlay)
    metadata.validate_store(overlay)  # the request's own keys, before expected-version (reference)
    expected = metadata.parse_expected_version(request.meta.get("expected-version"), append=True)
    assert expected is not None  # required for APPEND: the rule raises when it is absent
    return written(await ctx.content.append(path, request.body, overlay, expected))
