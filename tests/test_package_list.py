"""The wheel's package list: every package of the source tree ships (a non-editable install would miss one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_under_ikdata_and_definitions_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "ikdata").rglob("__init__.py")}
    found |= {"ikdata.shipped_definitions" + "".join("." + part for part in p.parent.relative_to(ROOT / "definitions").parts)
              for p in (ROOT / "definitions").rglob("*.json")}
    assert found - listed == set()
