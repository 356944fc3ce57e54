"""Benchmark: peak memory of ``ikdata import`` of 10,000 new workloads into a dataset of 100,000.

Both datasets come from :mod:`scale_gen` (disjoint row numbers and seeds, so nothing conflicts);
DST is hard-linked afresh for each run, so every run imports into the same DST. The baseline,
measured in the same run and in the same kind of child process, is reading DST's rows and receipts
with ``json.loads`` and keeping them (what the planner held before it read only what SRC names).

    .venv/bin/python tools/bench/bench_import_memory.py [--dst-rows 100000] [--src-rows 10000] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_gen  # noqa: E402

_CHILD = r"""
import json, resource, sys, time
op, src, dst = sys.argv[1:4]
start = time.perf_counter()
if op == "import":
    from ikdata.importing.apply import import_dataset
    result = import_dataset(src, dst, trust_reports=True)
    note = f"{len(result.added)} added"
else:
    import glob
    held = [json.loads(line) for name in glob.glob(dst + "/workloads/*/*.jsonl") + [dst + "/receipts.jsonl"]
            for line in open(name, "rb")]
    note = f"{len(held)} records held"
print(json.dumps({"seconds": time.perf_counter() - start,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "note": note}))
"""


def child(op: str, src: Path, dst: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, op, str(src), str(dst)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{op} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_report(root: Path) -> None:
    """A replay report passing every workload of ``root`` (made up: the import runs with --trust-reports,
    so what is measured is the planner's memory, not a reference's)."""
    from ikdata.core import manifest
    from ikdata.core.store import digest_from_path

    if (root / "reports/replay.json").is_file():
        return
    rows = {}
    for name in (root / "workloads").rglob("*.jsonl"):
        for line in name.open("rb"):
            row = json.loads(line)
            rows[row["workload"]["uuid"]] = row
    cases = []
    for line in (root / "receipts.jsonl").open("rb"):
        receipt = json.loads(line)
        row = rows[receipt["uuid"]]
        cases.append({"definition": row["definition"], "uuid": receipt["uuid"], "axes": receipt["axes"],
                      "status": "passed", "seconds": 0.001,
                      "metrics": {"C": {"max_abs_error": 0.0, "max_rel_error": 0.0, "relative_rms": 0.0,
                                        "cosine_similarity": 1.0, "mismatched_fraction": 0.0}},
                      "tolerance": {"C": {"dtype": "bfloat16", "rtol": 1.6e-2, "atol": 1e-5, "matched_ratio": 1.0}},
                      "input_digests": {k: digest_from_path(v["path"]) for k, v in row["workload"]["inputs"].items()},
                      "expected_digests": {"C": digest_from_path(receipt["expected_output"]["C"]["path"])},
                      "device": "cpu", "torch": "2.13.0+cpu"})
    (root / "reports").mkdir(exist_ok=True)
    (root / "reports/replay.json").write_text(json.dumps({
        "format": "ikdata-replay/1", "torch": "2.13.0+cpu", "ikdata_version": "0.1.0", "device": "cpu",
        "comparison": "all output elements", "tolerances": {"bfloat16": {"rtol": 1.6e-2, "atol": 1e-5}},
        "cases": cases}))
    manifest.write(root)


def linked_copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=os.link)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dst-rows", type=int, default=100_000)
    parser.add_argument("--src-rows", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "ikdata-bench-import-memory")
    parser.add_argument("--smoke", action="store_true", help="500 into 2,000, a few seconds")
    args = parser.parse_args()
    if args.smoke:
        args.dst_rows, args.src_rows = 2_000, 500
    base = args.dir / f"dst-{args.dst_rows}"
    src = args.dir / f"src-{args.src_rows}"
    scale_gen.ensure(base, args.dst_rows, seed=1)
    scale_gen.ensure(src, args.src_rows, seed=2, first=args.dst_rows)
    write_report(src)
    work = args.dir / "work"
    shutil.rmtree(work, ignore_errors=True)
    linked_copy(base, work)
    held = child("hold", src, work)
    ours = child("import", src, work)
    shutil.rmtree(work, ignore_errors=True)
    print(f"import {args.src_rows:,} into {args.dst_rows:,} rows: peak {ours['rss_mb']:.0f} MB, "
          f"{ours['seconds']:.1f} s ({ours['note']})")
    print(f"baseline, DST's records read and held with json.loads: peak {held['rss_mb']:.0f} MB "
          f"({held['note']}); import peak = {ours['rss_mb'] / held['rss_mb']:.2f}x the baseline's")


if __name__ == "__main__":
    main()
