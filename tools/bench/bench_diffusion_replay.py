"""Diffusion step replay benchmark: replay time per step against one bare denoiser forward on the same inputs.

Run: .venv/bin/python tools/bench/bench_diffusion_replay.py [--quick] [--device cuda]

A trajectory of the tiny LTX-2 pipeline of tools/examples/tiny_video.py (both streams, CFG batch) is
captured once. The baseline is one bare forward of the same denoiser (built once, warm) on the inputs
of each step, measured in the same run. Replay per step is the time the trajectory judge spends on one
step (loading and verifying its blobs, the reference forward, the floor's second forward, the measures),
median over the steps, best of the rounds; the whole trajectory's time divided by its steps (records,
model blobs, noise and continuity checks included) and the first, cold run are reported apart.
Targets: <= 2.3x with the floor (two forwards per step), <= 1.2x without.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools" / "examples"), str(ROOT / "tools" / "bench")]

from _bench import load_average  # noqa: E402


def capture(root: Path, steps: int) -> None:
    import tiny_video
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.core.writer import DatasetWriter

    pipe = tiny_video.build()
    boot.install(CaptureConfig(into=str(root), strict=True, only=("rmsnorm_f32_h99991",)))
    try:
        pipe(**tiny_video.call_kwargs(seed=42, steps=steps))
    finally:
        boot.uninstall()
    DatasetWriter(root).commit()


def _judge(root: Path, device: str, settings) -> tuple[float, int, float]:
    """(seconds in the trajectory judge, step indices replayed, median seconds of one step)."""
    import ikdata
    from ikdata.replay import runner
    from ikdata.diffusion import replay as diffusion

    ds = ikdata.open(root)
    run, _, _ = runner._start(ds, device=device, definitions=None, shard=None, resume=False,
                              report_path=root / "reports" / "bench.json", trust=(), reuse=False, cache_path=None)
    hooks = diffusion.RunnerHooks(runner._load_tensor, runner._reference, runner._name_outputs)
    started = time.perf_counter()
    [case] = diffusion.judge_all(run, hooks, settings=settings)
    seconds = time.perf_counter() - started
    assert case["status"] == "passed", case.get("reason")
    per_step = {s["index"]: s["seconds"] for s in case["trajectory"]["steps"]}
    return seconds, len(per_step), statistics.median(per_step.values())


def bare_forward(root: Path, device: str, rounds: int) -> float:
    """Median seconds of one forward of the (built, warm) denoiser on each step's captured inputs."""
    import torch

    import ikdata
    from ikdata.diffusion import models
    from ikdata.core.definitions import load_reference
    from ikdata.core.records import TensorRef

    ds = ikdata.open(root)
    rows = {r.uuid: r for r in ds.workloads()}
    record = json.loads(next((root / "trajectories").glob("*.jsonl")).read_text().splitlines()[0])
    model = models.read_record(root, record["model"]["record"])
    state = {n: ds.store.get(TensorRef(p), device=device) for n, p in model.blob_paths().items()}
    uuids = [s["workloads"]["denoiser"][0] for s in record["steps"] if s["stream"] == "video"]
    definition = ds.definitions[rows[uuids[0]].definition]
    run = load_reference(definition, trusted_definitions=ds.trusted_definitions)
    spec = {"record": dict(model.record), "state_dict": state}
    inputs = [ds.load_inputs(rows[u], device=device) for u in uuids]
    with torch.inference_mode():
        run(*[inputs[0][n] for n in definition.inputs], model=spec)  # build and warm
    times = []
    for _ in range(rounds):
        for one in inputs:
            started = time.perf_counter()
            with torch.inference_mode():
                run(*[one[n] for n in definition.inputs], model=spec)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds (a smoke run)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    import torch

    from ikdata.diffusion.replay import Settings

    torch.set_num_threads(1)
    steps, rounds = (3, 1) if args.quick else (6, 3)
    work = Path(tempfile.mkdtemp(prefix="ikdata-bench-diffusion-replay-"))
    try:
        print(f"load average {load_average()}")
        capture(work / "ds", steps)
        cold = _judge(work / "ds", args.device, Settings())[0]
        bare = bare_forward(work / "ds", args.device, rounds)
        whole = {True: [], False: []}
        step = {True: [], False: []}
        for _ in range(rounds):  # interleaved, so both sides see the same machine load
            for floor in (True, False):
                seconds, n, median = _judge(work / "ds", args.device, Settings() if floor else Settings(alt_attention=None))
                whole[floor].append(seconds / n)
                step[floor].append(median)
        found = {"device": args.device, "steps": steps, "rounds": rounds, "bare_forward_ms": round(bare * 1e3, 2),
                 "step_ms_with_floor": round(min(step[True]) * 1e3, 2),
                 "step_ms_without_floor": round(min(step[False]) * 1e3, 2),
                 "ratio_with_floor": round(min(step[True]) / bare, 3),
                 "ratio_without_floor": round(min(step[False]) / bare, 3),
                 "whole_per_step_ms_with_floor": round(min(whole[True]) * 1e3, 2),
                 "whole_per_step_ms_without_floor": round(min(whole[False]) * 1e3, 2),
                 "cold_first_run_s": round(cold, 3)}
        print(f"bare denoiser forward (median): {found['bare_forward_ms']} ms")
        print(f"replay per step (median step, best of {rounds}): with the floor {found['step_ms_with_floor']} ms = "
              f"{found['ratio_with_floor']}x (target <= 2.3x); without {found['step_ms_without_floor']} ms = "
              f"{found['ratio_without_floor']}x (target <= 1.2x)")
        print(f"whole trajectory / steps (reading the records, the model's blobs, noise and continuity checks "
              f"included): {found['whole_per_step_ms_with_floor']} ms with the floor, "
              f"{found['whole_per_step_ms_without_floor']} ms without; first run with the model build: "
              f"{found['cold_first_run_s']} s")
        print(f"load average {load_average()}")
        print(json.dumps(found))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
