"""Benchmark: import 10,000 workloads into a dataset that already holds 90% of their blobs.

Compares ``ikdata.importing.apply.import_dataset`` (verifies every new blob, dedupes, journals,
rechecks every replay case, writes lineage and the manifest) with the seed's
``import_capture`` algorithm (seeds/002), re-implemented here by behaviour on the same
data: it checks that every report case passed and covers every receipt, walks every
SRC blob and links it unless a file of the same size is there, appends rows and
receipts whose uuid DST lacks. It neither hashes nor dedupes by digest.

Both run on fresh copies of the same DST, SRC and DST on one filesystem (hardlinks).
Also run: the same import into DST holding 99% and 0% of the blobs, to show that the
cost grows with what is new. Usage:

    .venv/bin/python tools/bench/bench_import.py [--workloads 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ikdata.core import manifest
from ikdata.core.digest import tensor_digest
from ikdata.importing.apply import import_dataset
from ikdata.core.safetensors_format import encode_header
from ikdata.core.store import blob_path

NAME = "gemm_bench_n64_k64"
DEFINITION = {
    "name": NAME, "op_type": "gemm", "description": "benchmark GEMM",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 64}, "K": {"type": "const", "value": 64}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "float32"}, "W": {"shape": ["N", "K"], "dtype": "float32"}},
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(A, W):\n    return torch.matmul(A, W.T)\n",
}
ROWS = f"workloads/gemm/{NAME}.jsonl"


def _blob(root: Path, array: np.ndarray) -> str:
    """Write a canonical blob (no fsync: set-up only) and return its digest."""
    data = array.tobytes()
    digest = tensor_digest("torch.float32", array.shape, data)
    path = root / blob_path(digest)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_header("torch.float32", array.shape, len(data)) + data)
    return digest


def make_source(root: Path, count: int) -> list[dict]:
    """A captured, replayed SRC: ``count`` workloads (A and C unique, W shared by groups of 10)."""
    rng = np.random.default_rng(0)
    rows, receipts, cases = [], [], []
    weights = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(max(1, count // 10))]
    for i in range(count):
        a = rng.standard_normal((8, 64)).astype(np.float32)
        w = weights[i // 10]
        digests = {"A": _blob(root, a), "W": _blob(root, w), "C": _blob(root, a @ w.T)}
        ref = {n: {"type": "safetensors", "path": blob_path(d), "tensor_key": "tensor"} for n, d in digests.items()}
        uuid = f"00000000-0000-5000-8000-{i:012d}"
        rows.append({"definition": NAME, "workload": {"uuid": uuid, "axes": {"M": 8},
                                                      "inputs": {"A": ref["A"], "W": ref["W"]}}})
        receipts.append({"uuid": uuid, "definition": NAME, "axes": {"M": 8}, "expected_output": {"C": ref["C"]},
                         "engine": "bench", "request_id": f"r{i}", "step": 0, "host": "bench-host",
                         "process_id": 1, "captured_at": time.time()})
        cases.append({"definition": NAME, "uuid": uuid, "axes": {"M": 8}, "status": "passed", "seconds": 0.001,
                      "metrics": {"C": {"max_abs_error": 0.0, "max_rel_error": 0.0, "relative_rms": 0.0,
                                        "cosine_similarity": 1.0, "mismatched_fraction": 0.0}},
                      "tolerance": {"C": {"dtype": "float32", "rtol": 1e-4, "atol": 2e-5, "matched_ratio": 1.0}},
                      "input_digests": {"A": digests["A"], "W": digests["W"]}, "expected_digests": {"C": digests["C"]},
                      "device": "cpu", "torch": "2.13.0+cpu"})
    (root / "definitions/gemm").mkdir(parents=True, exist_ok=True)
    (root / f"definitions/gemm/{NAME}.json").write_text(json.dumps(DEFINITION))
    (root / ROWS).parent.mkdir(parents=True, exist_ok=True)
    (root / ROWS).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    (root / "receipts.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in receipts))
    (root / "reports").mkdir(exist_ok=True)
    (root / "reports/replay.json").write_text(json.dumps({
        "format": "ikdata-replay/1", "torch": "2.13.0+cpu", "ikdata_version": "0.1.0", "device": "cpu",
        "comparison": "all output elements", "tolerances": {"float32": {"rtol": 1e-4, "atol": 2e-5}},
        "cases": cases}))
    manifest.write(root)
    return rows


def make_destination(src: Path, root: Path, fraction: float) -> None:
    """DST holding the blobs (copied, not linked) and rows of the first ``fraction`` of SRC's workloads."""
    rows = [json.loads(x) for x in (src / ROWS).read_text().splitlines()]
    receipts = [json.loads(x) for x in (src / "receipts.jsonl").read_text().splitlines()]
    keep = int(len(rows) * fraction)
    (root / "blob/sha256").mkdir(parents=True, exist_ok=True)
    for row, receipt in zip(rows[:keep], receipts[:keep]):
        for d in [*row["workload"]["inputs"].values(), *receipt["expected_output"].values()]:
            target = root / d["path"]
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / d["path"], target)
    if keep:
        shutil.copytree(src / "definitions", root / "definitions")
        (root / ROWS).parent.mkdir(parents=True, exist_ok=True)
        (root / ROWS).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows[:keep]))
        (root / "receipts.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in receipts[:keep]))
    manifest.write(root)


def seed_import_capture(source: Path, destination: Path) -> int:
    """The seed's import_capture, by behaviour, on ikdata's layout (receipts.jsonl, reports/replay.json)."""
    report = json.loads((source / "reports/replay.json").read_text())
    if not report["cases"] or any(case["status"] != "passed" for case in report["cases"]):
        raise ValueError("Only a completely validated capture can be imported")
    receipts = [json.loads(line) for line in (source / "receipts.jsonl").read_text().splitlines()]
    if {row["uuid"] for row in receipts} != {row["uuid"] for row in report["cases"]}:
        raise ValueError("Replay does not cover every captured workload")
    for path in (source / "blob").rglob("*.safetensors"):
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            if target.stat().st_size != path.stat().st_size:
                raise ValueError(f"Conflicting content-addressed tensor: {target}")
        else:
            try:
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
    for path in (source / "workloads").rglob("*.jsonl"):
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = target.read_text().splitlines() if target.exists() else []
        ids = {json.loads(line)["workload"]["uuid"] for line in existing}
        with target.open("a") as stream:
            for line in path.read_text().splitlines():
                if json.loads(line)["workload"]["uuid"] not in ids:
                    stream.write(line + "\n")
    receipt_path = destination / "receipts.jsonl"
    ids = {json.loads(line)["uuid"] for line in receipt_path.read_text().splitlines()} if receipt_path.exists() else set()
    comparisons = {case["uuid"]: case for case in report["cases"]}
    with receipt_path.open("a") as stream:
        for row in receipts:
            if row["uuid"] not in ids:
                comparison = comparisons[row["uuid"]]
                row["validation"] = dict(comparison, device=comparison.get("device", report["device"]),
                                         torch=comparison.get("torch", report["torch"]),
                                         tolerances=report["tolerances"])
                stream.write(json.dumps(row, sort_keys=True) + "\n")
    return len(receipts)


def _timed(function, src: Path, base: Path, work: Path, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        dst = work / "dst"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(base, dst)
        os.sync()
        started = time.perf_counter()
        function(src, dst)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fractions", default="0.9,0.99,0.0", help="shares of SRC's blobs DST already holds")
    parser.add_argument("--smoke", action="store_true", help="100 workloads, one run, DST holding 90%% (a few "
                        "seconds, for tests; the ratio is noise)")
    args = parser.parse_args()
    if args.smoke:
        args.workloads, args.repeat, args.fractions = 100, 1, "0.9"
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        make_source(work / "src", args.workloads)
        print(f"set-up: SRC of {args.workloads} workloads in {time.perf_counter() - started:.1f} s", flush=True)
        print(f"{'DST holds':>10} {'new blobs':>10} {'ikdata s':>10} {'seed s':>10} {'ratio':>7}")
        for fraction in (float(f) for f in args.fractions.split(",")):
            base = work / f"base-{fraction}"
            make_destination(work / "src", base, fraction)
            # the report is made up (no reference ran): --trust-reports, so the mechanics are what is timed
            ours = _timed(lambda s, d: import_dataset(s, d, trust_reports=True), work / "src", base, work, args.repeat)
            seed = _timed(seed_import_capture, work / "src", base, work, args.repeat)
            result = import_dataset(work / "src", _fresh(base, work / "probe"), trust_reports=True)
            ours_m, seed_m = statistics.median(ours), statistics.median(seed)
            print(f"{fraction:>10.0%} {result.blobs_linked + result.blobs_copied:>10} {ours_m:>10.3f} "
                  f"{seed_m:>10.3f} {ours_m / seed_m:>6.2f}x", flush=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; median of {args.repeat} runs")


def _fresh(base: Path, target: Path) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target)
    return target


if __name__ == "__main__":
    main()
