"""Every benchmark in tools/bench runs at its smallest size (``--smoke``) and prints its ratios, so none rots.

The scripts run two at a time (each mostly waits on its own start-up); each must exit 0 and print a ratio
(``0.86x``, ``1.3×``, ``24%``, ``ratio ... 0.7`` or a column headed ``x bare python``). A script without
``--smoke`` fails (:data:`STRICT`): the benchmark convention gives every script one. ``make bench`` runs ORDER, which must name every script here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench"
sys.path.insert(0, str(BENCH))
from run_all import HELPERS, ORDER  # noqa: E402

SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in HELPERS)
# 0.86x, 1.3×, 24%, "ratio ... 0.7", or a table column headed "x <baseline>" / "× <baseline>"
RATIO = re.compile(r"\d+(\.\d+)?\s*(×|x)(?![A-Za-z0-9])|\d+(\.\d+)?\s*%|ratio\D{0,40}\d|(^|\s)(×|x) [a-z]",
                   re.MULTILINE)
# Every script has --smoke (the benchmark convention): a script without it fails. (False skipped it, saying
# so, while their owners were adding it.)
STRICT = True
TIMEOUT = 300


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("IKDATA_CAPTURE", None)
    return env


def _run(name: str) -> tuple[str, subprocess.CompletedProcess | str]:
    script = str(BENCH / f"{name}.py")
    helped = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=TIMEOUT,
                            env=_env())
    if "--smoke" not in helped.stdout:
        return name, f"tools/bench/{name}.py --help lists no --smoke (exit {helped.returncode})"
    try:
        return name, subprocess.run([sys.executable, script, "--smoke"], capture_output=True, text=True,
                                    timeout=TIMEOUT, env=_env(), cwd=BENCH.parents[1])
    except subprocess.TimeoutExpired:
        return name, f"tools/bench/{name}.py --smoke ran past {TIMEOUT} s"


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.CompletedProcess | str]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(_run, SCRIPTS))


def test_make_bench_runs_every_script_here():
    assert sorted(ORDER) == SCRIPTS, "tools/bench/run_all.py ORDER must name every benchmark script"
    assert len(set(ORDER)) == len(ORDER)


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_benchmark_runs_at_its_smallest_size_and_prints_a_ratio(runs, name):
    result = runs[name]
    if isinstance(result, str) and "lists no --smoke" in result and not STRICT:
        pytest.skip(result + "; its owner adds it (benchmark convention)")
    assert not isinstance(result, str), result
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"tools/bench/{name}.py --smoke exit {result.returncode}:\n{output[-3000:]}"
    assert RATIO.search(result.stdout), f"tools/bench/{name}.py --smoke printed no ratio:\n{result.stdout[-2000:]}"
