"""The step measurements of one trajectory: every captured step and stream replayed by the reference denoiser
on the trajectory's ``x`` with the step's captured conditioning, once with the reference attention and once
with another exact one (the floor, :mod:`ikdata.diffusion.floor`), and where it can one precision higher;
combined by the pipeline's guidance; ``e``, the cosine, ``f`` and the chain error per step and stream."""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from ikdata.core.errors import RecordError
from ikdata.diffusion import denoiser_model, step_calls
from ikdata.diffusion import pipelines as families
from ikdata.diffusion import streams as streams_mod
from ikdata.diffusion import trajectories as traj_mod
from ikdata.diffusion import trajectory_checks as checks
from ikdata.diffusion import verdicts as rules
from ikdata.diffusion.distance import cos, rel
from ikdata.diffusion.judge_context import Context
from ikdata.diffusion.trajectory_checks import start_of


def measure(ctx: Context, traj: traj_mod.Trajectory) -> dict[str, Any]:
    """The measurements of one trajectory (its case's ``trajectory``): the whole-trajectory checks, then, unless
    the schedule stops it, every step and stream.

    Raises:
        RecordError: (and whatever the reference raises) a trajectory that cannot be replayed; its case says so.
    """
    settings, record, where = ctx.settings, traj.record, f"{traj.source}:{traj.line}"
    streams = list(record["streams"])
    model_summary = record.get("model") or {}
    measures: dict[str, Any] = {
        "trajectory": traj.id, "source": where, "pipeline": record["pipeline"]["class"],
        "scheduler": record["scheduler"]["class"], "streams": streams,
        "seed": settings.seed if settings.seed is not None else record["noise"].get("seed"),
        "recorded_seed": record["noise"].get("seed"),
        "model": model_summary.get("digest"), "attention": {"reference": settings.reference_attention,
                                                             "alt": settings.alt_attention},
        "k": settings.k, "eps": settings.eps, "fallback_tolerance": checks.FALLBACK_TOLERANCE,
        "steps": [], "continuity": [], "noise": {}, "schedule": {}, "decode": None, "level": None, "notes": []}
    checks.check_limits(ctx, traj)  # before a schedule, a noise draw or a scheduler is made from the record
    measures["continuity"] = checks.continuity(ctx, traj)
    measures["notes"] += [f"{item['edited']} ({item['stream']}): the next step is judged from the edited latent"
                          for item in measures["continuity"] if item.get("edited")]
    measures["unjudged"] = [f"{u.get('class')} ({u.get('component')}) called {u.get('calls')} time(s), at step(s) "
                            f"{', '.join(map(str, u.get('steps') or []))}"
                            for u in record.get("unjudged") or [] if isinstance(u, dict)]
    expected = int(record["request"]["steps"]) + start_of(record)  # the reference schedule's whole length
    first_x = next((s for s in record["steps"] if s["stream"] == streams[0]), None)
    seq_len = first_x["x"]["shape"][1] if first_x and len(first_x["x"].get("shape") or []) == 3 else None
    arguments = (record["scheduler"].get("set_timesteps") or {}).get(streams[0])
    sched = families.reference_schedule(record["scheduler"]["class"], dict(record["scheduler"]["config"]),
                                        int(record["request"].get("num_inference_steps") or expected), seq_len,
                                        arguments)
    measures["schedule_from"] = "set_timesteps(recorded arguments)" if arguments is not None else "formula"
    reference = families.schedule_values(sched, len(sched.timesteps))
    measures["noise"] = checks.initial_noise(ctx, traj, sched)
    measures["schedule"] = checks.schedule_check(record, reference, expected)
    measures["start"] = start_of(record)
    if measures["schedule"]["stopped"]:
        return measures
    io = families.STREAMS.get(model_summary.get("class") or "", {})  # declared hints; the rest is discovered
    model = denoiser_model.load(ctx, record, traj.source, traj.line)
    measures["fallback_tolerance"], measures["fallback_from"] = checks.fallback(ctx, traj)
    steps_by_index: dict[int, dict[str, dict]] = {}
    for step in record["steps"]:
        steps_by_index.setdefault(step["index"], {})[step["stream"]] = step
    chosen = _guidance(ctx, traj, steps_by_index, io, sched, reference, measures)
    for index in sorted(steps_by_index):
        started = time.perf_counter()
        rows = _step(ctx, traj, index, steps_by_index[index], io, model, sched, reference, measures, chosen)
        for row in rows:  # the step's whole time (loads, forwards, measures), shared by its streams
            row["seconds"] = time.perf_counter() - started
        measures["steps"] += rows
    return measures


def _sigma(reference: list, index: int) -> torch.Tensor:
    sigma_ref = reference[index][0] if index < len(reference) else None
    return torch.tensor(sigma_ref if sigma_ref is not None else 1.0, dtype=torch.float32)


def _plans(ctx: Context, traj: traj_mod.Trajectory, index: int, by_stream: dict[str, dict], io: dict,
           sched: Any) -> tuple[list, dict[str, torch.Tensor], dict[str, Any]]:
    """The step's calls, each stream's x, and each stream's place in the calls (:func:`streams.plan`).

    Raises:
        RecordError: a stream whose latents or prediction are in none of the step's denoiser calls.
    """
    where = f"{traj.source}:{traj.line}"
    main = next(s for s in traj.record["streams"] if s in by_stream)
    calls = step_calls.calls(ctx, by_stream[main], where)
    xs = {s: ctx.tensor(st["x"], where) for s, st in by_stream.items()}
    outs = {s: ctx.tensor(st["out"], where) for s, st in by_stream.items()}
    plans, missing = streams_mod.plan(calls, xs, outs, io, sched, index + start_of(traj.record))
    if missing and not plans:
        model_class = (traj.record.get("model") or {}).get("class")
        raise RecordError(f"step {index}: replay cannot find the streams in the calls of denoiser {model_class!r}: "
                          f"{'; '.join(missing)}", path=where)
    return calls, xs, plans


def _guidance(ctx: Context, traj: traj_mod.Trajectory, steps_by_index: dict[int, dict[str, dict]], io: dict,
              sched: Any, reference: list, measures: dict) -> dict[str, Any]:
    """Per stream, the pipeline's guidance: the combination that rebuilds the engine's out from the engine's own
    raw outputs at the most steps (:func:`streams.choose`); a step where it does not is judged by it anyway."""
    request, pipeline_class = traj.record["request"], traj.record["pipeline"]["class"]
    where = f"{traj.source}:{traj.line}"
    found: dict[str, list] = {}
    for index in sorted(steps_by_index):
        calls, xs, plans = _plans(ctx, traj, index, steps_by_index[index], io, sched)
        for stream, p in plans.items():
            out = ctx.tensor(steps_by_index[index][stream]["out"], where)
            found.setdefault(stream, []).append((index, streams_mod.matching(
                p, [raw for _, _, raw in calls], out, xs[stream], _sigma(reference, index + start_of(traj.record)),
                families.guidance(request, pipeline_class, stream))))
    chosen: dict[str, Any] = {}
    for stream, per_step in found.items():
        chosen[stream] = streams_mod.choose([m for _, m in per_step])
        measures.setdefault("guidance", {})[stream] = streams_mod.guidance_record(stream, chosen[stream], per_step)
        if chosen[stream] is None:
            continue
        for index, matches in per_step:
            if all(m.name != chosen[stream].name for m in matches):
                measures["notes"].append(f"step {index} ({stream}): the engine's out is not the pipeline's guidance "
                                         f"({chosen[stream].name}) of its own denoiser outputs")
    return chosen


def _step(ctx: Context, traj: traj_mod.Trajectory, index: int, by_stream: dict[str, dict], io: dict, model: dict,
          sched: Any, reference: list, measures: dict, chosen: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every stream of one step: the reference (and the floor's) forward of each of the step's denoiser calls on
    the trajectory's x, combined by the pipeline's guidance, against the engine's out; and the chain check."""
    settings, where = ctx.settings, f"{traj.source}:{traj.line}"
    calls, xs, plans = _plans(ctx, traj, index, by_stream, io, sched)
    pos = index + start_of(traj.record)  # the step's place in the reference schedule (a partial one starts later)
    fed = [dict(inputs) for _, inputs, _ in calls]
    for stream, p in plans.items():  # every step starts from the trajectory's x, as the pipeline fed it
        candidate = dict(streams_mod.transforms(sched, pos, xs[stream])).get(p.transform, xs[stream])
        for c, name in p.inputs:
            captured = fed[c][name]
            rebuilt = streams_mod.rebuild(candidate, captured)
            if rebuilt.shape != captured.shape:
                raise RecordError(f"step {index} ({stream}): the trajectory's x {tuple(xs[stream].shape)} does not "
                                  f"fit the denoiser input {name} {tuple(captured.shape)}", path=where)
            if not torch.equal(rebuilt, captured):
                measures["notes"].append(f"step {index} ({stream}): the denoiser was not fed the step's x (its {name} "
                                         "differs); replay uses the step's x")
            fed[c][name] = rebuilt
    raw_ref = [step_calls.forward(ctx, d, fed[c], model, settings.reference_attention)
               for c, (d, _, _) in enumerate(calls)]
    raw_alt = [step_calls.forward(ctx, d, fed[c], model, settings.alt_attention)
               for c, (d, _, _) in enumerate(calls)] if settings.alt_attention else None
    raw_hi, higher = _higher_forwards(ctx, calls, fed, model, measures)
    engine_raw = [raw for _, _, raw in calls]
    sigma_ref = reference[pos][0] if pos < len(reference) else None
    rows = []
    for stream, p in plans.items():
        step = by_stream[stream]
        x, out_eng = xs[stream], ctx.tensor(step["out"], where)
        x_next = ctx.tensor(step["x_next"], where)
        sigma = _sigma(reference, pos)
        combination = (chosen or {}).get(stream)
        if combination is not None:
            level = "step output"
            ref = combination.apply(streams_mod.raws(p, raw_ref), x, sigma)
            alt = combination.apply(streams_mod.raws(p, raw_alt), x, sigma) if raw_alt is not None else None
            eng = out_eng
        else:  # the guidance is not one replay reproduces (declared): judge the raw outputs of every call
            level = "denoiser output"
            ref, eng = streams_mod.joined(p, raw_ref), streams_mod.joined(p, engine_raw)
            alt = streams_mod.joined(p, raw_alt) if raw_alt is not None else None
        measures["level"] = measures["level"] or level
        if measures["level"] != level and "mixed levels" not in measures["notes"]:
            measures["notes"].append("mixed levels")
        chain, chain_reason = _chain(ctx, sched, pos, step, out_eng, x, x_next, where)
        if raw_hi is not None:  # e and f against the reference one precision higher; the engine dtype's rounding
            # of the same computation (and of the alt attention) is the floor, one rounding of the output the slack
            hi = combination.apply(streams_mod.raws(p, raw_hi), x.to(higher), sigma.to(higher)) \
                if combination is not None else streams_mod.joined(p, raw_hi)
            floors = [rel(ref, hi)] + ([rel(alt, hi)] if alt is not None else [])
            measured = {"e": rel(eng, hi), "cos": cos(eng, hi), "f": max(floors),
                        "slack": rel(hi.to(eng.dtype), hi), "e_same_dtype": rel(eng, ref),
                        "reference_dtype": str(higher), "norm_ref": float(hi.double().norm())}
        else:  # no higher precision (a float64 engine, or a model that does not run in it): the attention pair
            measured = {"e": rel(eng, ref), "cos": cos(eng, ref), "f": rel(alt, ref) if alt is not None else None,
                        "slack": 0.0, "reference_dtype": str(ref.dtype), "norm_ref": float(ref.double().norm())}
        rows.append({"index": index, "stream": stream, "dtype": str(eng.dtype), "level": level,
                     "combination": combination.name if combination else None, **measured,
                     "chain": chain, "chain_bound": rules.chain_bound(str(x.dtype)),
                     **({"chain_reason": chain_reason} if chain_reason else {}),
                     "sigma": step.get("sigma"), "sigma_ref": sigma_ref})
    return rows


def _higher_forwards(ctx: Context, calls: list, fed: list[dict], model: dict,
                     measures: dict) -> tuple[list[dict] | None, torch.dtype | None]:
    """The step's calls run by the reference one precision above the engine's (float64 for float32, float32 for
    bf16 and fp16): weights and floating inputs cast up. None (and a note, once) when there is none above or the
    model cannot run in it; e and f are then measured in the engine's dtype against the attention pair."""
    dtype = next((t.dtype for t in model["state_dict"].values() if t.is_floating_point()), None)
    higher = denoiser_model.HIGHER.get(dtype)
    key = (model["record"].get("digest"), str(higher))
    if higher is None or key in ctx.no_higher:
        return None, None
    try:
        up = denoiser_model.model_in(ctx, model, higher)
        raws = [step_calls.forward(ctx, d, {n: denoiser_model.cast_up(v, higher) for n, v in fed[c].items()}, up,
                                   ctx.settings.reference_attention) for c, (d, _, _) in enumerate(calls)]
    except Exception as exc:  # noqa: BLE001 - a model that does not run in the higher precision: judged as before
        ctx.no_higher.add(key)
        measures["notes"].append(f"the {higher} reference could not run ({type(exc).__name__}: {exc}); e and f are "
                                 "measured in the engine's dtype against the attention pair")
        return None, None
    return raws, higher


def _chain(ctx: Context, sched: Any, index: int, step: dict, out: torch.Tensor, x: torch.Tensor,
           x_next: torch.Tensor, where: str) -> tuple[float, str | None]:
    """The chain error of one step: the engine's x_next against the reference scheduler's step on the engine's
    x and out, with the state, arguments and noise the step recorded; and why it could not be computed."""
    try:
        chain_ref = families.update(sched, index, out, x, step, lambda ref: ctx.tensor(ref, where))
    except families.ReferenceStepError:  # ikdata's own failure: the case is an error, not the engine's wrong step
        raise
    except Exception as exc:  # noqa: BLE001 - the reference step refused the recorded step: the chain fails so
        return math.inf, str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
    if x_next.shape != chain_ref.shape:
        return math.inf, f"x_next has shape {tuple(x_next.shape)}, the reference step's {tuple(chain_ref.shape)}"
    return rel(x_next, chain_ref), None


__all__ = ["measure"]
