"""LOOKUP with ``match: links`` (docs/SPEC.md §5.9, a markproto extension): the links of a
document or a folder, what links to it, and further out, as the reader may see them.

The path is read-checked like a FETCH of it (a folder like a LIST), and every other document is
seen only when the reader may read it: a document it may not read is never a row, never
counted, never a resolved target, and no link from it is shown (``LinkIndex`` resolves for the
reader). A request without ``match: links`` never comes here, so every LOOKUP a reference
client sends keeps the answer §5.7 gives it.
"""

from __future__ import annotations

from markproto.protocol import bodies, paths, status, wire
from markproto.protocol.grants import Decision
from markproto.server.handlers import Context, bad_request, denied, not_found
from markproto.server.handlers.listing import dir_decision
from markproto.server.search import graph


def handle(request: wire.Request, path: str, ctx: Context) -> wire.Response:
    meta = request.meta
    try:
        query = graph.parse(meta)
    except graph.BadLinksQuery as exc:
        return bad_request(str(exc))
    token = meta.get("auth", "")
    current = ctx.content.current(path)
    folder = current is None and (path == "/" or ctx.content.is_dir(path))
    decision = dir_decision(ctx, path, token) if folder else ctx.read_decision(path, token)
    if decision is not Decision.ALLOW:
        return denied(decision)
    if current is None and not folder:
        return not_found(path)
    if current is not None and current.archived:
        return wire.error_response(status.Status.ARCHIVED, status.is_archived(path))
    if ctx.lookup is None:
        return wire.error_response(status.Status.SERVER_ERROR, status.INTERNAL)
    catalog = ctx.lookup.catalog

    def title(doc: str) -> str:
        entry = catalog.get(doc)
        return entry.title if entry is not None else paths.base(doc)

    page = graph.answer(
        ctx.lookup.links,
        query,
        path,
        folder,
        readable=lambda doc: ctx.can_read(doc, token),
        title=title,
    )
    out = {
        "match": graph.LINKS,
        "matches": str(len(page.rows)),
        "total": str(page.total),
        "complete": "false" if page.next is not None else "true",
    }
    if page.next is not None:
        out["next-cursor"] = str(page.next)
    subject = path + "/" if folder and path != "/" else path
    body = bodies.render_links(subject, page.rows, page.documents)
    return wire.Response(status.Status.OK, out, body)
