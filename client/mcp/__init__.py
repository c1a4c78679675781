"""``mark mcp``: the MCP bridge, a thin face over ``client.Client`` for agents.

Every byte of a result costs the agent tokens, so results are lean envelopes, long documents
come back as outlines, and ``budget`` lets one lookup carry the evidence. One module per job:

- ``bridge``: the servers, the lean/full profile, tool registration, instructions, ``serve``
- ``envelope``: the result format, paging, which outcomes are tool errors
- ``params``: the parameter types every tool group shares
- ``documents``: ``mark_fetch``, ``mark_list``, ``mark_versions``, ``mark_discover``
- ``lookup``: ``mark_lookup``, ``mark_lookup_all``; ``expand``: the ``budget`` expansion
- ``publishing``: ``mark_publish``, ``mark_append``, ``mark_archive``
- ``resources`` and ``prompts``
- ``watching``: resource subscriptions backed by WATCH, and ``mark_changes``

A new tool group is one more module with a ``register(bridge)``, listed in
``bridge.build_server``. Only ``mark mcp`` imports this package: the SDK costs most of a
second to import.
"""

from __future__ import annotations

from markproto.client.mcp.bridge import PROFILES, Profile, build_server, instructions, serve
from markproto.client.mcp.envelope import MAX_RESULT, page

__all__ = ["MAX_RESULT", "PROFILES", "Profile", "build_server", "instructions", "page", "serve"]
