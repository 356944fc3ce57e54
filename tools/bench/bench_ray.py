"""Benchmark: replay of 2,000 small GEMM cases on Ray (2 workers) vs locally, and from S3 vs a folder.

Measured in one run, on the same dataset (built with bench_replay's builder):

* local ``replay`` (one process) wall time;
* ``replay --ray`` on a local 2-CPU cluster: Ray's start-up reported apart from the replay itself;
* ``replay s3://... --ray`` against moto's S3 server on loopback with no local copy: bytes the
  workers fetched vs the bytes of the blobs the cases need (target <= 1.05x).

    .venv/bin/python tools/bench/bench_ray.py [--cases 2000] [--workers 2] [--task-size 64]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replay import build  # noqa: E402  (the same 1,000-case GEMM builder)
from _bench import load_average  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--task-size", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="64 cases on 1 worker (Ray's start-up dominates; for "
                        "tests, the ratios are noise)")
    args = parser.parse_args()
    if args.smoke:
        args.cases, args.workers, args.task_size = 64, 1, 32
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    import logging

    import torch
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    torch.set_num_threads(1)  # as each Ray worker runs (OMP_NUM_THREADS=1): a like-for-like local baseline

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", IKDATA_CACHE_DIR=str(work / "cache"))
    try:
        import boto3
        import ray

        import ikdata
        from ikdata.core import manifest
        from ikdata.remote.push import push
        from ikdata.replay.distributed import replay_on_ray
        from ikdata.replay.runner import replay

        root, definitions = work / "ds", work / "defs"
        build(root, definitions, args.cases, 8, 64, 64)
        manifest.write(root)
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bench")
        push(root, "s3://bench/ds")
        print(f"{args.cases} GEMM cases (A[8,64] @ W[64,64].T, float32); load average {load_average()}")

        started = time.perf_counter()
        local = replay(ikdata.open(root, definitions=[definitions]), reuse=False, report_path=work / "local.json")
        local_s = time.perf_counter() - started
        assert local.exit_code == 0

        started = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        startup = time.perf_counter() - started
        try:
            started = time.perf_counter()
            on_ray, info = replay_on_ray(root, definition_folders=[definitions], reuse=False,
                                         report_path=work / "ray.json", task_size=args.task_size)
            ray_s = time.perf_counter() - started
            assert on_ray.exit_code == 0, on_ray.counts
            started = time.perf_counter()
            from_s3, s3_info = replay_on_ray("s3://bench/ds", definition_folders=[definitions], reuse=False,
                                             report_path=work / "s3.json", task_size=args.task_size)
            s3_s = time.perf_counter() - started
            assert from_s3.exit_code == 0, (from_s3.counts, [c.get("reason") for c in from_s3.report["cases"]][:2])
        finally:
            ray.shutdown()
        needed = {d for c in from_s3.report["cases"]
                  for d in [*c["input_digests"].values(), *c["expected_digests"].values()]}
        need_bytes = sum(p.stat().st_size for p in (root / "blob").rglob("*.safetensors")
                         if p.name.split(".")[0] in needed)
        print(f"local replay (1 process)           {local_s:7.2f} s")
        print(f"ray start-up ({args.workers} CPUs), apart          {startup:7.2f} s")
        print(f"replay --ray, local folder         {ray_s:7.2f} s  ({ray_s / local_s:.2f}x local; "
              f"{info.tasks} tasks of <= {args.task_size} cases)")
        print(f"replay s3:// --ray, no local copy  {s3_s:7.2f} s  ({s3_s / local_s:.2f}x local)")
        print(f"bytes fetched by workers {s3_info.fetched_bytes:,} vs bytes the cases need {need_bytes:,}: "
              f"{s3_info.fetched_bytes / need_bytes:.3f}x (target <= 1.05x)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
