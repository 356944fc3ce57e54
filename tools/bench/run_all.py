"""Run every benchmark in this folder, one after the other, each printing its own ratios.

    python tools/bench/run_all.py [--only validate,stats,...]

The S3 benchmark (bench_remote) takes many minutes against moto; skip it with --skip remote.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("boot", "stats", "validate", "capture", "replay", "import", "remote", "scale")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ORDER))
    parser.add_argument("--skip", default="")
    args = parser.parse_args()
    chosen = [n for n in args.only.split(",") if n and n not in args.skip.split(",")]
    failed = []
    for name in chosen:
        print(f"\n=== bench_{name} ===", flush=True)
        if subprocess.run([sys.executable, str(HERE / f"bench_{name}.py")]).returncode != 0:
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
