"""The Mark Protocol, sans-IO: bytes in, values out; values in, bytes out.

Nothing here touches sockets, asyncio, the filesystem or the clock. Both ``markproto.server`` and
``markproto.client`` build on these modules, so every rule both sides must agree on lives here once.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # Looked up lazily: importlib.metadata costs ~15 ms, and every `mark` run imports this package.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("markproto")
        except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
            return "0.0.0"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
