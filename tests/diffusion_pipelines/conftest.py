"""Fixtures of the pipeline judging tests: tiny pipelines of many families, one torch thread."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

pytest.importorskip("diffusers")

from foundation_helpers import one_torch_thread  # noqa: E402,F401  (autouse: one torch thread)
