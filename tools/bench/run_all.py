"""Run every benchmark in this folder, one after the other, each printing its own ratios.

    python tools/bench/run_all.py [--only validate,stats,...] [--skip remote] [--smoke]

Names are script names with or without ``bench_`` (``remote`` is ``bench_remote.py``). The S3
benchmark (bench_remote) takes many minutes against moto; skip it with --skip remote. ``--smoke``
runs each at its smallest size (a few seconds each; the ratios are then noise), as the test suite
does (tests/test_bench_smoke.py), which also checks that ORDER names every script here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# every benchmark script in this folder, cheapest first; helpers (_bench.py, scale_gen.py, this file) are not
ORDER = ("bench_boot", "capture_startup", "bench_stats", "bench_validate", "bench_index", "bench_capture",
         "capture_weight", "diffusion_capture", "bench_replay", "bench_diffusion_replay", "sampling_judge",
         "bench_import", "bench_import_memory", "bench_packs", "bench_ray", "bench_scale", "bench_remote", "bench_vllm")
HELPERS = ("_bench", "run_all", "scale_gen")


def resolve(name: str) -> str:
    """A script name as given or with ``bench_`` in front; exits naming the known ones when neither is."""
    for candidate in (name, f"bench_{name}"):
        if candidate in ORDER:
            return candidate
    sys.exit(f"no benchmark {name!r}; known: {', '.join(ORDER)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ORDER), help="comma-separated benchmarks to run (default: all)")
    parser.add_argument("--skip", default="", help="comma-separated benchmarks to leave out (e.g. remote)")
    parser.add_argument("--smoke", action="store_true", help="each at its smallest size (a few seconds)")
    args = parser.parse_args()
    skipped = {resolve(n) for n in args.skip.split(",") if n}
    chosen = [s for s in (resolve(n) for n in args.only.split(",") if n) if s not in skipped]
    failed = []
    for name in chosen:
        print(f"\n=== {name} ===", flush=True)
        command = [sys.executable, str(HERE / f"{name}.py"), *(["--smoke"] if args.smoke else [])]
        if subprocess.run(command).returncode != 0:
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
