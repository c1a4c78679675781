"""Request-path rules both sides must agree on: `..` detection, canonical form, hash and version
paths, LOOKUP scopes, and which paths may name a document.

Canonical paths are rooted: every helper here treats its input as starting at ``/``, as the
server does after ``path.Clean("/" + raw)``. The reference is Go, so integers parse with Go's
``strconv.Atoi`` rules (:func:`atoi`), not Python's more lenient ``int()``.
"""

from __future__ import annotations

import re

from markproto.protocol import status
from markproto.protocol.chars import has_control
from markproto.protocol.digests import is_hash_ref
from markproto.protocol.limits import MAX_SEGMENTS

_ATOI = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
VERSIONS_DIR = "versions"
_MAX_SEGMENT_BYTES = 255


def atoi(text: str) -> int | None:
    """Go ``strconv.Atoi``: optional sign, ASCII digits only, 64-bit range; else None.

    Python's ``int()`` also takes ``_``, surrounding whitespace and non-ASCII digits, none of
    which the reference accepts, so every protocol integer goes through here.
    """
    if not _ATOI.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def has_dotdot(raw: str) -> bool:
    """Whether any ``/``-separated segment of the raw request path is exactly ``..``."""
    return ".." in raw.split("/")


def clean(raw: str) -> str:
    """Go ``path.Clean("/" + raw)``: the canonical path every later rule and message uses.

    Empty and ``.`` segments go, ``..`` removes the segment before it (never above the root),
    and only the root keeps a trailing slash.
    """
    out: list[str] = []
    for segment in raw.split("/"):
        if segment == "..":
            if out:
                out.pop()
        elif segment not in ("", "."):
            out.append(segment)
    return "/" + "/".join(out)


def is_hash_path(path: str) -> bool:
    """``sha256-`` + 64 lowercase hex, after an optional leading ``/`` (uppercase is a name)."""
    return is_hash_ref(path.removeprefix("/"))


def hash_of(path: str) -> str:
    """The hash a path :func:`is_hash_path` accepted names: ``/sha256-…`` -> ``sha256-…``."""
    return path.removeprefix("/")


def split_version(path: str) -> tuple[str, int] | None:
    """``/a.md/v3`` -> ``("/a.md", 3)``; None when the last segment is not a version.

    The number follows Go ``Atoi`` (``v+3`` and ``v03`` are 3) and must be at least 1; the
    base must be non-empty, so ``/v3`` is a name. Whether the base is a directory (then the
    path is a name too, like ``/api/v2``) only the store knows, so the caller decides that.
    """
    cut = path.rfind("/")
    segment = path[cut + 1 :]
    if cut <= 0 or not segment.startswith("v"):
        return None
    number = atoi(segment[1:])
    if number is None or number < 1:
        return None
    return path[:cut], number


def normalize_scope(scope: str) -> str:
    """A LOOKUP scope as the catalog compares it: rooted, no trailing slash, ``""`` is ``/``.

    Every trailing slash goes (``//`` is the root too), so a scope never ends up empty.
    """
    if not scope.startswith("/"):
        scope = "/" + scope
    return scope.rstrip("/") or "/"


def in_scope(path: str, scope: str) -> bool:
    """Whether ``path`` is the normalized ``scope`` or under it (``/oth`` misses ``/other``)."""
    return scope == "/" or path == scope or path.startswith(scope + "/")


def parent(path: str) -> str:
    """Go ``path.Dir`` for rooted paths: ``/docs/a.md`` -> ``/docs``, ``/a.md`` -> ``/``."""
    return clean(path[: path.rfind("/") + 1])


def base(path: str) -> str:
    """Go ``path.Base``: the last element, ``/`` for the root, ``.`` for the empty string."""
    if not path:
        return "."
    path = path.rstrip("/")
    return path[path.rfind("/") + 1 :] if path else "/"


def join(dir: str, name: str) -> str:
    """Go ``path.Join`` for a rooted directory: the canonical path of ``name`` inside ``dir``."""
    return clean(dir + "/" + name)


def writable_reason(path: str) -> str | None:
    """Why ``path`` cannot name a stored document, or None when it can.

    The store maps paths straight onto folders, so anything that could alias another path or
    collide with the store's own files is refused before it touches the disk:

    * non-canonical paths (empty, ``.`` or ``..`` segments, a trailing slash) and the root,
      which is always a directory;
    * a segment named ``versions``: every folder keeps its documents' history in a
      ``versions/`` directory (store layout, §7.1), so a document or folder of that name
      would mix with version files;
    * hash paths, which name content rather than documents;
    * control characters other than TAB, which the request line cannot carry either;
    * more than ``MAX_SEGMENTS`` segments, which would make as many fsynced folders;
    * segments over 255 UTF-8 bytes, more than common filesystems hold in one name.

    The ``.md`` suffix is not checked: PUBLISH and APPEND answer it with their own wire message.
    """
    if path == "/":
        return status.ROOT_IS_DIRECTORY
    if clean(path) != path:
        return status.not_canonical(path, clean(path))
    if is_hash_path(path):
        return status.HASH_PATH_RESERVED
    if has_control(path, tab_ok=True):
        return status.CONTROL_CHARACTER
    segments = path[1:].split("/")
    if VERSIONS_DIR in segments:
        return status.reserved_name(VERSIONS_DIR)
    if len(segments) > MAX_SEGMENTS:
        return status.TOO_MANY_SEGMENTS
    if any(len(s.encode("utf-8", "surrogatepass")) > _MAX_SEGMENT_BYTES for s in segments):
        return status.segment_too_long(_MAX_SEGMENT_BYTES)
    return None
