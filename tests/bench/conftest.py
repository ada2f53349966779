"""Fixtures of the benchmark tests."""

from __future__ import annotations

import pytest

from blockpilot_hf.bench.harness import BenchModels
from tests.bench.tiny import tiny_models


@pytest.fixture()
def models() -> BenchModels:
    return tiny_models()
