"""The checks of one trajectory as a whole, before and besides its steps: its sizes against what the dataset
holds, continuity (x_next of step i is x of step i+1), the initial noise against the recipe for the seed, the
schedule against the reference scheduler's, and the fallback bound of a degenerate floor."""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from ikdata.core.errors import IkdataError, RecordError
from ikdata.core.records import TensorRef
from ikdata.core.store import digest_from_path
from ikdata.diffusion import noise as noise_mod
from ikdata.diffusion import noise_draws
from ikdata.diffusion import trajectories as traj_mod
from ikdata.diffusion.distance import rel
from ikdata.diffusion.judge_context import Context
from ikdata.diffusion.scheduler_classes import scheduler_class

FALLBACK_TOLERANCE = 1e-4  # a degenerate floor without a definition: the default table's float32 rtol


def check_limits(ctx: Context, traj: traj_mod.Trajectory) -> None:
    """Refuse a trajectory whose step counts, noise shapes or seed would size allocations beyond what the
    dataset holds (:func:`ikdata.diffusion.trajectories.limit_problems`, against the largest tensor it names,
    by its blob's header), or whose scheduler class is not a diffusers scheduler.

    Raises:
        RecordError: naming the trajectory's file, line and JSON pointer, and what was expected.
    """
    record = traj.record
    sizes = [_header_elements(ctx, path) for path in {path for _, path in traj.tensor_paths()}]
    largest = max((n for n in sizes if n is not None), default=0)  # none readable: no noise is drawn
    found = traj_mod.limit_problems(record, largest=largest)
    if found:
        pointer, message = found[0]
        more = f" (and {len(found) - 1} more: {', '.join(p for p, _ in found[1:])})" if len(found) > 1 else ""
        raise RecordError(message + more, path=traj.source, line=traj.line, pointer=pointer)
    scheduler_class(record["scheduler"]["class"], where=traj.source, line=traj.line)


def _header_elements(ctx: Context, path: str) -> int | None:
    """The elements of the tensor a blob holds by its header (checked against the file's size) or its
    pack's index; None when the path is refused or the blob cannot be read (its load names why)."""
    from ikdata.core.store import read_entries

    ds = ctx.run.ds
    if ds.paths.refusal(path) is not None:
        return None
    try:
        if (ds.root / path).is_file():
            shapes = [e.shape for e in read_entries(ds.root / path)]
        else:
            packed = ctx.run.store.packed_ref(TensorRef(path))
            shapes = [packed.shape] if packed is not None else []
    except (OSError, IkdataError):
        return None
    return max((math.prod(shape) for shape in shapes), default=None)


def fallback(ctx: Context, traj: traj_mod.Trajectory) -> tuple[float, str]:
    """The bound of a degenerate floor: the denoiser definition's rtol, else the default table's for its
    output dtype (as a relative L2 error)."""
    from ikdata.core import tolerances

    for step in traj.record["steps"]:
        for uuid in (step.get("workloads") or {}).get("denoiser") or []:
            row = ctx.rows.get(uuid)
            definition = ctx.run.ds.definitions.get(row.definition) if row else None
            if definition is None:
                continue
            own = (definition.tolerance or {}).get("rtol")
            if isinstance(own, (int, float)):
                return float(own), f"definition {definition.name} tolerance rtol"
            dtype = next(iter(definition.outputs.values())).dtype
            found = tolerances.table().get(dtype)
            if isinstance(found, dict) and "rtol" in found:
                return float(found["rtol"]), f"default tolerance table, {dtype} rtol"
    return FALLBACK_TOLERANCE, "float32 default"


def schedule_check(record: dict, reference: list, expected: int) -> dict[str, Any]:
    """The recorded schedule against the reference's: another length, or a sigma, next sigma or timestep at every
    step that is not the reference's (another schedule altogether), stops the trajectory at step 0; a mismatch
    at some steps only is listed (``mismatches``: step, stream, reason) and blamed on those steps' scheduler step
    (:func:`blame_schedule`), so the denoiser is still judged at every step."""
    ref_sigmas = [r[0] for r in reference]
    found = {"reference_steps": len(reference), "steps": expected, "reference_sigmas": ref_sigmas,
             "stopped": False, "reason": None, "mismatches": []}
    if len(reference) != expected:
        start = start_of(record)
        took = f"{expected - start} steps from index {start}" if start else f"{expected} steps"
        found.update(stopped=True, reason=f"the trajectory took {took}, the reference schedule has {len(reference)}")
        return found
    mismatches = []
    for step in record["steps"]:
        i = step["index"] + start_of(record)  # a partial schedule's step 0 is the reference's step start
        sigma, sigma_next, timestep = reference[i]
        for name, want in (("sigma", sigma), ("sigma_next", sigma_next), ("timestep", timestep)):
            got = step.get(name)
            if got is None or want is None:
                continue
            if not math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-7):
                at = f", schedule index {i}" if i != step["index"] else ""
                mismatches.append({"step": step["index"], "stream": step["stream"],
                                   "reason": f"step {step['index']} ({step['stream']}{at}): {name} {got!r}, the "
                                             f"reference schedule's is {want!r}"})
                break
    if mismatches and len(mismatches) == len(record["steps"]):  # another schedule altogether (a shift, a start)
        found.update(stopped=True, reason=mismatches[0]["reason"])
    elif mismatches:
        found.update(mismatches=mismatches, reason=mismatches[0]["reason"])
    return found


def blame_schedule(measures: dict[str, Any]) -> None:
    """Fail the scheduler step (the chain) of each measured step whose recorded sigma, next sigma or timestep is
    not the reference schedule's, with the reason; the denoiser of that step is judged by its own ``e``."""
    reasons = {(m["step"], m["stream"]): m["reason"] for m in (measures.get("schedule") or {}).get("mismatches") or []}
    for row in measures.get("steps") or []:
        reason = reasons.get((row.get("index"), row.get("stream")))
        if reason:
            earlier = row.get("chain_reason")
            row["chain_reason"] = f"schedule mismatch: {reason}" + (f"; {earlier}" if earlier else "")


def start_of(record: Mapping[str, Any]) -> int:
    """The schedule index a trajectory's first step took (``request.start``: img2img, inpainting; else 0)."""
    start = (record.get("request") or {}).get("start")
    return start if isinstance(start, int) and not isinstance(start, bool) and start >= 0 else 0


def continuity(ctx: Context, traj: traj_mod.Trajectory) -> list[dict[str, Any]]:
    """x_next of step i against x of step i+1, and the final latent against the last x_next, per stream."""
    record, found = traj.record, []
    where = f"{traj.source}:{traj.line}"
    callbacks = {(e.get("stream"), e.get("step")) for e in record.get("edits") or []
                 if isinstance(e, dict) and e.get("by") == "callback_on_step_end"}  # a cast is checked by value
    for stream in record["streams"]:
        steps = traj.steps_of(stream)
        pairs = [(s, n, "x_next vs the next step's x", n["x"]) for s, n in zip(steps, steps[1:])
                 if n["index"] == s["index"] + 1]
        final = record["final"].get(stream)
        if final is not None and steps:
            pairs.append((steps[-1], None, "the final latent vs the last x_next", final))
        for step, nxt, what, other in pairs:
            equal = digest_from_path(step["x_next"]["path"]) == digest_from_path(other["path"])
            item = {"stream": stream, "step": step["index"], "what": what, "equal": equal, "rel": 0.0 if equal else None}
            if not equal and nxt is not None and (stream, step["index"]) in callbacks:
                item["edited"] = f"edited by callback_on_step_end at step {step['index']}"
            if not equal:
                a, b = ctx.tensor(step["x_next"], where), ctx.tensor(other, where)
                item["rel"] = rel(b, a) if a.shape == b.shape else math.inf
                cast = next((d for d in _half_precisions(ctx, traj) if a.shape == b.shape and a.dtype != d and
                             torch.equal(a.to(d).to(b.dtype), b)), None)
                if cast is not None:  # a mixed-precision stepper (Mochi): float32 steps, latents kept in the model's
                    item.update(equal=True, cast=str(cast))  # dtype between them: one rounding to it, as it runs
            found.append(item)
    return found


def _half_precisions(ctx: Context, traj: traj_mod.Trajectory) -> list[torch.dtype]:
    """The half precisions (bf16, fp16) the denoiser's weights are in: a pipeline that steps its scheduler in
    float32 casts its latents to them between steps (Mochi), and is judged in the precision it runs. Empty when
    the model record cannot be read (its load names why) or the model is in float32."""
    from ikdata.diffusion import models

    summary = traj.record.get("model") or {}
    try:
        model = models.read_record(ctx.run.ds.root, summary["record"], paths=ctx.run.ds.paths, where=traj.source,
                                   line=traj.line, pointer="/model/record")
        names = {str(t.get("dtype")) for t in model.record["tensors"].values()}
    except (IkdataError, KeyError, TypeError, AttributeError):
        return []
    return [d for d in (torch.bfloat16, torch.float16) if str(d) in names or str(d).replace("torch.", "") in names]


def initial_noise(ctx: Context, traj: traj_mod.Trajectory, sched: Any = None) -> dict[str, Any]:
    """Each stream's first x against the recipe's noise for the recorded seed, compared as a multiset of
    values (the pipeline may pack the latents into another layout), as drawn or scaled by the reference
    scheduler's ``init_noise_sigma`` (Euler and the other sigma schedulers start from noise times it). In the
    pipeline's dtype: the float32 recipe cast to the first x's dtype (what ``torch.randn(..., dtype=bf16)``
    draws from the same generator), scaled in that dtype."""
    record = traj.record
    noise, where = record["noise"], f"{traj.source}:{traj.line}"
    seed = ctx.settings.seed if ctx.settings.seed is not None else noise.get("seed")
    shapes = {s["name"]: s["shape"] for s in noise.get("streams") or []}
    found: dict[str, Any] = {}
    if seed is None or not shapes:
        why = noise.get("reason") or "no seed or noise shapes recorded"
        return {s: {"equal": None, "note": f"cannot decide: {why}"} for s in record["streams"]}
    compared = [s for s in record["streams"] if s in shapes and traj.steps_of(s)[:1]
                and traj.steps_of(s)[0]["index"] == 0]
    if not compared:  # nothing is drawn when no step 0 is there to compare
        drawn = {}
    elif noise.get("draws"):  # another draw order (a VAE's draw first, a generator per image): repeated as recorded
        drawn = noise_draws.replay(noise, ctx.settings.seed)  # sized by check_limits
    else:
        drawn = noise_mod.draw(int(seed), [noise_mod.Stream(n, tuple(shape)) for n, shape in shapes.items()])
    sigma = getattr(sched, "init_noise_sigma", 1.0) if sched is not None else 1.0
    for stream in record["streams"]:
        first = traj.steps_of(stream)[:1]
        if not first or first[0]["index"] != 0 or stream not in drawn:
            found[stream] = {"equal": None, "note": "cannot decide: step 0 of the stream is not captured, or the "
                                                    "pipeline drew no noise from a generator for it"}
            continue
        first_x = ctx.tensor(first[0]["x"], where)
        init = (record.get("init") or {}).get(stream)
        if init is not None:  # a partial schedule: x is the image's latents noised to the start's timestep
            found[stream] = _noised(ctx, sched, first_x, ctx.tensor(init, where), drawn[stream], start_of(record))
            continue
        x = first_x.float().flatten().sort().values
        recipe = drawn[stream].to(first_x.dtype)  # a bf16 pipeline draws the recipe's numbers rounded: cast them
        candidates = [("sorted values", recipe)]
        for half in _half_precisions(ctx, traj) if first_x.dtype == torch.float32 else []:  # Mochi: drawn in float32,
            candidates.append((f"sorted values, cast to {half}", drawn[stream].to(half).to(first_x.dtype)))  # cast down
        if float(sigma) != 1.0:  # the pipeline scales the noise in its own dtype
            candidates.append(("sorted values, times init_noise_sigma", recipe * sigma))
        best: dict[str, Any] | None = None
        for method, tensor in candidates:
            want = tensor.float().flatten().sort().values
            if x.numel() != want.numel():
                best = best or {"equal": False, "rel": math.inf, "method": method,
                                "note": f"the first x has {x.numel()} values, the recipe's noise {want.numel()}"}
                continue
            equal = bool(torch.equal(x, want))
            item = {"equal": equal, "rel": 0.0 if equal else rel(x, want), "method": method,
                    **({"dtype": str(first_x.dtype)} if first_x.dtype != torch.float32 else {})}
            if best is None or equal or (not best["equal"] and item["rel"] < best["rel"]):
                best = item
            if equal:
                break
        found[stream] = best
    return found


def _noised(ctx: Context, sched: Any, first_x: torch.Tensor, init: torch.Tensor, drawn: torch.Tensor,
            start: int) -> dict[str, Any]:
    """The first x of a partial schedule against the reference scheduler's ``add_noise(init, the recipe's noise in
    the pipeline's dtype, timesteps[start])``, element by element (the layout is the pipeline's own)."""
    method = "add_noise(init, noise, timesteps[start])"
    if sched is None or not callable(getattr(sched, "add_noise", None)) or start >= len(sched.timesteps):
        return {"equal": None, "method": method, "note": "cannot decide: the reference scheduler has no add_noise or "
                                                         f"no timestep at index {start}"}
    if init.shape != first_x.shape or drawn.numel() != first_x.numel():
        return {"equal": False, "rel": math.inf, "method": method,
                "note": f"init {tuple(init.shape)}, noise {tuple(drawn.shape)} and the first x {tuple(first_x.shape)} "
                        "do not fit"}
    want = sched.add_noise(init, drawn.to(first_x.dtype).reshape(first_x.shape), sched.timesteps[start:start + 1])
    equal = bool(torch.equal(want.to(first_x.dtype), first_x))
    return {"equal": equal, "rel": 0.0 if equal else rel(first_x, want), "method": method, "start": start,
            **({"dtype": str(first_x.dtype)} if first_x.dtype != torch.float32 else {})}


__all__ = ["FALLBACK_TOLERANCE", "blame_schedule", "check_limits", "continuity", "fallback", "initial_noise",
           "schedule_check", "start_of"]
