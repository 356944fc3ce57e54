"""Step replay of diffusion trajectories: every captured step judged against the reference's own floor.

For every trajectory of a dataset (:mod:`ikdata.diffusion.trajectories`) and every captured step and
stream, the reference denoiser runs on the trajectory's ``x`` (not on the reference's own previous
step) with the step's captured conditioning (its denoiser workload), once with the reference
attention and once with another exact attention (:mod:`ikdata.diffusion.floor`). Measured per step and
stream: ``e`` = ‖out_engine − out_ref‖/‖out_ref‖ (L2, float64), the cosine, the floor ``f`` =
‖out_alt − out_ref‖/‖out_ref‖, and the chain error ‖x_next_engine − update(x_engine, out_engine)‖ /
‖x_next_engine‖ with the reference scheduler (:mod:`ikdata.diffusion.step_measure`). Per trajectory:
continuity (x_next of step i is x of step i+1, the final latent the last x_next), the initial noise against
the recipe for the recorded seed, the schedule (another step count or other sigmas stop the trajectory at
step 0) (:mod:`ikdata.diffusion.trajectory_checks`), and the decode check
(:mod:`ikdata.diffusion.decode_check`) when a reference pipeline and a clip are named.

One trajectory is one case of the replay report (``definition`` ``trajectory:<pipeline class>``,
``uuid`` the trajectory id, measurements under ``trajectory``); the verdict is computed from the
measurements by :mod:`ikdata.diffusion.verdicts`, the rule import re-checks with. This module builds those
cases, reuses earlier ones (:mod:`ikdata.diffusion.trajectory_reuse`) and adds them to the report.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Mapping

import torch

from ikdata.core.errors import RecordError
from ikdata.core.records import TensorRef
from ikdata.core.status import Status
from ikdata.core.store import digest_from_path
from ikdata.diffusion import pipelines as families
from ikdata.diffusion import step_calls, step_measure
from ikdata.diffusion import streams as streams_mod
from ikdata.diffusion import trajectories as traj_mod
from ikdata.diffusion import trajectory_checks as checks
from ikdata.diffusion import trajectory_reuse
from ikdata.diffusion import verdicts as rules
from ikdata.diffusion.judge_context import Context, RunnerHooks
from ikdata.diffusion.settings import Settings
from ikdata.core.cases import Case
from ikdata.replay.api import Run

PREFIX = rules.TRAJECTORY_PREFIX  # a trajectory case's definition: trajectory:<pipeline class>
TRAJECTORY = rules.TRAJECTORY  # the key of a trajectory's measurements in its case (Case.records)


def is_trajectory_case(case: Mapping[str, Any]) -> bool:
    """Whether a report case is a trajectory's (its definition is ``trajectory:<pipeline class>``)."""
    return str(case.get("definition", "")).startswith(PREFIX)


def _identity(traj: traj_mod.Trajectory) -> dict[str, Any]:
    """What names a trajectory's case: its definition ``trajectory:<pipeline class>``, its uuid, no axes."""
    return {"definition": PREFIX + traj.record["pipeline"]["class"], "uuid": traj.id, "axes": {}}


def judge(ctx: Context, traj: traj_mod.Trajectory) -> Case:
    """The report case of one trajectory (errors recorded in the case, never raised)."""
    started = time.perf_counter()
    run = ctx.run
    identity = _identity(traj)
    case = Case(identity["definition"], identity["uuid"], Status.SKIPPED, axes=identity["axes"], device=run.device,
                torch=run.torch_version)
    workloads = _workloads(ctx, traj)
    try:
        measures = step_measure.measure(ctx, traj)
    except Exception as exc:  # noqa: BLE001 - one trajectory's failure is its case, replay goes on
        settings = ctx.settings
        located = isinstance(exc, RecordError) and exc.path == traj.source  # the message names file, line, pointer
        reason = str(exc) if located else f"{traj.source}:{traj.line}: {type(exc).__name__}: {exc}"
        return case.with_(status=Status.ERROR, reason=reason, error=traceback.format_exc(),
                          seconds=time.perf_counter() - started,
                          records={TRAJECTORY: {"k": settings.k, "eps": settings.eps, "steps": [],
                                                "workloads": workloads, "unjudged": _unjudged(traj.record),
                                                "attention": {"reference": settings.reference_attention,
                                                              "alt": settings.alt_attention}}})
    measures["workloads"] = workloads
    checks.blame_schedule(measures)  # a sigma off at some steps fails those steps' scheduler step, not every denoiser
    verdict = rules.decide(measures)
    measures.update(first_failure=verdict["first_failure"], worst=verdict["worst"], detectable=verdict["detectable"],
                    steps_passed=verdict["steps_passed"], steps_total=verdict["steps_total"])
    return case.with_(status=Status(verdict["status"]), records={TRAJECTORY: measures},
                      seconds=time.perf_counter() - started, reason=_reason(verdict, measures))


def _unjudged(record: Mapping[str, Any]) -> list[str]:
    """The helper models that ran and are not judged (``unjudged`` of the trajectory), as the case names them."""
    return [f"{u.get('class')} ({u.get('component')}) called {u.get('calls')} time(s), at step(s) "
            f"{', '.join(map(str, u.get('steps') or []))}" for u in record.get("unjudged") or [] if isinstance(u, dict)]


def _reason(verdict: Mapping[str, Any], measures: dict[str, Any]) -> str | None:
    """The case's reason: the verdict's failures, then what was declared not judged (guidance ikdata does not
    rebuild), so a pass of what was judged never reads as a pass of what was not."""
    declared = streams_mod.not_judged(measures)
    if declared:
        measures["not_judged"] = declared
    failures = verdict["reason"]
    if not declared:
        return failures or None
    return f"{failures}; {'; '.join(declared)}" if failures else f"passed what was judged; {'; '.join(declared)}"


def _workloads(ctx: Context, traj: traj_mod.Trajectory) -> list[dict[str, Any]]:
    """The denoiser and scheduler-step workloads the trajectory's steps name, with what their own cases need
    (digests by name): the trajectory decides them, a denoiser by its step's e, a scheduler step by its chain."""
    found = []
    for step in traj.record["steps"]:
        named = [(kind, uuid) for kind in ("denoiser", "scheduler_step")
                 for uuid in (step.get("workloads") or {}).get(kind) or []]
        for kind, uuid in named:
            row, receipt = ctx.rows.get(uuid), ctx.run.receipts.get(uuid)
            if row is None or receipt is None:
                continue
            definition = ctx.run.ds.definitions.get(row.definition)
            found.append({"index": step["index"], "uuid": uuid, "kind": kind, "stream": step["stream"],
                          "definition": row.definition, "axes": dict(row.axes),
                          "input_digests": {n: digest_from_path(d.path) for n, d in row.inputs.items()
                                            if isinstance(d, TensorRef)},
                          "expected_digests": {n: digest_from_path(d.path) for n, d in receipt.expected_output.items()
                                               if isinstance(d, TensorRef)},
                          **({"reference_digest": definition.reference_digest} if definition else {})})
    return found


def judge_all(run: Run, hooks: RunnerHooks, *, shard: Any = None, settings: Settings | None = None,
              progress: Callable[[Case], None] | None = None) -> list[Case]:
    """Judge every trajectory of ``run.ds`` not already in the report (resume), in this shard; add each
    case to the report as it is decided. Returns the new cases."""
    settings = (settings or Settings()).check()
    found = traj_mod.read_all(run.ds.root)
    trajectories = [t for t in found.trajectories if shard is None or shard.contains(t.id)]
    todo = [t for t in trajectories if run.recorded(t.id) is None]
    if not todo:
        return []
    ctx = Context(run, settings, hooks)
    cases = []
    for traj in todo:
        started = time.perf_counter()
        key = trajectory_reuse.reuse_key(ctx, traj)
        earlier = trajectory_reuse.reused(ctx, traj, key)
        if earlier is not None:
            case = Case.from_json({**_identity(traj), **earlier, "seconds": time.perf_counter() - started,
                                   "reused": True}, path="the reuse cache")
        else:
            case = _decode(ctx, traj, judge(ctx, traj)).with_(reuse_key=key)
            run.cache.remember(case.to_json())
        recorded = run.record(case)
        cases.append(recorded)
        for step_case in rules.steps_of(recorded):  # its step workloads' cases follow from it
            earlier = run.recorded(step_case.uuid)
            if earlier is not None:
                run.record(rules.keep_operator_facts(earlier, step_case))
        if progress:
            progress(recorded)
    return cases


def _decode(ctx: Context, traj: traj_mod.Trajectory, case: Case) -> Case:
    """Add the decode check to a judged case (when a reference pipeline and a clip are named) and decide again."""
    measures = case.record(TRAJECTORY)
    if not isinstance(measures, dict):
        return case
    measures = dict(measures)
    case = case.with_(records={**case.records, TRAJECTORY: measures})  # the decode check is added to this copy
    settings, record = ctx.settings, traj.record
    clip = settings.clip_for(traj.id)
    if not settings.pipeline or not clip:
        measures["decode"] = {"skipped": "name the reference pipeline (--pipeline FILE.py:FUNCTION) and the engine's "
                                         "clip (--clip [TRAJECTORY=]FILE) to check the decoded video"}
        return case
    if not record["final"]:
        measures["decode"] = {"skipped": f"the trajectory is {record['status']} and has no final latents to decode"}
        return case
    from ikdata.diffusion import decode_check

    started = time.perf_counter()
    where = f"{traj.source}:{traj.line}"
    try:
        pipe = ctx.pipeline()
        if pipe is None:
            raise RecordError(ctx.pipeline_error or "no reference pipeline", path=settings.pipeline)
        finals = {s: ctx.tensor(ref, where) for s, ref in record["final"].items()}
        scalars = {}
        last = [s for s in record["steps"] if s["stream"] == record["streams"][0]][-1:]
        if last:
            _, inputs, _ = step_calls.conditioning(ctx, last[0], where)
            scalars = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
        reference = families.decode(pipe, finals, scalars)
        measures["decode"] = decode_check.check(reference, clip, psnr_mean_db=settings.psnr_mean_db,
                                                psnr_worst_db=settings.psnr_worst_db,
                                                audio_snr_db=settings.audio_snr_db)
    except Exception as exc:  # noqa: BLE001 - recorded as the decode check's error
        measures["decode"] = {"clip": clip, "error": str(exc) if isinstance(exc, RecordError)
                              else f"{type(exc).__name__}: {exc}"}
    measures["decode"]["seconds"] = time.perf_counter() - started
    verdict = rules.decide(measures)
    return case.with_(status=Status(verdict["status"]), seconds=(case.seconds or 0.0) + measures["decode"]["seconds"],
                      reason=_reason(verdict, measures))


__all__ = ["PREFIX", "RunnerHooks", "is_trajectory_case", "judge", "judge_all"]
