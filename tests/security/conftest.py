"""Fixtures of the attack suite: the sharing tests' S3 server (moto on loopback) and helpers, reused.

The helpers of ``tests/remote`` and ``tests/merge`` are imported, not copied: their folders go
on ``sys.path`` and the remote conftest's S3 fixtures are loaded under another module name
(a second ``conftest`` module name would shadow ``tests/conftest.py``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent.parent
for _folder in ("remote", "merge"):
    if str(_TESTS / _folder) not in sys.path:
        sys.path.insert(0, str(_TESTS / _folder))

_spec = importlib.util.spec_from_file_location("ikdata_remote_fixtures", _TESTS / "remote" / "conftest.py")
_remote = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_remote)
s3_server = _remote.s3_server
s3_env = _remote.s3_env
hub_server = _remote.hub_server
hub_env = _remote.hub_env


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Replay's reuse cache under tmp_path, never the user's ~/.cache."""
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(tmp_path / "cache"))
