"""The installed layout: one namespace, both console scripts, no bare top-level modules."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support import REPO


def test_wheel_holds_only_the_markproto_namespace(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("markproto-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"markproto"}
    for package in ("protocol", "durable", "tree", "server", "client"):
        assert f"markproto/{package}/py.typed" in names
        # Every module of the checkout ships, subpackages included.
        for source in (REPO / package).rglob("*.py"):
            assert f"markproto/{package}/{source.relative_to(REPO / package)}" in names


@pytest.mark.parametrize("script", ["mark", "mark-server"])
def test_console_scripts_have_help_and_version(script: str) -> None:
    exe = Path(sys.executable).parent / script
    helped = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True)
    assert "Usage:" in helped.stdout
    versioned = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert versioned.stdout.startswith(f"{script}, version ")
