"""Fixtures of the scheduler tests: one torch thread, the sweep captured once and replayed once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

pytest.importorskip("diffusers")

from foundation_helpers import one_torch_thread  # noqa: E402,F401  (autouse: one torch thread)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Every scheduler variant, honest and perturbed, in one dataset, replayed once."""
    import scheduler_sweep

    root = tmp_path_factory.mktemp("sweep")
    found = scheduler_sweep.capture(root / "ds", scheduler_sweep.variants())
    return scheduler_sweep.replay(found, root / "replay.json")
