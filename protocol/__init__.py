"""The Mark Protocol, sans-IO: bytes in, values out; values in, bytes out.

Nothing here touches sockets, asyncio, the filesystem or the clock. Both ``markproto.server`` and
``markproto.client`` build on these modules, so every rule both sides must agree on lives here once.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("markproto")
except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0.0.0"
