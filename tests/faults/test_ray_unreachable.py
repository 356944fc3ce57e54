"""Issue 21, finding 9 (second half): ``replay --ray ADDRESS`` where no cluster answers.

It used to hang for minutes (Ray retries an unreachable GCS address), and even when refused it had
already replaced the dataset's finished report with an empty one, so ``repair`` could not bring it
back and import then refused every workload. Now the address is probed first (one TCP connect with
a short timeout) and the cluster joined before the report is opened: a run that cannot start says
so within seconds, exit 2, and leaves the report and the manifest byte for byte as they were.

The replay runs in a child process with a generous deadline, so a hang is a failure, not a stuck suite; the
test asserts what the probe says (it names the address and, when set, its timeout), never how long it took.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fault_helpers import make_validated
from foundation_helpers import free_port

pytest.importorskip("ray")

DEADLINE = 300  # seconds: only a hang (Ray retrying for minutes) reaches it; the probe answers in a few


def _replay(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    environment.update(IKDATA_CACHE_DIR=str(tmp_path / "cache"), **env)
    try:
        done = subprocess.run([sys.executable, "-m", "ikdata", "replay", *args], capture_output=True, text=True,
                              env=environment, timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"replay {' '.join(args)} still hung after {DEADLINE} s")
    return done


def _state(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in ("reports/replay.json", "ikdata.json")}


@pytest.mark.parametrize("form", ["HOST:PORT", "ray://HOST:PORT", "auto via RAY_ADDRESS"])
def test_an_address_where_nothing_listens_is_refused_quickly_and_the_report_is_untouched(form, tmp_path):
    root = make_validated(tmp_path / "ds", rows=2)
    before = _state(root)
    address = f"127.0.0.1:{free_port()}"
    if form == "auto via RAY_ADDRESS":
        done = _replay([str(root), "--ray", "auto"], tmp_path, RAY_ADDRESS=address)
    else:
        done = _replay([str(root), "--ray", form.replace("HOST:PORT", address)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"no Ray cluster answers at {address}" in done.stderr
    assert "within 3 s" in done.stderr  # refused by the probe (its default timeout), not after Ray's retries
    assert "nothing was replayed and no report was written" in done.stderr
    assert "Traceback" not in done.stderr
    assert _state(root) == before  # the finished report (and the manifest listing it) as they were


def test_the_timeout_can_be_set_and_a_malformed_address_is_a_usage_error(tmp_path):
    root = make_validated(tmp_path / "ds", rows=1)
    before = _state(root)
    done = _replay([str(root), "--ray", "no-port-here"], tmp_path)
    assert _state(root) == before  # refused at once, and yet it used to replace the report with an empty one
    assert done.returncode == 2 and "expected local, auto, HOST:PORT" in done.stderr, done.stderr
    done = _replay([str(root), "--ray", f"127.0.0.1:{free_port()}"], tmp_path, IKDATA_RAY_CONNECT_TIMEOUT="0.5")
    assert done.returncode == 2 and "within 0.5 s" in done.stderr, done.stderr
    assert _state(root) == before
