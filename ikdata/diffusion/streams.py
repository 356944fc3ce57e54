"""Where a latent stream lives in a step's denoiser calls, and how guidance combined them: discovered.

A step of a trajectory stores, per stream, the ``x`` the scheduler stepped and the ``out`` it consumed;
the step's denoiser workloads store each forward call's inputs and raw outputs, in call order. Step
replay needs, per stream, which input of which call was fed ``x`` (as is, or as the scheduler's
``scale_model_input`` made it; duplicated for a CFG batch; cast to the denoiser's dtype), which output
predicts the stream, and how the pipeline combined the predictions into ``out``. All three are found
from the engine's own numbers (:func:`plan`, :func:`choose`), never from a table: an input is the
stream's when its shape is the latent's (batch times r) and, among those, its values are a candidate
made from ``x``; an output when its shape is ``out``'s (batch times r, or twice the channels: a
learned variance the pipeline drops); the guidance is the candidate of
:func:`ikdata.diffusion.pipelines.combinations` that rebuilds the engine's ``out`` from the engine's
raw outputs at most steps. A declared hint (:data:`ikdata.diffusion.pipelines.STREAMS`) settles a
denoiser whose streams have equal shapes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from ikdata.diffusion import pipelines as families

REBUILD_TOLERANCE = 1e-6  # the pipeline's own guidance rebuilds its out from its raw outputs to rounding
REBUILD_ULPS = 2.0  # ... in bf16/fp16: two units of the out's dtype (the guidance may round in another order)
_UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def rebuild_tolerance(dtype: torch.dtype) -> float:
    """How closely a combination must rebuild an ``out`` of ``dtype``: 1e-6 in float32, two units in bf16/fp16."""
    return max(REBUILD_TOLERANCE, REBUILD_ULPS * _UNIT.get(dtype, 0.0))


@dataclass(frozen=True)
class Plan:
    """One stream's place in a step's calls: inputs (call, name) fed its latents, built by ``transform``,
    and outputs (call, name) predicting it (``channels``: keep the first C channels, a learned variance)."""

    stream: str
    inputs: tuple[tuple[int, str], ...]
    outputs: tuple[tuple[int, str], ...]
    transform: str = "x"
    channels: int | None = None


def _fits(tensor: Any, like: torch.Tensor, *, doubled: bool = False) -> bool:
    if not torch.is_tensor(tensor) or tensor.dim() != like.dim() or like.shape[0] == 0:
        return False
    if tensor.shape[0] % like.shape[0] or tensor.shape[0] < like.shape[0]:
        return False
    if tuple(tensor.shape[1:]) == tuple(like.shape[1:]):
        return True
    return doubled and tensor.dim() >= 2 and tensor.shape[1] == 2 * like.shape[1] and \
        tuple(tensor.shape[2:]) == tuple(like.shape[2:])


def transforms(sched: Any, index: int, x: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The candidates for what a pipeline feeds its denoiser from the step's x: x itself, and the
    reference scheduler's ``scale_model_input`` of it at this step (Euler, Heun, DPM-2 divide by
    sqrt(sigma^2 + 1)) when that differs; for a two-stage scheduler (KDPM2 and its ancestral form, whose second
    stage scales by the interpolated sigma once the first stage left its ``sample``; Heun by ``dt``) also the
    second stage's scaling, as the pipeline calls it between the stages."""
    found = [("x", x)]
    if not (callable(getattr(sched, "scale_model_input", None)) and index < len(getattr(sched, "timesteps", []))):
        return found
    stages = [("scale_model_input", {})]
    for name in ("sample", "dt"):  # the attribute whose None means "first stage" (state_in_first_order)
        if name in vars(sched) and getattr(sched, name) is None and "state_in_first_order" in dir(type(sched)):
            stages.append(("scale_model_input-second-stage", {name: x if name == "sample" else 1.0}))
            break
    for label, state in stages:
        try:
            step_sched = copy.copy(sched)
            if hasattr(step_sched, "_step_index"):
                step_sched._step_index = index
            for name, value in state.items():
                setattr(step_sched, name, value)
            scaled = step_sched.scale_model_input(x, sched.timesteps[index])
            if torch.is_tensor(scaled) and not any(torch.equal(scaled, t) for _, t in found):
                found.append((label, scaled))
        except Exception:  # noqa: BLE001  a scheduler whose scaling needs more state: not a candidate
            pass
    return found


def rebuild(candidate: torch.Tensor, captured: torch.Tensor) -> torch.Tensor:
    """The candidate in the captured input's batch (CFG duplicates the latents) and dtype; for an input that
    concatenates conditioning channels after the latents' (a 9-channel inpainting UNet: latents, mask, masked
    image's latents), the candidate in the first channels and the captured conditioning after them."""
    ratio = captured.shape[0] // max(candidate.shape[0], 1)
    built = torch.cat([candidate] * ratio).to(captured.dtype) if ratio > 1 else candidate.to(captured.dtype)
    if built.dim() >= 2 and captured.dim() == built.dim() and captured.shape[1] > built.shape[1] and \
            built.shape[0] == captured.shape[0]:
        built = torch.cat([built, captured[:, built.shape[1]:]], dim=1)
    return built


def _concatenated(tensor: Any, like: torch.Tensor) -> bool:
    """Whether ``tensor`` is the latents' shape (batch times r) with more channels: conditioning concatenated."""
    return torch.is_tensor(tensor) and tensor.dim() == like.dim() and like.dim() >= 3 and like.shape[0] > 0 and \
        tensor.shape[0] % like.shape[0] == 0 and tensor.shape[0] >= like.shape[0] and \
        tensor.shape[1] > like.shape[1] and tuple(tensor.shape[2:]) == tuple(like.shape[2:])


def plan(calls: Sequence[tuple[Any, Mapping[str, Any], Mapping[str, Any]]], xs: Mapping[str, torch.Tensor],
         outs: Mapping[str, torch.Tensor], hints: Mapping[str, tuple[str, str]], sched: Any,
         index: int) -> tuple[dict[str, Plan], list[str]]:
    """Each stream's :class:`Plan` in this step's ``calls`` ((definition, inputs, engine raw outputs) in call
    order), and why a stream has none (its latents or its prediction are in no call)."""
    plans: dict[str, Plan] = {}
    missing: list[str] = []
    for stream, x in xs.items():
        hint = hints.get(stream)
        candidates = transforms(sched, index, x)
        inputs, outputs, chosen = [], [], None
        for c, (_, values, raw) in enumerate(calls):
            if hint is not None:
                names = [hint[0]] if torch.is_tensor(values.get(hint[0])) else []
            else:
                names = [n for n, v in values.items() if _fits(v, x)] or \
                    [n for n, v in values.items() if _concatenated(v, x)]  # inpainting: mask and image channels
            if len(names) > 1:  # several inputs of the latent's shape: the one holding a candidate made from x
                equal = [n for n in names if any(torch.equal(rebuild(t, values[n]), values[n]) for _, t in candidates)]
                names = equal[:1] or [n for n in names if "hidden_states" in n or n == "sample"][:1] or names[:1]
            if names:
                inputs.append((c, names[0]))
                if chosen is None:
                    captured = values[names[0]]
                    chosen = next((name for name, t in candidates if torch.equal(rebuild(t, captured), captured)), None)
            out = outs.get(stream)
            if hint is not None:
                found = [hint[1]] if torch.is_tensor(raw.get(hint[1])) else []
            elif out is not None:
                found = [n for n, v in raw.items() if _fits(v, out)] or \
                        [n for n, v in raw.items() if _fits(v, out, doubled=True)]
            else:
                found = []
            if found:
                outputs.append((c, found[0]))
        if not inputs or not outputs:
            missing.append(f"stream {stream!r}: {'no denoiser input has its latents shape' if not inputs else ''}"
                           f"{' and ' if not inputs and not outputs else ''}"
                           f"{'no denoiser output has its out shape' if not outputs else ''}")
            continue
        first = calls[outputs[0][0]][2][outputs[0][1]]
        out = outs[stream]
        channels = out.shape[1] if first.dim() >= 2 and first.shape[1] == 2 * out.shape[1] else None
        plans[stream] = Plan(stream, tuple(inputs), tuple(outputs), chosen or "x", channels)
    return plans, missing


def raws(p: Plan, outputs: Sequence[Mapping[str, torch.Tensor]]) -> list[torch.Tensor]:
    """The stream's predictions of each call (learned variance dropped), from one run's outputs per call."""
    found = [outputs[c][name] for c, name in p.outputs]
    return [t[:, :p.channels] for t in found] if p.channels else found


def joined(p: Plan, outputs: Sequence[Mapping[str, torch.Tensor]]) -> torch.Tensor:
    """Every call's prediction of the stream, flattened and joined in call order: what is judged when the guidance
    is not one replay rebuilds, so no call of the step goes unjudged (a second call's error counts as the first's)."""
    return torch.cat([t.flatten() for t in raws(p, outputs)])


def guidance_record(stream: str, chosen: families.Combination | None,
                    per_step: Sequence[tuple[int, list]]) -> dict[str, Any]:
    """What a stream's case says of its guidance: ``judged`` with the form (the combination that rebuilds the
    engine's ``out`` from its own denoiser outputs) and the steps it does not rebuild (judged by it anyway, so
    they fail on ``e``); or not judged, with why: no form ikdata rebuilds explains the recorded scheduler input
    at any step (APG, PAG, normalized or negated forms of other pipelines, STG...). Then every call's raw output
    is judged (``denoiser output``), and the guidance between them and the scheduler is declared unjudged, never
    passed silently."""
    if chosen is not None:
        off = [index for index, matches in per_step if all(m.name != chosen.name for m in matches)]
        return {"judged": True, "form": chosen.name, "steps_not_rebuilt": off}
    return {"judged": False, "form": None,
            "reason": f"guidance not judged (stream {stream!r}): the scheduler's input is not rebuilt from the step's "
                      f"denoiser outputs by any form ikdata models ({', '.join(families.FORMS)}) at any of "
                      f"{len(per_step)} step(s); every denoiser call's output is judged, the guidance combining them "
                      "is not"}


def not_judged(measures: Mapping[str, Any]) -> list[str]:
    """The declarations of what a trajectory's case did not judge (guidance per stream), for its reason and the
    report."""
    return [g["reason"] for _, g in sorted((measures.get("guidance") or {}).items())
            if isinstance(g, Mapping) and g.get("judged") is False and g.get("reason")]


def matching(p: Plan, engine: Sequence[Mapping[str, torch.Tensor]], out: torch.Tensor, x: torch.Tensor,
             sigma: torch.Tensor, settings: Mapping[str, Any]) -> list[families.Combination]:
    """The combinations that rebuild the engine's ``out`` from the engine's raw outputs (to rounding) best: an
    algebraically equal form (CFG on x0 at sigma 1) rounds differently and is not the pipeline's."""
    predictions = raws(p, engine)
    found = []
    for candidate in families.combinations(dict(settings), [t.shape[0] // max(x.shape[0], 1) for t in predictions]):
        try:
            got = candidate.apply(predictions, x.float(), sigma)
        except RuntimeError:
            continue
        error = _rel(got.to(out.dtype), out) if got.shape == out.shape else float("inf")
        if error <= rebuild_tolerance(out.dtype):
            found.append((error, candidate))
    best = min((e for e, _ in found), default=None)  # the pipeline's own arithmetic rebuilds it best (bit-exact)
    return [c for e, c in found if e == best]


def choose(per_step: Sequence[list[families.Combination]]) -> families.Combination | None:
    """The pipeline's combination: the one that rebuilds the engine's out at the most steps (the first listed
    on a tie), or None when none rebuilds any step (guidance replay does not know: raw outputs are judged)."""
    counts: dict[str, tuple[int, families.Combination]] = {}
    for found in per_step:
        for c in found:
            counts[c.name] = (counts.get(c.name, (0, c))[0] + 1, c)
    if not counts:
        return None
    return max(counts.values(), key=lambda item: item[0])[1]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    nb, d = float(b.norm()), float((a - b).norm())
    return d / nb if nb else (0.0 if d == 0 else float("inf"))


__all__ = ["Plan", "REBUILD_TOLERANCE", "choose", "guidance_record", "joined", "matching", "not_judged", "plan", "raws", "rebuild", "rebuild_tolerance",
           "transforms"]
