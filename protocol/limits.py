"""Every size, count and default the protocol fixes, in one place (docs/SPEC.md, "Limits")."""

from __future__ import annotations

from typing import Final

ALPN: Final = "mark"
DEFAULT_PORT: Final = 6309
SCHEME: Final = "mark"

MAX_REQUEST_LINE: Final = 4096
"""Bytes of the request line, excluding its ``\\n``."""
MAX_PATH: Final = MAX_REQUEST_LINE - len("VERSIONS") - 1
"""4087: the longest path that still fits the longest verb on one request line."""
MAX_SEGMENTS: Final = 32
"""Segments of a document's path, its name included (``/a/b.md`` has 2): every folder a write
creates is fsynced, and real trees are a handful deep. Not the reference's (it has none)."""
MAX_FRONTMATTER: Final = 65536
"""Bytes of a request's metadata block, between the fences."""
MAX_BODY: Final = 1 << 20
"""Bytes of a request body and of a stored document's content (1 MiB)."""
MAX_PAYLOAD: Final = MAX_FRONTMATTER + MAX_BODY + 64
"""Bytes after the request line."""
MAX_REQUEST: Final = MAX_REQUEST_LINE + 1 + MAX_PAYLOAD
"""The most bytes a server reads on one request stream."""
MAX_RESPONSE: Final = 4 * MAX_BODY
"""The most bytes a client reads for one response."""

MAX_META_KEYS: Final = 50
MAX_META_BYTES: Final = 1024

LIST_PAGE_MAX: Final = 1000
LOOKUP_DEFAULT_LIMIT: Final = 10
LOOKUP_MAX: Final = 1000
LINKS_DEFAULT_LIMIT: Final = 100
"""Rows of a ``match: links`` page when the request sets no ``limit`` (at most LOOKUP_MAX)."""
LINK_DEPTH_MAX: Final = 5
"""Steps a ``match: links`` walk takes at most (``depth``)."""
LINK_NODES_MAX: Final = 1000
"""Documents a ``match: links`` walk reaches at most; the links of those past it are not
followed."""
LOOKUP_MAX_TERMS: Final = 32
LOOKUP_MIN_QUERY_RUNES: Final = 2
SNIPPET_MAX: Final = 240
TOKEN_MAX_BYTES: Final = 32
"""Body-match tokens longer than this many UTF-8 bytes are not indexed whole."""

STORED_FRONTMATTER_MAX: Final = 2048
"""A stored version file's frontmatter block, fences included."""
STORED_FILE_MAX: Final = MAX_BODY + STORED_FRONTMATTER_MAX

MANIFEST_PATH: Final = "/.well-known/agent-manifest.md"
HEALTH_PATH: Final = "/health"
OUTLINE_THRESHOLD: Final = 8 * 1024
"""Bodies larger than this are shown as an outline by agent-facing surfaces unless forced."""

READ_BATCH: Final = 32
"""Datagrams a QUIC endpoint (server or client) reads off its socket before it transmits, once
per connection (`datagrams.queued`); the bound keeps what is handled before anyone hears back to
a few ms."""
LOOPBACK_DATAGRAM: Final = 16384
"""The largest UDP payload a client sends to a loopback peer once the handshake is done (SPEC
§1.1): everywhere else QUIC's 1,200 bytes. 32 KiB and 64 KiB cost both ends more CPU per document
of an import than 16 KiB (docs/PERFORMANCE.md "Import: what moved it")."""
DATAGRAM_MAX: Final = 65535
"""The largest UDP payload: what a read off the socket asks for."""
