"""The suite never touches the developer's files (issue 50, item 7): every test has its own HOME, XDG cache and
ikdata cache (tests/conftest.py), inherited by the subprocesses it starts, so tests can run in parallel
(pytest-xdist in ``make test``) without sharing replay's reuse cache or anything else under ``~``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_SEEN: dict[str, dict[str, str]] = {}


def _user_dirs() -> dict[str, str]:
    return {name: os.environ[name] for name in ("HOME", "XDG_CACHE_HOME", "IKDATA_CACHE_DIR")}


@pytest.mark.parametrize("which", ["first", "second"])
def test_each_test_has_its_own_empty_home_and_caches_under_pytests_temp(which, tmp_path_factory):
    from ikdata.core.cache_dir import user_cache_dir

    base = tmp_path_factory.getbasetemp().resolve()
    dirs = _user_dirs()
    for name, value in dirs.items():
        assert Path(value).resolve().is_relative_to(base), (name, value)
        assert Path(value).is_dir() and not any(p for p in Path(value).iterdir() if p.name != ".cache"), (name, value)
    assert Path(os.path.expanduser("~")) == Path(dirs["HOME"])
    assert user_cache_dir() == Path(dirs["IKDATA_CACHE_DIR"])
    _SEEN[which] = dirs
    if len(_SEEN) == 2:  # both ran in this process: no folder is shared between them
        assert not set(_SEEN["first"].values()) & set(_SEEN["second"].values())


def test_a_replay_in_a_subprocess_keeps_its_reuse_cache_in_the_tests_own_cache(ikdata_dataset, tmp_path):
    defs = tmp_path / "defs"
    from foundation_helpers import gemm_definition_record, write_definition

    write_definition(defs, gemm_definition_record())
    done = subprocess.run([sys.executable, "-m", "ikdata", "replay", str(ikdata_dataset), "--definitions", str(defs)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in Path(os.environ["IKDATA_CACHE_DIR"]).rglob("*") if p.is_file())
    assert any(name.startswith("replay-reuse") for name in written), written
