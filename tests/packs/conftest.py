"""The S3 fixtures of tests/remote (moto on loopback), shared with the pack tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_REMOTE = str(Path(__file__).parent.parent / "remote")
if _REMOTE not in sys.path:  # the remote conftest imports its helpers by name
    sys.path.append(_REMOTE)
_spec = importlib.util.spec_from_file_location("remote_fixtures_for_packs",
                                               Path(__file__).parent.parent / "remote" / "conftest.py")
_remote = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_remote)

s3_server, s3_env, s3_requests = _remote.s3_server, _remote.s3_env, _remote.s3_requests
