"""Fixtures of the hand-written loop tests (capture runs the program in a subprocess)."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")
