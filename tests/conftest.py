"""Fixtures every test directory can use."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from support import shared_path

settings.register_profile("markproto", deadline=None)
settings.load_profile("markproto")
"""Property tests assert what holds, never how fast: a per-example deadline fails a correct test
on a loaded two-core machine (CI, or the suite beside a benchmark)."""


@pytest.fixture
def golden_dir() -> Path:
    """The reference's golden wire vectors (``../shared/golden``)."""
    return shared_path("golden")


@pytest.fixture
def corpus_dir() -> Path:
    """The FastAPI documentation corpus (``../shared/corpus/fastapi-docs``)."""
    return shared_path("corpus", "fastapi-docs")
