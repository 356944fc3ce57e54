"""Benchmark: ``show UUID`` and ``lineage UUID`` at 10,000 and 1,000,000 rows, and the index build.

Builds (once, cached) datasets of N workload rows and N receipts over a small blob pool
(the shape mix of a decode server: 1-64 rows of 4,096 bf16 values, shared weights), then
measures in the same run, for each N:

* baseline: ``json.loads`` over every line of the rows and receipts (the least a scan costs);
* the index built from nothing (``ikdata index DIR``'s work) vs that baseline;
* ``show`` and ``lineage`` of one uuid, in-process, with a fresh index: best of 5;
* ``show`` and ``lineage`` by scanning (the index removed and not written: a read-only dataset).

Usage:
    .venv/bin/python tools/bench/bench_index.py [--rows 10000,1000000] [--dir PATH] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_validate import _blob  # noqa: E402  (one bf16 blob writer for every benchmark)
from _bench import best_of, load_average  # noqa: E402

NAME = "gemm_decode_n64_k4096"
DEFINITION = {
    "name": NAME, "op_type": "gemm",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 64}, "K": {"type": "const", "value": 4096}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "bfloat16"}, "W": {"shape": ["N", "K"], "dtype": "bfloat16"}},
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "bfloat16"}},
    "reference": "import torch\n\ndef run(A, W):\n    return A @ W.T\n",
}


def build(root: Path, rows: int) -> None:
    from ikdata.core import manifest

    if (root / ".complete").exists():
        return
    rng = np.random.default_rng(0)
    (root / "definitions/gemm").mkdir(parents=True, exist_ok=True)
    (root / f"definitions/gemm/{NAME}.json").write_text(json.dumps(DEFINITION))
    weights = [_blob(root, (64, 4096), rng.bytes(64 * 4096 * 2)) for _ in range(4)]
    ms = [1, 2, 4, 8, 16, 32, 64]
    a_pool = [_blob(root, (m, 4096), rng.bytes(m * 4096 * 2)) for m in ms]
    c_pool = [_blob(root, (m, 64), rng.bytes(m * 64 * 2)) for m in ms]
    (root / "workloads/gemm").mkdir(parents=True, exist_ok=True)
    dumps = json.dumps
    with open(root / f"workloads/gemm/{NAME}.jsonl", "w") as rows_out, \
            open(root / "receipts.jsonl", "w") as receipts_out:
        for i in range(rows):
            k = i % len(ms)
            uuid = f"{i * 2654435761 % (1 << 64):016x}{i:016x}"
            rows_out.write(dumps({"definition": NAME, "workload": {
                "uuid": uuid, "axes": {"M": ms[k]}, "inputs": {"A": a_pool[k], "W": weights[i % 4]}}}) + "\n")
            receipts_out.write(dumps({"uuid": uuid, "definition": NAME, "axes": {"M": ms[k]},
                                      "expected_output": {"C": c_pool[k]}, "engine": "bench",
                                      "request_id": f"r{i}", "step": i % 7}) + "\n")
    manifest.write(root)
    (root / ".complete").write_text("ok\n")


def baseline(root: Path) -> float:
    start = time.perf_counter()
    for path in (root / f"workloads/gemm/{NAME}.jsonl", root / "receipts.jsonl"):
        with open(path, "rb") as stream:
            for line in stream:
                json.loads(line)
    return time.perf_counter() - start


def measure(root: Path, rows: int) -> None:
    import ikdata
    from ikdata.core.index import INDEX_FILE, open_index
    from ikdata.ops.inspect import describe_workload
    from ikdata.ops.lineage import trace

    build(root, rows)
    uuid = f"{(rows // 2) * 2654435761 % (1 << 64):016x}{rows // 2:016x}"
    base = baseline(root)
    (root / INDEX_FILE).unlink(missing_ok=True)
    start = time.perf_counter()
    index, _ = open_index(root, rebuild=True)
    index.close()
    built = time.perf_counter() - start
    show, _ = best_of(5, lambda: describe_workload(ikdata.open(root), uuid))
    lineage, _ = best_of(5, lambda: trace(root, uuid))
    print(f"rows {rows:>9,}: json.loads over every line {base:7.2f} s | index build {built:7.2f} s "
          f"({built / base:.2f}x) | show {show * 1e3:7.1f} ms | lineage {lineage * 1e3:7.1f} ms")
    import ikdata.core.index as index_mod

    kept = index_mod.try_open_index
    index_mod.try_open_index = lambda root: None  # what a dataset whose index cannot be written gets
    try:
        show_scan, _ = best_of(1, lambda: describe_workload(ikdata.open(root), uuid))
        lineage_scan, _ = best_of(1, lambda: trace(root, uuid))
    finally:
        index_mod.try_open_index = kept
    print(f"  without an index (scan): show {show_scan * 1e3:9.1f} ms | lineage {lineage_scan * 1e3:9.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000,1000000")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ikdata-bench-index"))
    parser.add_argument("--smoke", action="store_true", help="1,000 rows: a few seconds")
    args = parser.parse_args()
    if args.smoke:
        args.rows = "1000"
    print(f"load average {load_average()}")
    for rows in (int(r) for r in args.rows.split(",")):
        measure(args.dir / f"rows-{rows}", rows)


if __name__ == "__main__":
    main()
