"""The test tree itself: module names that cannot collide across folders (pytest imports them by basename)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_no_two_test_modules_or_helpers_share_a_name():
    tests = Path(__file__).parent
    names = Counter(p.name for p in tests.rglob("*.py") if p.name not in ("conftest.py", "__init__.py"))
    assert [n for n, c in names.items() if c > 1] == []
