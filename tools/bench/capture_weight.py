"""What capturing a GEMM with an unchanged weight costs the engine thread, and what checking the weight costs.

Run: .venv/bin/python tools/bench/capture_weight.py [--quick]

1. Engine-thread time per capture of ``F.linear(A, W)``, W an unchanged 1024x1024 bf16 weight
   and A 16 rows (a decode step): ``Capturer.record`` (check, claim, host copy of A and C, the
   cached W joining its check, enqueue), against the earlier capture script's writer measured
   in the same run, which on the engine thread copies every tensor to host, rehashes it
   (sha256 over dtype, shape and bytes, as DESIGN.md contract 1) and writes the blobs it does
   not have yet (A and C: new every call), and against that writer's copy + rehash of W
   alone. Rounds alternate between the two, medians are compared. Target <= 0.3x.
2. Background cost of the weight checks (the writer thread rehashing the live weight):
   seconds of rehashing per MB of workloads captured (A + W + C), with captures back to back
   (checks spaced by ``CHECK_INTERVAL``: one rehash covers many captures) and with a flush
   after every capture (the worst case: one rehash per capture).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import load_average  # noqa: E402

FEATURES, ROWS = 1024, 16


class SeedStyleWriter:
    """The earlier script's way (facts from seeds/002): everything on the engine thread, every call."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def tensor(self, value: torch.Tensor, name: str) -> dict:
        from safetensors.torch import save_file

        value = value.detach().to(device="cpu", copy=True).contiguous()
        digest = hashlib.sha256(json.dumps([str(value.dtype), list(value.shape)]).encode())
        digest.update(memoryview(value.reshape(-1).view(torch.uint8).numpy()))
        relative = Path("blob/workloads") / name / (digest.hexdigest() + ".safetensors")
        path = self.root / relative
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            save_file({"tensor": value}, str(temporary))
            temporary.replace(path)
        return {"type": "safetensors", "path": relative.as_posix(), "tensor_key": "tensor"}

    def capture(self, a: torch.Tensor, w: torch.Tensor, c: torch.Tensor, request: str) -> None:
        name = "dense_gemm_bf16_nt_n1024_k1024"
        inputs = {"A": self.tensor(a, name), "W": self.tensor(w, name)}
        expected = self.tensor(c, name)
        with (self.root / "captures.jsonl").open("a") as stream:
            stream.write(json.dumps({"request_id": request, "inputs": inputs, "expected_output": expected}) + "\n")


def _record(capturer, a, w, c, request: str) -> None:
    from ikdata.capture import request as in_request

    with in_request(request):
        capturer.record("dense_gemm_bf16_nt", {"A": a, "W": w}, {"C": c}, operation="F.linear",
                        variant=f"m{a.shape[0]}", weights=("W",), fills={"N": FEATURES, "K": FEATURES})


def bench_engine_thread(rounds: int, per_round: int) -> dict:
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    w = torch.randn(FEATURES, FEATURES).bfloat16()
    tmp = Path(tempfile.mkdtemp())
    ours: list[float] = []
    seed: list[float] = []
    seed_w: list[float] = []  # the part of the seed's capture that rehashes W alone
    try:
        capturer = boot.install(CaptureConfig(into=str(tmp / "ours"), queue_bytes=4 << 30))
        seed_writer = SeedStyleWriter(tmp / "seed")
        a0 = torch.randn(ROWS, FEATURES).bfloat16()
        _record(capturer, a0, w, F.linear(a0, w), "warm")  # the first capture copies W; later ones reuse it
        seed_writer.capture(a0, w, F.linear(a0, w), "warm")
        n = 0
        for r in range(rounds):
            for which in (("ours", "seed") if r % 2 == 0 else ("seed", "ours")):
                for _ in range(per_round):
                    a = torch.randn(ROWS, FEATURES).bfloat16()
                    c = F.linear(a, w)
                    n += 1
                    start = time.perf_counter()
                    if which == "ours":
                        _record(capturer, a, w, c, f"r{n}")
                    else:
                        seed_writer.capture(a, w, c, f"r{n}")
                    (ours if which == "ours" else seed).append(time.perf_counter() - start)
                    if which == "seed":
                        start = time.perf_counter()
                        seed_writer.tensor(w, "dense_gemm_bf16_nt_n1024_k1024")
                        seed_w.append(time.perf_counter() - start)
            capturer.flush()
        hits = capturer.weights.hits
        boot.uninstall()
    finally:
        shutil.rmtree(tmp)
    o, s, sw = statistics.median(ours), statistics.median(seed), statistics.median(seed_w)
    return {"ours_ms": o * 1e3, "seed_ms": s * 1e3, "ratio": o / s, "seed_w_ms": sw * 1e3, "ratio_w": o / sw,
            "captures": len(ours), "hits": hits}


def bench_checks(captures: int, *, flush_each: bool) -> dict:
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    w = torch.randn(FEATURES, FEATURES).bfloat16()
    tmp = tempfile.mkdtemp()
    try:
        capturer = boot.install(CaptureConfig(into=tmp, queue_bytes=4 << 30))
        for i in range(captures):
            a = torch.randn(ROWS, FEATURES).bfloat16()
            _record(capturer, a, w, F.linear(a, w), f"c{i}")
            if flush_each:
                capturer.flush()
        capturer.flush()
        weights = capturer.weights
        seconds, checks, checked = (getattr(weights, k, 0) for k in ("check_seconds", "checks", "check_bytes"))
        boot.uninstall()
    finally:
        shutil.rmtree(tmp)
    captured_mb = captures * (ROWS * FEATURES * 2 * 2 + FEATURES * FEATURES * 2) / 1e6  # A + C + W per workload
    return {"captures": captures, "checks": checks, "captured_mb": captured_mb,
            "ms_per_captured_mb": seconds * 1e3 / captured_mb if captured_mb else 0.0,
            "ms_per_check": seconds * 1e3 / checks if checks else 0.0,
            "check_mb_s": checked / 1e6 / seconds if seconds else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Fewer repetitions (noisier).")
    parser.add_argument("--smoke", action="store_true", help="The smallest sizes, a few seconds (tests; ratios "
                        "are noise)")
    args = parser.parse_args()
    args.quick = args.quick or args.smoke
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {load_average()}")
    r = bench_engine_thread(rounds=2 if args.smoke else 4 if args.quick else 10,
                            per_round=3 if args.smoke else 10 if args.quick else 20)
    print(f"1. engine thread per capture (F.linear, A {ROWS}x{FEATURES}, unchanged W {FEATURES}x{FEATURES} bf16, "
          f"median of {r['captures']}): ikdata {r['ours_ms']:.3f} ms vs the earlier script's writer (rehash "
          f"every call) {r['seed_ms']:.3f} ms -> {r['ratio']:.3f}x; vs its copy + rehash of W alone "
          f"{r['seed_w_ms']:.3f} ms -> {r['ratio_w']:.3f}x (target <= 0.3x; weight reused {r['hits']} times)")
    for flush_each in (False, True):
        c = bench_checks(5 if args.smoke else 50 if args.quick else 200, flush_each=flush_each)
        how = "a flush after every capture (one check each)" if flush_each else "back to back"
        print(f"2. weight checks, {how}: {c['checks']} rehashes for {c['captures']} captures, "
              f"{c['ms_per_check']:.2f} ms each ({c['check_mb_s']:.0f} MB/s) -> "
              f"{c['ms_per_captured_mb']:.3f} ms of writer-thread time per captured MB")


if __name__ == "__main__":
    main()
