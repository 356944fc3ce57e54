"""Diffusion step replay benchmark: replay time per step against one bare denoiser forward on the same inputs.

Run: .venv/bin/python tools/bench/bench_diffusion_replay.py [--smoke] [--device cuda] [--case flow|stochastic|flux]

Two schedulers: a flow-matching one (the tiny LTX-2 pipeline of tools/examples/tiny_video.py, both streams,
CFG batch, FlowMatchEulerDiscreteScheduler) and a stochastic one (diffusers' DDPMPipeline with a tiny
UNet2DModel: DDPMScheduler draws noise inside every step but the last, which the chain check replays from
the record); and ``--case flux``, a pipeline whose denoiser is discovered from its call (a tiny FluxPipeline
with true CFG: two transformer calls a step, both in the baseline). A trajectory of each is captured once.
The baseline is one bare forward of the same denoiser (built once, warm) on the inputs
of each step, measured in the same run. Replay per step is the time the trajectory judge spends on one
step (loading and verifying its blobs, the reference forward, the floor's second forward, the measures),
median over the steps, best of the rounds; the whole trajectory's time divided by its steps (records,
model blobs, noise and continuity checks included) and the first, cold run are reported apart.
Replay runs per step the reference one precision above the engine's (float64 for float32) and the reference in
the engine's dtype, plus the other attention with the floor: three forwards (two without). A second baseline
times the bare forward one precision up. Targets: <= 1.2x the forwards replay must run (2 bare + 1 higher with
the floor, 1 + 1 without); against one bare forward the ratio is what the higher precision costs on the device.
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


CASES = {"flow": "flow-matching (LTX-2, FlowMatchEulerDiscreteScheduler)",
         "stochastic": "stochastic (DDPMPipeline, UNet2DModel, DDPMScheduler)",
         "flux": "flow-matching, a discovered denoiser (FluxPipeline, true CFG: two calls per step)"}


def _flux(steps: int) -> tuple:
    """A tiny FluxPipeline with true CFG (two transformer calls a step), its denoiser discovered from the call."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=4, joint_attention_dim=32,
                                         pooled_projection_dim=32, guidance_embeds=False, axes_dims_rope=(4, 4, 8))
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=None, text_encoder=None, tokenizer=None,
                        text_encoder_2=None, tokenizer_2=None, transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator("cpu").manual_seed(1)
    embeds = [torch.randn(1, 16, 32, generator=g), torch.randn(1, 32, generator=g)]
    return pipe, dict(prompt_embeds=embeds[0], pooled_prompt_embeds=embeds[1], negative_prompt_embeds=-embeds[0],
                      negative_pooled_prompt_embeds=-embeds[1], true_cfg_scale=3.0, height=256, width=256,
                      num_inference_steps=steps, generator=torch.Generator("cpu").manual_seed(42),
                      output_type="latent", max_sequence_length=16)


def _ddpm(steps: int) -> tuple:
    import torch
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(32, 64), norm_num_groups=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=1000))
    pipe.set_progress_bar_config(disable=True)
    return pipe, dict(batch_size=1, generator=torch.Generator("cpu").manual_seed(42), num_inference_steps=steps,
                      output_type="np")


def capture(root: Path, steps: int, case: str = "flow") -> None:
    import tiny_video
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.core.writer import DatasetWriter

    pipe, kwargs = (tiny_video.build(), tiny_video.call_kwargs(seed=42, steps=steps)) if case == "flow" \
        else _flux(steps) if case == "flux" else _ddpm(steps)
    boot.install(CaptureConfig(into=str(root), strict=True, only=("rmsnorm_f32_h99991",)))
    try:
        pipe(**kwargs)
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
    hooks = diffusion.RunnerHooks()
    started = time.perf_counter()
    [case] = diffusion.judge_all(run, hooks, settings=settings)
    seconds = time.perf_counter() - started
    assert case.passed, case.reason
    per_step = {s["index"]: s["seconds"] for s in case.record("trajectory")["steps"]}
    return seconds, len(per_step), statistics.median(per_step.values())


def bare_forward(root: Path, device: str, rounds: int, higher: bool = False) -> float:
    """Median seconds of a step's forwards (one, or each call of the step) of the (built, warm) denoiser on the
    step's captured inputs; with ``higher``, weights and floating inputs one precision up (float64 for float32,
    float32 for bf16/fp16), as replay runs its reference."""
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
    per_step = [s["workloads"]["denoiser"] for s in record["steps"] if s["stream"] == record["streams"][0]]
    uuids = [u for calls in per_step for u in calls]  # every call of a step (two with true CFG): the step's forwards
    definition = ds.definitions[rows[uuids[0]].definition]
    from ikdata.diffusion import discovery

    if discovery.is_generic(definition):  # a discovered call: ikdata's own forward, as replay runs it
        def run(*values, model):
            return discovery.forward(definition, dict(zip(definition.inputs, values)), model)
    else:
        run = load_reference(definition, trusted_definitions=ds.trusted_definitions)
    spec = {"record": dict(model.record), "state_dict": state}
    inputs = [ds.load_inputs(rows[u], device=device) for u in uuids]
    if higher:
        from ikdata.diffusion.denoiser_model import HIGHER

        up = HIGHER.get(next(t.dtype for t in state.values() if t.is_floating_point()))
        if up is None:
            return 0.0
        cast = lambda v: v.to(up) if torch.is_tensor(v) and v.is_floating_point() else v  # noqa: E731
        spec = {"record": {**spec["record"], "digest": f"{model.digest}@{up}"},
                "state_dict": {n: cast(t) for n, t in state.items()}}
        inputs = [{n: cast(v) for n, v in one.items()} for one in inputs]
    with torch.inference_mode():
        run(*[inputs[0][n] for n in definition.inputs], model=spec)  # build and warm
    times = []
    calls = len(per_step[0]) if per_step else 1
    for _ in range(rounds):
        for first in range(0, len(inputs), calls):
            started = time.perf_counter()
            for one in inputs[first:first + calls]:
                with torch.inference_mode():
                    run(*[one[n] for n in definition.inputs], model=spec)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(work: Path, case: str, device: str, steps: int, rounds: int) -> dict:
    """Capture one trajectory of ``case`` and time its replay per step, with and without the floor."""
    from ikdata.diffusion.settings import Settings

    root = work / case
    capture(root, steps, case)
    cold = _judge(root, device, Settings())[0]
    bare = bare_forward(root, device, rounds)
    bare_hi = bare_forward(root, device, rounds, higher=True)
    whole: dict[bool, list[float]] = {True: [], False: []}
    step: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):  # interleaved, so both sides see the same machine load
        for floor in (True, False):
            seconds, n, median = _judge(root, device, Settings() if floor else Settings(alt_attention=None))
            whole[floor].append(seconds / n)
            step[floor].append(median)
    return {"case": case, "scheduler": CASES[case], "device": device, "steps": steps, "rounds": rounds,
            "bare_forward_ms": round(bare * 1e3, 2), "bare_forward_higher_ms": round(bare_hi * 1e3, 2),
            "ratio_with_floor_to_its_forwards": round(min(step[True]) / (2 * bare + bare_hi), 3),
            "ratio_without_floor_to_its_forwards": round(min(step[False]) / (bare + bare_hi), 3),
            "step_ms_with_floor": round(min(step[True]) * 1e3, 2),
            "step_ms_without_floor": round(min(step[False]) * 1e3, 2),
            "ratio_with_floor": round(min(step[True]) / bare, 3),
            "ratio_without_floor": round(min(step[False]) / bare, 3),
            "whole_per_step_ms_with_floor": round(min(whole[True]) * 1e3, 2),
            "whole_per_step_ms_without_floor": round(min(whole[False]) * 1e3, 2),
            "cold_first_run_s": round(cold, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="fewest steps and one round (seconds; ratios still "
                                                             "printed)")
    parser.add_argument("--quick", action="store_true", help="the same as --smoke")
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="one scheduler (default: both)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    steps, rounds = (2, 1) if args.smoke or args.quick else (6, 3)
    work = Path(tempfile.mkdtemp(prefix="ikdata-bench-diffusion-replay-"))
    try:
        print(f"load average {load_average()}")
        for case in args.case or list(CASES):
            found = measure(work, case, args.device, steps, rounds)
            print(f"{found['scheduler']}:")
            print(f"  bare denoiser forward (median): {found['bare_forward_ms']} ms; one precision up: "
                  f"{found['bare_forward_higher_ms']} ms")
            print(f"  replay per step (median step, best of {rounds}): with the floor {found['step_ms_with_floor']} "
                  f"ms = {found['ratio_with_floor']}x one forward, {found['ratio_with_floor_to_its_forwards']}x its "
                  f"three (target <= 1.2x); without {found['step_ms_without_floor']} ms = "
                  f"{found['ratio_without_floor']}x, {found['ratio_without_floor_to_its_forwards']}x its two "
                  "(target <= 1.2x)")
            print(f"  whole trajectory / steps (reading the records, the model's blobs, noise and continuity checks "
                  f"included): {found['whole_per_step_ms_with_floor']} ms with the floor, "
                  f"{found['whole_per_step_ms_without_floor']} ms without; first run with the model build: "
                  f"{found['cold_first_run_s']} s")
            print(json.dumps(found))
        print(f"load average {load_average()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
