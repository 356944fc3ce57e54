"""Benchmark: validate, the index, stats and gc at 1M rows (10M optional), time and peak memory.

Generates (once, cached) a synthetic dataset with ``scale_gen.py`` (N rows, N receipts, N/4 real
safetensors blobs), then measures, each operation in a fresh child process so its peak RSS
(``resource.getrusage``, ``ru_maxrss``) is its own:

* baselines in the same run: ``json.loads`` of every JSONL line (stdlib, one thread), and
  ``hashlib.sha256`` over a 64 MiB buffer scaled to every blob byte on all cores; the deep
  target is their sum (json.loads of every line + sha256 of every byte on all cores);
* ``validate --deep`` on loose blobs, ``validate`` without ``--deep``, the index built from
  nothing, ``stats``, ``gc --dry-run``; then a hard-linked copy is packed and ``validate --deep``
  runs on its packs.

Usage:
    .venv/bin/python tools/bench/bench_scale.py [--rows 1000000] [--ten-million] [--dir PATH] [--smoke]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import load_average  # noqa: E402
from scale_gen import ensure  # noqa: E402

_CHILD = r"""
import json, resource, sys, time
op, root, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
start = time.perf_counter()
if op in ("validate-deep", "validate"):
    import ikdata
    report = ikdata.validate(ikdata.open(root), deep=op == "validate-deep", jobs=jobs)
    assert report.ok, [str(p) for p in report.problems[:5]]
    note = f"{report.workloads} rows, {report.receipts} receipts, {report.blobs_checked} blobs"
elif op == "index":
    from ikdata.core.index import open_index
    index, result = open_index(root, rebuild=True)
    index.close()
    note = f"{result.rows} entries"
elif op == "stats":
    import ikdata
    from ikdata.ops.stats import compute
    stats = compute(ikdata.open(root))
    note = f"{stats.workloads} rows, {stats.unique_blobs} blobs"
elif op == "gc":
    from ikdata.ops.gc import collect_garbage
    result = collect_garbage(root, dry_run=True, grace_minutes=0)
    note = f"{result.kept} kept, {len(result.deleted)} unreferenced"
elif op == "pack":
    from ikdata.ops.pack import pack_dataset
    result = pack_dataset(root)
    note = str(result.to_dict().get("packed", ""))[:60]
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "note": note}))
"""


def child(op: str, root: Path, jobs: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, op, str(root), str(jobs)], capture_output=True,
                          text=True, env={**os.environ, "IKDATA_PROGRESS_INTERVAL": "3600"})
    if proc.returncode != 0:
        raise SystemExit(f"{op} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def jsonl_files(root: Path) -> list[Path]:
    return sorted((root / "workloads").rglob("*.jsonl")) + [root / "receipts.jsonl"]


def json_loads_baseline(root: Path) -> tuple[float, int]:
    """stdlib json.loads of every line, one thread: seconds and lines."""
    loads, lines = json.loads, 0
    start = time.perf_counter()
    for path in jsonl_files(root):
        with open(path, "rb") as stream:
            for line in stream:
                loads(line)
                lines += 1
    return time.perf_counter() - start, lines


def blob_bytes(root: Path) -> tuple[int, int]:
    total = count = 0
    for folder, _, names in os.walk(root / "blob"):
        for name in names:
            total += os.stat(os.path.join(folder, name)).st_size
            count += 1
    return total, count


def sha256_rate() -> float:
    """Best single-thread hashlib sha256 throughput, bytes/s, over a 64 MiB buffer."""
    buffer = os.urandom(64 << 20)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        hashlib.sha256(buffer).digest()
        best = min(best, time.perf_counter() - start)
    return len(buffer) / best


def measure(root: Path, rows: int, jobs: int, *, pack: bool) -> None:
    start = time.perf_counter()
    made = ensure(root, rows)
    print(f"\n== {rows:,} rows ({root}; {'generated' if made else 'cached'} in "
          f"{time.perf_counter() - start:.1f} s); load {load_average()}", flush=True)
    total, count = blob_bytes(root)
    loads_time, lines = json_loads_baseline(root)
    rate = sha256_rate()
    hash_time = total / (rate * jobs)
    deep_base = loads_time + hash_time
    print(f"baseline json.loads, {lines:,} lines:       {loads_time:8.2f} s")
    print(f"baseline sha256 of {total / 1e9:.2f} GB ({count:,} blobs) on {jobs} cores: {hash_time:8.2f} s "
          f"({rate / 1e9:.2f} GB/s per core)")
    print(f"deep target baseline (sum):              {deep_base:8.2f} s")
    figures = {}
    for op, base, label in (("validate-deep", deep_base, "json.loads + sha256/cores"),
                            ("validate", loads_time, "json.loads"),
                            ("index", loads_time, "json.loads"),
                            ("stats", loads_time, "json.loads"),
                            ("gc", loads_time, "json.loads")):
        got = child(op, root, jobs)
        figures[op] = got
        print(f"{op:15s} {got['seconds']:8.2f} s  = {got['seconds'] / base:5.2f}x {label:26s} "
              f"peak RSS {got['rss_mb']:7.0f} MB  ({got['note']})", flush=True)
    if pack:
        packed = root.with_name(root.name + "-packed")
        if not (packed / ".packed").exists():
            shutil.rmtree(packed, ignore_errors=True)
            subprocess.run(["cp", "-al", str(root), str(packed)], check=True)
            got = child("pack", packed, jobs)
            print(f"pack (a hard-linked copy) {got['seconds']:8.2f} s  peak RSS {got['rss_mb']:7.0f} MB", flush=True)
            (packed / ".packed").write_text("ok\n")
        got = child("validate-deep", packed, jobs)
        print(f"{'validate-deep, packs':15s} {got['seconds']:8.2f} s  = {got['seconds'] / deep_base:5.2f}x "
              f"{'json.loads + sha256/cores':26s} peak RSS {got['rss_mb']:7.0f} MB  ({got['note']})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ten-million", action="store_true", help="also 10,000,000 rows (~35 GB of disk)")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ikdata-bench-scale")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-pack", action="store_true", help="skip the packed copy")
    parser.add_argument("--smoke", action="store_true", help="2,000 rows, a few seconds")
    args = parser.parse_args()
    sizes = [2000] if args.smoke else [args.rows] + ([10_000_000] if args.ten_million else [])
    print(f"{os.cpu_count()} cores, jobs={args.jobs}; spill threshold "
          f"{os.environ.get('IKDATA_SPILL_ROWS', 'default')}")
    for rows in sizes:
        measure(args.dir / f"rows-{rows}", rows, args.jobs, pack=not args.no_pack)


if __name__ == "__main__":
    main()
    print(f"load average after: {load_average()}")
