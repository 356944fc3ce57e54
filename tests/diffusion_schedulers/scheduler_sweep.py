"""The scheduler sweep: a tiny UNet2DModel pipeline run with every scheduler, honest and perturbed, captured
into one dataset and replayed once.

A module of its own (not conftest), imported by a name no other test folder uses. The pipeline is the
DDPM/DDIM loop with any scheduler: noise drawn from the generator, ``set_timesteps`` (with the pipeline's
custom sigmas for flow matching), then per timestep one UNet forward on the step's x and one
``scheduler.step`` (with the generator and ``eta`` where the step takes them). The denoiser is fed x
itself (no ``scale_model_input``) with the timestep rounded (the shipped UNet2DModel definition takes an
int64 timestep), and the first x is the drawn noise (no ``init_noise_sigma``): what this sweep judges is
the scheduler step.

Perturbations of one step (``AT``), each an engine's drop-in scheduler (a subclass named like its base):
``noise`` adds the step's noise at 1.1 times its scale (the draw recorded is the generator's), ``sigma``
steps with sigmas / alphas 3% off (the schedule it reports stays right), ``update`` returns x_next 0.1% off.
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEPS = 3
AT = 1  # the perturbed step (scheduler step call)
# Heun's step 1 is its correction stage, whose x_next does not depend on sigma (it cancels for epsilon
# prediction): a wrong sigma there is not a wrong step. Its next first stage is perturbed instead.
AT_BY_CLASS = {"HeunDiscreteScheduler": 2, "FlowMatchHeunDiscreteScheduler": 2}
SIZE = 8
PERTURBATIONS = ("noise", "sigma", "update")
SCHEDULE_ARRAYS = ("sigmas", "alphas_cumprod", "final_alpha_cumprod", "alpha_t", "sigma_t", "lambda_t",
                   "sigmas_interpol")


@dataclass(frozen=True)
class Variant:
    """One scheduler as a pipeline would configure it."""

    label: str
    cls: str
    config: dict = field(default_factory=dict)
    call: dict = field(default_factory=dict)  # extra pipeline call arguments (eta)
    flow_sigmas: bool = False  # the pipeline passes its own sigmas to set_timesteps (Flux, LTX style)


def variants() -> list[Variant]:
    """Every scheduler of diffusers' KarrasDiffusionSchedulers that builds here, stochastic variants, and the
    flow-matching schedulers the pipeline accepts."""
    from diffusers.schedulers import KarrasDiffusionSchedulers

    own = {"PNDMScheduler": {"skip_prk_steps": True}}  # as Stable Diffusion configures it (PRK needs >= 4 steps)
    found = [Variant(k.name, k.name, own.get(k.name, {})) for k in KarrasDiffusionSchedulers]
    found += [Variant("DDIMScheduler(eta=0.5)", "DDIMScheduler", call={"eta": 0.5}),
              Variant("DPMSolverMultistepScheduler(sde-dpmsolver++)", "DPMSolverMultistepScheduler",
                      {"algorithm_type": "sde-dpmsolver++"}),
              Variant("FlowMatchEulerDiscreteScheduler(custom sigmas)", "FlowMatchEulerDiscreteScheduler",
                      flow_sigmas=True),
              Variant("FlowMatchEulerDiscreteScheduler(shift=3, SD3 default schedule)",
                      "FlowMatchEulerDiscreteScheduler", {"shift": 3.0}),
              Variant("FlowMatchEulerDiscreteScheduler(stochastic_sampling)", "FlowMatchEulerDiscreteScheduler",
                      {"stochastic_sampling": True}),
              Variant("FlowMatchHeunDiscreteScheduler", "FlowMatchHeunDiscreteScheduler")]
    return found


def unavailable(variant: Variant) -> str | None:
    """Why a scheduler cannot be built here (a library it needs is not installed), or None."""
    import diffusers

    try:
        getattr(diffusers, variant.cls).from_config({**_train(variant), **variant.config})
    except (ImportError, OSError) as exc:
        return str(exc).strip().splitlines()[0]
    return None


def at(variant: Variant) -> int:
    """The step call a perturbation of ``variant`` makes wrong."""
    return AT_BY_CLASS.get(variant.cls, AT)


def _train(variant: Variant) -> dict:
    return {} if variant.cls.startswith(("FlowMatch", "EDM")) else {"num_train_timesteps": 100}


def make_pipeline_class() -> type:
    """The pipeline class (made on demand, after diffusers is importable)."""
    import torch
    from diffusers import DiffusionPipeline, ImagePipelineOutput
    from diffusers.utils.torch_utils import randn_tensor

    class SchedulerSweepPipeline(DiffusionPipeline):
        def __init__(self, unet: Any, scheduler: Any) -> None:
            super().__init__()
            self.register_modules(unet=unet, scheduler=scheduler)

        @torch.no_grad()
        def __call__(self, batch_size: int = 1, generator: Any = None, num_inference_steps: int = STEPS,
                     sigmas: Any = None, eta: float | None = None, output_type: str = "np") -> Any:
            shape = (batch_size, self.unet.config.in_channels, SIZE, SIZE)
            image = randn_tensor(shape, generator=generator, dtype=torch.float32)
            if sigmas is not None:
                self.scheduler.set_timesteps(sigmas=sigmas)
            else:
                self.scheduler.set_timesteps(num_inference_steps)
            accepts = inspect.signature(type(self.scheduler).step).parameters
            kwargs = {"generator": generator} if "generator" in accepts else {}
            if eta is not None and "eta" in accepts:
                kwargs["eta"] = eta
            for t in self.scheduler.timesteps:
                out = self.unet(image, int(round(float(t)))).sample  # the unet2d definition's timestep is int64
                image = self.scheduler.step(out, t, image, **kwargs).prev_sample
            return ImagePipelineOutput(images=(image / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy())

    return SchedulerSweepPipeline


def unet() -> Any:
    import torch
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(sample_size=SIZE, in_channels=2, out_channels=2, layers_per_block=1,
                       block_out_channels=(4, 8), norm_num_groups=2,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def engine_scheduler(variant: Variant, perturbation: str | None) -> Any:
    """The variant's scheduler; with a perturbation, an engine's drop-in subclass wrong at step ``AT``."""
    import diffusers

    base = getattr(diffusers, variant.cls)
    config = {**_train(variant), **variant.config}
    if perturbation is None:
        return base.from_config(config)
    module = sys.modules[base.__module__]

    class Engine(base):  # type: ignore[misc, valid-type]
        def step(self, *args: Any, **kwargs: Any) -> Any:
            calls = self.__dict__.get("_sweep_calls", 0)
            self.__dict__["_sweep_calls"] = calls + 1
            if calls != at(variant):
                return super().step(*args, **kwargs)
            if perturbation == "noise":
                return _with_noise_scale(module, lambda: super(Engine, self).step(*args, **kwargs))
            if perturbation == "sigma":
                return _with_schedule_off(self, lambda: super(Engine, self).step(*args, **kwargs))
            result = super().step(*args, **kwargs)
            result.prev_sample = result.prev_sample * 1.001
            return result

    Engine.__name__ = Engine.__qualname__ = base.__name__
    Engine.step.__signature__ = inspect.signature(base.step)  # type: ignore[attr-defined]  (a drop-in's signature)
    return Engine.from_config(config)


def _with_noise_scale(module: Any, run: Any) -> Any:
    """Run the step with its noise added at 1.1 times the scale (the generator's draw is what capture sees)."""
    import torch

    original_tensor, original_randn = getattr(module, "randn_tensor", None), torch.randn

    def scaled(*args: Any, **kwargs: Any) -> Any:
        return original_tensor(*args, **kwargs) * 1.1

    if original_tensor is not None:
        module.randn_tensor = scaled
    try:
        return run()
    finally:
        if original_tensor is not None:
            module.randn_tensor = original_tensor
        torch.randn = original_randn


def _with_schedule_off(sched: Any, run: Any) -> Any:
    """Run the step with its schedule arrays 3% off, restored before the step is recorded."""
    import torch

    saved = {}
    for name in SCHEDULE_ARRAYS:
        value = sched.__dict__.get(name)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            saved[name] = value
            sched.__dict__[name] = value * 0.97
    try:
        return run()
    finally:
        sched.__dict__.update(saved)


@dataclass
class Sweep:
    """The captured dataset, the trajectory id of each (variant label, perturbation or None), and the
    variants left out with why."""

    root: Path
    ids: dict[tuple[str, str | None], str] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    cases: dict[str, dict] = field(default_factory=dict)  # trajectory id -> its case
    report: dict = field(default_factory=dict)


def capture(root: Path, chosen: list[Variant], perturbations: tuple[str, ...] = PERTURBATIONS, seed: int = 3,
            honest: bool = True) -> Sweep:
    """Run the pipeline with every chosen variant, honest and with each perturbation (``noise`` only where the
    honest step drew noise; each call its own seed, so no two calls share a workload), capturing into ``root``."""
    import numpy as np
    import torch
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.core.writer import DatasetWriter

    sweep = Sweep(root)
    pipeline_class = make_pipeline_class()
    model = unet()
    path = root / "trajectories" / f"{pipeline_class.__name__}.jsonl"
    boot.install(CaptureConfig(into=str(root), strict=True, only=("rmsnorm_f32_h99991",)))
    try:
        for variant in chosen:
            why = unavailable(variant)
            if why:
                sweep.left_out[variant.label] = why
                continue
            for number, perturbation in enumerate((None, *perturbations)):
                if perturbation is None and not honest:
                    continue
                if perturbation == "noise" and not _draws_noise(sweep, variant):
                    continue  # a deterministic step: no noise to scale
                pipe = pipeline_class(unet=model, scheduler=engine_scheduler(variant, perturbation))
                pipe.set_progress_bar_config(disable=True)
                call = dict(variant.call, generator=torch.Generator("cpu").manual_seed(seed + number), output_type="np")
                if variant.flow_sigmas:
                    call["sigmas"] = np.linspace(1.0, 1.0 / STEPS, STEPS)
                before = len(path.read_text().splitlines()) if path.exists() else 0
                pipe(**call)
                lines = path.read_text().splitlines()
                assert len(lines) == before + 1, f"{variant.label} {perturbation}: no trajectory written"
                sweep.ids[(variant.label, perturbation)] = json.loads(lines[-1])["trajectory"]
    finally:
        boot.uninstall()
    DatasetWriter(root).commit()
    return sweep


def _draws_noise(sweep: Sweep, variant: Variant) -> bool:
    """Whether the variant's honest run recorded noise drawn inside a step."""
    record = trajectory_record(sweep, sweep.ids[(variant.label, None)])
    return any(step.get("noise") for step in record["steps"])


def replay(sweep: Sweep, report: Path) -> Sweep:
    """Replay the sweep's dataset once (reuse off); its cases by uuid."""
    import ikdata
    from ikdata.replay.runner import replay as run

    result = run(ikdata.open(sweep.root), reuse=False, report_path=report)
    sweep.report = result.report
    sweep.cases = {c["uuid"]: c for c in result.report["cases"]}
    return sweep


def workload_cases(sweep: Sweep, trajectory: str) -> dict[str, list[dict]]:
    """The cases of a trajectory's step workloads, by kind (denoiser, scheduler_step)."""
    found: dict[str, list[dict]] = {}
    record = trajectory_record(sweep, trajectory)
    for step in record["steps"]:
        for kind, uuids in (step.get("workloads") or {}).items():
            found.setdefault(kind, []).extend({**sweep.cases[u], "step": step["index"]} for u in uuids)
    return found


def trajectory_record(sweep: Sweep, trajectory: str) -> dict:
    for path in (sweep.root / "trajectories").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["trajectory"] == trajectory:
                return record
    raise KeyError(trajectory)


TABLE_HEADER = ("| scheduler | honest run passes | wrong noise scale caught | wrong sigma caught | wrong update caught |\n"
                "|---|---|---|---|---|")


def table(sweep: Sweep) -> str:
    """The docs/diffusion.md "Schedulers" table, every cell from the sweep's verdicts."""
    lines = [TABLE_HEADER]
    for variant in variants():
        if variant.label in sweep.left_out:
            why = sweep.left_out[variant.label].split(" requires ")[-1].split(" but ")[0]
            lines.append(f"| {variant.label} | not built here (needs {why}) | | | |")
            continue
        cells = [variant.label]
        honest = sweep.cases[sweep.ids[(variant.label, None)]]
        exact = all(s["chain"] == 0 and s["e_same_dtype"] == 0 for s in honest["trajectory"]["steps"])
        cells.append(("yes, bit-exact" if exact else "yes") if honest["status"] == "passed" else "NO")
        for perturbation in PERTURBATIONS:
            key = (variant.label, perturbation)
            if key not in sweep.ids:
                cells.append("n/a (draws no noise)")
                continue
            first = sweep.cases[sweep.ids[key]]["trajectory"].get("first_failure") or {}
            caught = sweep.cases[sweep.ids[key]]["status"] == "failed" and first.get("step") == at(variant)
            cells.append(f"yes, at step {first['step']} ({first['check']})" if caught else "NO")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
