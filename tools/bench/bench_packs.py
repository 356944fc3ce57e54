"""Benchmark: ``validate --deep`` on packed small blobs vs loose ones vs raw hashlib sha256 x cores.

Builds (once, cached) a dataset of N decode-shaped workloads whose tensors are all distinct and
small (A[M, 1024] bf16 and C[M, 256] bf16, M uniform in 1..16: 0.5-32 KiB each), a loose copy
and a packed copy (``ikdata pack``), then measures in the same run, files warm in the page cache:

* baseline: ``hashlib.sha256`` over a 64 MiB in-memory buffer on one thread, times the cores
  used (the foundation target: deep validation hashes at >= 80% of that);
* packs: every pack checked as ``validate --deep`` checks it (:func:`ikdata.core.packs.check_pack`:
  one read per pack, each tensor's slice hashed on every core): throughput vs the baseline;
* loose: :func:`ikdata.core.store.rehash_files` over every loose blob, same comparison;
* the whole ``validate(ds, deep=True)`` on both copies, and ``ikdata pack`` itself.

Usage:
    .venv/bin/python tools/bench/bench_packs.py [--workloads 5000] [--dir PATH] [--jobs N] [--repeat 3] [--smoke]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import best_of, load_average
from bench_validate import _blob

NAME = "gemm_decode_n256_k1024"
DEFINITION = {
    "name": NAME, "op_type": "gemm",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 256}, "K": {"type": "const", "value": 1024}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "bfloat16"}, "W": {"shape": ["N", "K"], "dtype": "bfloat16"}},
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "bfloat16"}},
    "reference": "import torch\n\ndef run(A, W):\n    return A @ W.T\n",
}


def build(root: Path, workloads: int) -> None:
    from ikdata.core import manifest

    if (root / ".complete").exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(0)
    (root / "definitions/gemm").mkdir(parents=True)
    (root / f"definitions/gemm/{NAME}.json").write_text(json.dumps(DEFINITION))
    weights = [_blob(root, (256, 1024), rng.bytes(256 * 1024 * 2)) for _ in range(4)]
    (root / "workloads/gemm").mkdir(parents=True)
    with open(root / f"workloads/gemm/{NAME}.jsonl", "w") as rows, open(root / "receipts.jsonl", "w") as receipts:
        for i in range(workloads):
            m = int(rng.integers(1, 17))
            a = _blob(root, (m, 1024), rng.bytes(m * 1024 * 2))
            c = _blob(root, (m, 256), rng.bytes(m * 256 * 2))
            uuid = f"{i:032x}"
            rows.write(json.dumps({"definition": NAME, "workload": {"uuid": uuid, "axes": {"M": m},
                                                                    "inputs": {"A": a, "W": weights[i % 4]}}}) + "\n")
            receipts.write(json.dumps({"uuid": uuid, "definition": NAME, "axes": {"M": m},
                                       "expected_output": {"C": c}, "engine": "bench", "request_id": f"r{i}",
                                       "step": 0}) + "\n")
    manifest.write(root)
    (root / ".complete").write_text("ok\n")


def hashlib_rate() -> float:
    """Bytes per second of sha256 on one thread over a warm 64 MiB buffer (best of 3)."""
    buffer = os.urandom(64 << 20)
    seconds, _ = best_of(3, lambda: hashlib.sha256(buffer).digest())
    return len(buffer) / seconds


def threads_rate(jobs: int) -> float:
    """Bytes per second of sha256 on ``jobs`` threads at once, each over its own 32 MiB buffer."""
    buffers = [os.urandom(32 << 20) for _ in range(jobs)]

    def run() -> None:
        workers = [threading.Thread(target=lambda b=b: hashlib.sha256(b).digest()) for b in buffers]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    seconds, _ = best_of(3, run)
    return sum(len(b) for b in buffers) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=5000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ikdata-bench-packs"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pack-bytes", type=int, default=64 << 20, help="ikdata pack --pack-bytes")
    parser.add_argument("--smoke", action="store_true", help="200 workloads, one repeat, in a temporary folder")
    args = parser.parse_args()
    if args.smoke:
        import tempfile

        args.workloads, args.repeat = 200, 1
        args.dir = Path(tempfile.mkdtemp(prefix="ikdata-bench-packs-"))

    import ikdata
    from ikdata.core.packs import check_packs, load_packs
    from ikdata.core.store import BlobStore, rehash_files
    from ikdata.ops.pack import pack_dataset
    from ikdata.ops.validate import validate

    loose = args.dir / f"loose-{args.workloads}"
    packed = args.dir / f"packed-{args.workloads}-{args.pack_bytes >> 20}m"
    build(loose, args.workloads)
    if not (packed / ".complete").exists():
        shutil.rmtree(packed, ignore_errors=True)
        shutil.copytree(loose, packed)
        (packed / ".complete").unlink()
        start = time.perf_counter()
        pack_dataset(packed, pack_bytes=args.pack_bytes)
        pack_seconds = time.perf_counter() - start
        (packed / ".complete").write_text(json.dumps({"pack_seconds": pack_seconds}) + "\n")
    else:
        pack_seconds = json.loads((packed / ".complete").read_text())["pack_seconds"]
    blobs = sorted(BlobStore(loose).iter_blobs())
    found = load_packs(packed)
    tensor_bytes = sum(b.length for blobs_ in found.listed.values() for b in blobs_)
    loose_bytes = sum(size for _, size in blobs)
    small = [rel for rel, size in blobs if size < 1 << 20]
    print(f"workloads {args.workloads}, blobs {len(blobs)} ({len(small)} packed into {len(found.listed)} packs), "
          f"{tensor_bytes / 1e6:.1f} MB of packed tensors, jobs {args.jobs}, load {load_average()}")

    one = hashlib_rate()
    many = threads_rate(args.jobs)
    target = one * args.jobs
    print(f"hashlib sha256: {one / 1e9:.2f} GB/s on one thread; x{args.jobs} cores = {target / 1e9:.2f} GB/s; "
          f"{args.jobs} threads at once measured {many / 1e9:.2f} GB/s")

    def check_all() -> None:
        for check in check_packs(packed, found, deep=True, jobs=args.jobs):
            assert not check.problems, check.problems

    seconds, _ = best_of(args.repeat, check_all)
    rate = tensor_bytes / seconds
    print(f"packs, check_packs (deep, as validate): {seconds:.3f} s, {rate / 1e9:.2f} GB/s = {rate / target:.0%} of hashlib x "
          f"cores ({rate / many:.0%} of threads measured at once)")

    paths = [os.path.join(loose, rel) for rel in small]
    seconds_loose, _ = best_of(args.repeat, lambda: sum(1 for _ in rehash_files(paths, jobs=args.jobs)))
    small_bytes = sum(size for rel, size in blobs if size < 1 << 20)
    rate_loose = small_bytes / seconds_loose
    print(f"loose, rehash_files over the same small blobs: {seconds_loose:.3f} s, {rate_loose / 1e9:.2f} GB/s = "
          f"{rate_loose / target:.0%} of hashlib x cores; packs are {seconds_loose / seconds:.1f}x faster")

    for label, root in (("loose", loose), ("packed", packed)):
        seconds_all, report = best_of(args.repeat, lambda r=root: validate(ikdata.open(r), deep=True, jobs=args.jobs))
        assert report.ok, [str(p) for p in report.problems[:5]]
        print(f"validate --deep, {label}: {seconds_all:.3f} s ({loose_bytes / seconds_all / 1e9:.2f} GB/s of blob "
              f"bytes, records included)")
    print(f"ikdata pack (first run, {len(small)} blobs): {pack_seconds:.2f} s")
    if args.smoke:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
