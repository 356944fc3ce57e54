"""Reference pipeline builders named by ``--pipeline FILE.py:FUNCTION`` in the tests (no arguments)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "diffusion"))


def ltx2():
    """The tiny LTX-2 pipeline of the capture tests (same seeded random weights)."""
    import tiny

    return tiny.ltx2()[0]
