"""Helpers shared by the tests and the benchmarks (pytest puts tests/ on the path)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("MARKPROTO_SHARED", REPO.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """Return a path under ``../shared``, skipping the calling test where it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: shared data (goldens, corpus) lives beside the checkout")
    return path
