"""Benchmark: ikdata replay's per-case overhead on 1,000 small GEMM workloads (CPU), and reuse's speed-up.

Baseline, measured in the same run: the reference called directly on tensors
already in memory. ikdata's overhead per case is (replay time - baseline) / cases:
everything except the reference's own compute (reading rows and receipts,
verifying and memory-mapping blobs, judging, writing the report after every case).

    .venv/bin/python tools/bench/bench_replay.py [--cases 1000] [--m 8] [--n 64] [--k 64]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

REFERENCE = "import torch\n\ndef run(A, W):\n    return torch.matmul(A, W.T)\n"


def build(root: Path, definitions: Path, cases: int, m: int, n: int, k: int) -> list[dict]:
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    record = {"name": f"bench_gemm_n{n}_k{k}", "op_type": "gemm",
              "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": n}, "K": {"type": "const", "value": k}},
              "inputs": {"A": {"shape": ["M", "K"], "dtype": "float32"}, "W": {"shape": ["N", "K"], "dtype": "float32"}},
              "outputs": {"C": {"shape": ["M", "N"], "dtype": "float32"}}, "reference": REFERENCE}
    (definitions / "gemm").mkdir(parents=True)
    (definitions / "gemm" / f"{record['name']}.json").write_text(json.dumps(record))
    definition = Definition.from_dict(record, origin=USER)
    writer = DatasetWriter(root)
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=generator)
    in_memory = []
    for i in range(cases):
        a = torch.randn(m, k, generator=generator)
        writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, {"request_id": f"r{i}", "step": i})
        in_memory.append({"A": a, "W": w})
    return in_memory


def direct(in_memory: list[dict]) -> tuple[float, float]:
    """Wall and CPU seconds of calling the reference on tensors already in memory."""
    namespace: dict = {}
    exec(compile(REFERENCE, "<bench>", "exec"), namespace)
    run = namespace["run"]
    started, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        for inputs in in_memory:
            run(**inputs)
    return time.perf_counter() - started, time.process_time() - cpu


def timed_replay(root: Path, definitions: Path, *, reuse: bool, report: Path) -> tuple[float, float, dict]:
    """Wall and CPU seconds of a whole ``replay`` call (opening the dataset included), and its counts."""
    import ikdata
    from ikdata.replay.runner import replay

    started, cpu = time.perf_counter(), time.process_time()
    result = replay(ikdata.open(root, definitions=[definitions]), reuse=reuse, report_path=report)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert result.exit_code == 0, result.counts
    return elapsed, cpu, result.counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="60 cases, one run each (a few seconds, for tests; "
                        "the ratios are noise)")
    args = parser.parse_args()
    rounds = 1 if args.smoke else 3
    if args.smoke:
        args.cases = 60
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    os.environ["IKDATA_CACHE_DIR"] = str(work / "cache")
    try:
        root, definitions = work / "ds", work / "defs"
        started = time.perf_counter()
        in_memory = build(root, definitions, args.cases, args.m, args.n, args.k)
        print(f"built {args.cases} GEMM workloads (A[{args.m},{args.k}] @ W[{args.n},{args.k}].T, float32) "
              f"in {time.perf_counter() - started:.1f} s")
        direct(in_memory[:50])  # warm up torch
        baseline = min(direct(in_memory) for _ in range(rounds))
        runs = [timed_replay(root, definitions, reuse=False, report=work / f"fresh{i}.json") for i in range(rounds)]
        fresh = min(runs)  # the least disturbed run (this machine may be shared)
        counts = fresh[2]
        timed_replay(root, definitions, reuse=True, report=work / "fills-the-cache.json")
        reused = min(timed_replay(root, definitions, reuse=True, report=work / f"reused{i}.json")
                     for i in range(rounds))
        assert reused[2]["reused"] == args.cases, reused[2]
        n = args.cases
        print(f"{'':44} {'wall':>9} {'cpu':>9} {'wall/case':>10} {'cpu/case':>10}")
        for label, (wall, cpu) in (("reference called directly, tensors in memory", baseline),
                                   ("ikdata replay, no reuse", fresh[:2]),
                                   ("ikdata replay, every result reused", reused[:2])):
            print(f"{label:44} {wall:8.3f}s {cpu:8.3f}s {wall / n * 1e6:8.0f}us {cpu / n * 1e6:8.0f}us")
        print(f"ikdata per-case overhead (replay - direct): {(fresh[0] - baseline[0]) / n * 1e6:.0f} us wall, "
              f"{(fresh[1] - baseline[1]) / n * 1e6:.0f} us cpu; {counts['passed']} passed")
        print(f"replay / direct: {fresh[0] / baseline[0]:.0f}x wall; "
              f"reuse speed-up over replaying: {fresh[0] / reused[0]:.1f}x wall, {fresh[1] / reused[1]:.1f}x cpu")
        print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
