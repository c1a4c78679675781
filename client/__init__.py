"""The markproto client library: typed Mark Protocol verbs over pooled QUIC connections.

Everything a program needs is importable from here::

    from markproto.client import Client, MarkError

    async with Client.from_environment() as client:   # MARK_HOME, MARK_HOST, MARK_AUTH, as `mark`
        result = (await client.fetch("mark://localhost/notes/quic.md")).raise_for_status()

``Client`` has one coroutine per verb and ``SyncClient`` the same verbs as blocking calls. They
return ``Result`` values (``LookupResult`` for LOOKUP, ``LinksResult`` for its links); every
failure to get one raises a ``MarkError`` (see ``markproto.client.errors`` for the tree). WATCH is
``Client.watch``, an async iterator of ``WatchEvent`` and ``Resync`` values that resumes from its
``Cursor`` on its own, and ``Client.changes``, what changed since a cursor (``Changes``). ``Pool``,
``Trust``, ``Tokens``, ``TokenStore`` and ``Cache`` configure a ``Client`` by hand.

Names are loaded on first use, so importing this package costs next to nothing (the ``mark``
CLI starts from it), and aioquic is imported only when a client first dials.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a few ms) to read it
if TYPE_CHECKING:
    from typing import Any

    from markproto.client.cache import Cache as Cache
    from markproto.client.client import Client as Client
    from markproto.client.connection import Pool as Pool
    from markproto.client.errors import ALPNMismatch as ALPNMismatch
    from markproto.client.errors import AnchorNotFound as AnchorNotFound
    from markproto.client.errors import CertificateChanged as CertificateChanged
    from markproto.client.errors import ConnectionLost as ConnectionLost
    from markproto.client.errors import HandshakeFailed as HandshakeFailed
    from markproto.client.errors import InvalidURL as InvalidURL
    from markproto.client.errors import KnownHostsError as KnownHostsError
    from markproto.client.errors import MarkError as MarkError
    from markproto.client.errors import OutcomeUnknown as OutcomeUnknown
    from markproto.client.errors import RequestTimeout as RequestTimeout
    from markproto.client.errors import ResponseTooLarge as ResponseTooLarge
    from markproto.client.errors import StatusError as StatusError
    from markproto.client.errors import StreamReset as StreamReset
    from markproto.client.errors import TokenStoreError as TokenStoreError
    from markproto.client.errors import TransportError as TransportError
    from markproto.client.errors import TrustError as TrustError
    from markproto.client.errors import Unreachable as Unreachable
    from markproto.client.errors import UnreadableResponse as UnreadableResponse
    from markproto.client.errors import Untrusted as Untrusted
    from markproto.client.errors import UsageError as UsageError
    from markproto.client.results import LinksResult as LinksResult
    from markproto.client.results import LookupResult as LookupResult
    from markproto.client.results import Result as Result
    from markproto.client.sync import SyncClient as SyncClient
    from markproto.client.tokenstore import Tokens as Tokens
    from markproto.client.tokenstore import TokenStore as TokenStore
    from markproto.client.trust import Trust as Trust
    from markproto.client.watch import Changes as Changes
    from markproto.client.watch import Resync as Resync
    from markproto.client.watch import Watch as Watch
    from markproto.protocol.bodies import LinkDocument as LinkDocument
    from markproto.protocol.bodies import LinkRow as LinkRow
    from markproto.protocol.bodies import LookupRow as LookupRow
    from markproto.protocol.status import Status as Status
    from markproto.protocol.url import MarkURL as MarkURL
    from markproto.protocol.watch import Cursor as Cursor
    from markproto.protocol.watch import WatchEvent as WatchEvent

_ERRORS = [
    "MarkError",
    "UsageError",
    "InvalidURL",
    "TransportError",
    "Unreachable",
    "ConnectionLost",
    "StreamReset",
    "RequestTimeout",
    "ResponseTooLarge",
    "ALPNMismatch",
    "UnreadableResponse",
    "OutcomeUnknown",
    "TrustError",
    "HandshakeFailed",
    "Untrusted",
    "CertificateChanged",
    "KnownHostsError",
    "StatusError",
    "AnchorNotFound",
    "TokenStoreError",
]
_HOMES = {
    "Client": "markproto.client.client",
    "SyncClient": "markproto.client.sync",
    "Result": "markproto.client.results",
    "LookupResult": "markproto.client.results",
    "LinksResult": "markproto.client.results",
    "LookupRow": "markproto.protocol.bodies",
    "LinkRow": "markproto.protocol.bodies",
    "LinkDocument": "markproto.protocol.bodies",
    "MarkURL": "markproto.protocol.url",
    "Status": "markproto.protocol.status",
    "Pool": "markproto.client.connection",
    "Trust": "markproto.client.trust",
    "Tokens": "markproto.client.tokenstore",
    "TokenStore": "markproto.client.tokenstore",
    "Cache": "markproto.client.cache",
    "Watch": "markproto.client.watch",
    "Resync": "markproto.client.watch",
    "Changes": "markproto.client.watch",
    "WatchEvent": "markproto.protocol.watch",
    "Cursor": "markproto.protocol.watch",
    **dict.fromkeys(_ERRORS, "markproto.client.errors"),
}
"""Where each public name is defined; ``__getattr__`` imports it from there when first used."""

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
