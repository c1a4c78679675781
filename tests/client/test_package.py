"""The public surface of ``markproto.client``: every name importable from the package, and the
package cheap to import (the ``mark`` CLI starts from it; aioquic waits for the first dial)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import pytest
from support import REPO

import markproto.client

HEAVY = ("aioquic", "mistletoe", "mcp", "yaml")


def loaded_after(code: str) -> list[str]:
    """The heavy top-level packages a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}}))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return [name for name in ast.literal_eval(out.splitlines()[-1]) if name in HEAVY]


def test_importing_the_package_loads_nothing_heavy() -> None:
    assert loaded_after("import markproto.client") == []


def test_making_clients_loads_no_network_stack_until_the_first_dial() -> None:
    code = (
        "from markproto.client import Client, MarkError, SyncClient\n"
        "Client(); Client.from_environment()\n"
        "SyncClient().close()"
    )
    assert [name for name in loaded_after(code) if name != "yaml"] == []


def test_the_first_dial_loads_aioquic() -> None:
    code = (
        "import asyncio\nfrom markproto.client import Client, Unreachable\n"
        "async def main():\n"
        "    async with Client(attempts=1) as client:\n"
        "        try:\n            await client.fetch('mark://127.0.0.1:1/a.md')\n"
        "        except Unreachable:\n            pass\n"
        "asyncio.run(main())"
    )
    assert "aioquic" in loaded_after(code)


def test_every_public_name_resolves_to_where_it_is_defined() -> None:
    """The names ``mypy`` sees (the TYPE_CHECKING imports) are the names the package exports."""
    tree = ast.parse((REPO / "client" / "__init__.py").read_text())
    declared = {
        alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("markproto")
        for alias in node.names
    }
    assert set(declared) == set(markproto.client.__all__)
    for name, module in declared.items():
        assert getattr(markproto.client, name) is getattr(importlib.import_module(module), name)
    assert set(markproto.client.__all__) <= set(dir(markproto.client))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        markproto.client.Nope  # noqa: B018
