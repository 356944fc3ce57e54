"""Fixtures of the remote-pack tests: the sharing tests' servers and backends (tests/remote/conftest.py),
loaded from there rather than copied, and a small packed dataset factory."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_REMOTE = Path(__file__).resolve().parent.parent / "remote"
sys.path.insert(0, str(_REMOTE))  # hub_server, remote_helpers
_spec = importlib.util.spec_from_file_location("remote_sharing_fixtures", _REMOTE / "conftest.py")
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

s3_server = _fixtures.s3_server
s3_env = _fixtures.s3_env
s3_requests = _fixtures.s3_requests
hub_server = _fixtures.hub_server
hub_env = _fixtures.hub_env
remote_url = _fixtures.remote_url
make_dataset = _fixtures.make_dataset


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test starts with an empty per-user cache (remote pack indexes, checksums), so what it counts
    does not depend on what ran before."""
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(tmp_path / "user-cache"))
