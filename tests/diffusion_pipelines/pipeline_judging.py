"""Capture a tiny pipeline of :mod:`pipes_tiny` in this process (optionally perturbed), replay it, read the verdicts.

Perturbations of the engine: :func:`perturbed` (attention x1.01, guidance dropped, a wrong sigma, a wrong
update, each at a step of its own).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

import pipes_tiny


def capture(root: Path, name: str, *, perturb: Callable[[Any], Any] | None = None, **build: Any) -> Path:
    """Capture one call of pipeline ``name`` into ``root`` (committed); returns ``root``."""
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.core.writer import DatasetWriter

    pipe, kwargs = pipes_tiny.BUILDERS[name](**build)
    boot.install(CaptureConfig(into=str(root), strict=True, only=("rmsnorm_f32_h99991",)))
    try:
        with (perturb(pipe) if perturb else contextlib.nullcontext()):
            pipe(**kwargs)
    finally:
        boot.uninstall()
    DatasetWriter(root).commit()
    return root


def replay(root: Path, report: Path) -> dict:
    """Replay ``root`` (no reuse); the report as a dict."""
    import ikdata
    from ikdata.diffusion.settings import Settings
    from ikdata.replay.runner import replay as run

    return run(ikdata.open(root), reuse=False, report_path=report, diffusion=Settings()).report


def trajectory_case(report: dict) -> dict:
    [case] = [c for c in report["cases"] if c["definition"].startswith("trajectory:")]
    return case


def step_statuses(report: dict, kind: str) -> dict[int, set[str]]:
    """Step index -> statuses of that step's denoiser (or scheduler-step) workload cases."""
    case = trajectory_case(report)
    by_uuid = {c["uuid"]: c for c in report["cases"]}
    found: dict[int, set[str]] = {}
    for w in case["trajectory"]["workloads"]:
        if w.get("kind", "denoiser") == kind and w["uuid"] in by_uuid:
            found.setdefault(w["index"], set()).add(by_uuid[w["uuid"]]["status"])
    return found


def _denoiser(pipe: Any) -> Any:
    return pipe.transformer if getattr(pipe, "transformer", None) is not None else pipe.unet


@contextlib.contextmanager
def perturbed(pipe: Any, *, attention: int | None = None, guidance: int | None = None, sigma: int | None = None,
              update: int | None = None) -> Iterator[None]:
    """An engine wrong at the named steps: every attention output of the denoiser x1.01 (``attention``), the
    scheduler fed the conditional prediction alone (``guidance``: the second half of a CFG batch, or the first
    of two calls), a wrong noise level (``sigma``: the next sigma x0.9, or every alpha_cumprod x0.9 for DDIM and
    DDPM, restored before capture reads the schedule) and x_next x1.001 (``update``). Every step of a trajectory
    starts from its recorded x, so one engine can be wrong at several steps, each judged on its own.

    The scheduler class's step is replaced for the pipeline's scheduler only (LTX-2's audio scheduler, a copy,
    steps as before): outside capture's hook for the guidance, inside it for the scheduler's own errors."""
    import torch.nn.functional as F

    from ikdata.diffusion import capture

    sched = pipe.scheduler
    cls = type(sched)
    patched = cls.__dict__["step"]
    plain = getattr(patched, "__ikdata_original__", patched)
    index = [0]
    outputs: list[Any] = []
    inside: list[int] = []
    sdpa = F.scaled_dot_product_attention

    def scaled(*args: Any, **kwargs: Any) -> Any:
        out = sdpa(*args, **kwargs)
        return out * 1.01 if inside and index[0] == attention else out

    def wrong_step(self: Any, *args: Any, **kwargs: Any) -> Any:  # the scheduler's own arithmetic, under capture
        if self is not sched or index[0] not in (sigma, update):
            return plain(self, *args, **kwargs)
        undo = _wrong_noise_level(self) if index[0] == sigma else (lambda: None)
        try:
            result = plain(self, *args, **kwargs)
        finally:
            undo()
        if index[0] == update:
            (result[0] if isinstance(result, tuple) else result.prev_sample).mul_(1.001)
        return result

    captured = capture._step_wrapper(wrong_step)

    def step(self: Any, model_output: Any, *args: Any, **kwargs: Any) -> Any:
        if self is not sched:
            return patched(self, model_output, *args, **kwargs)
        try:
            if index[0] == guidance and outputs:
                cond = outputs[0].chunk(2)[1] if len(outputs) == 1 else outputs[0]
                if cond.shape[1] != model_output.shape[1]:
                    cond = cond[:, :model_output.shape[1]]  # a learned variance, dropped as the pipeline does
                model_output = cond.to(model_output.dtype)
            return captured(self, model_output, *args, **kwargs)
        finally:
            outputs.clear()
            index[0] += 1

    def after(module: Any, args: Any, output: Any) -> None:
        inside.clear()
        outputs.append(output[0] if isinstance(output, tuple) else output.sample)

    module = _denoiser(pipe)
    hooks = [module.register_forward_pre_hook(lambda *a: inside.append(1)), module.register_forward_hook(after)]
    cls.step = step
    F.scaled_dot_product_attention = scaled
    try:
        yield
    finally:
        cls.step = patched
        F.scaled_dot_product_attention = sdpa
        for hook in hooks:
            hook.remove()


def _wrong_noise_level(sched: Any) -> Any:
    import torch

    name = "sigmas" if torch.is_tensor(getattr(sched, "sigmas", None)) else "alphas_cumprod"
    kept = getattr(sched, name)
    wrong = kept.clone()
    if name == "sigmas":
        wrong[(sched.step_index or 0) + 1] *= 0.9
    else:
        wrong *= 0.9
    setattr(sched, name, wrong)
    return lambda: setattr(sched, name, kept)


def all_wrong(pipe: Any, *, guided: bool) -> Any:
    """Attention x1.01 at step 1, guidance dropped at step 2 (when the pipeline guides), a wrong sigma at step 3,
    a wrong update at step 4."""
    return perturbed(pipe, attention=1, guidance=2 if guided else None, sigma=3, update=4)
