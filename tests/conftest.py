"""Fixtures every test directory can use."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import shared_path


@pytest.fixture
def golden_dir() -> Path:
    """The reference's golden wire vectors (``../shared/golden``)."""
    return shared_path("golden")


@pytest.fixture
def corpus_dir() -> Path:
    """The FastAPI documentation corpus (``../shared/corpus/fastapi-docs``)."""
    return shared_path("corpus", "fastapi-docs")
