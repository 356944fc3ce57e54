"""The FlashInfer versions ikdata is tested with (issue 37 item 9): the ``flashinfer`` extra allows exactly that
range, the installed version lies in it, and docs/flashinfer.md names the same versions."""

from __future__ import annotations

import importlib.util
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _extra() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["optional-dependencies"]["flashinfer"]]
    return next(r for r in found if r.name == "flashinfer-python")


def test_the_extra_allows_the_tested_versions_and_nothing_newer():
    from ikdata.flashinfer.loader import TESTED_VERSIONS

    extra = _extra()
    assert all(extra.specifier.contains(v, prereleases=True) for v in TESTED_VERSIONS)
    newest = max(Version(v) for v in TESTED_VERSIONS)
    assert not extra.specifier.contains(f"{newest.major}.{newest.minor}.{newest.micro + 1}")  # 0.7.5: untested
    assert not extra.specifier.contains("0.7.1")


def test_the_installed_flashinfer_is_a_tested_one_and_the_docs_say_which():
    from ikdata.flashinfer.loader import TESTED_VERSIONS

    if importlib.util.find_spec("flashinfer") is None:
        pytest.skip("flashinfer-python is not installed")
    assert version("flashinfer-python") in TESTED_VERSIONS
    docs = (ROOT / "docs" / "flashinfer.md").read_text()
    assert all(f"flashinfer-python {v}" in docs for v in TESTED_VERSIONS)
    assert f"`{_extra().specifier}`" in docs
