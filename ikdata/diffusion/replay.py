"""Step replay of diffusion trajectories: every captured step judged against the reference's own floor.

For every trajectory of a dataset (:mod:`ikdata.diffusion.trajectories`) and every captured step and
stream, the reference denoiser runs on the trajectory's ``x`` (not on the reference's own previous
step) with the step's captured conditioning (its denoiser workload), once with the reference
attention and once with another exact attention (:mod:`ikdata.diffusion.floor`). Measured per step and
stream: ``e`` = ‖out_engine − out_ref‖/‖out_ref‖ (L2, float64), the cosine, the floor ``f`` =
‖out_alt − out_ref‖/‖out_ref‖, and the chain error ‖x_next_engine − update(x_engine, out_engine)‖ /
‖x_next_engine‖ with the reference scheduler. Per trajectory: continuity (x_next of step i is x of
step i+1, the final latent the last x_next), the initial noise against the recipe for the recorded
seed, the schedule (another step count or other sigmas stop the trajectory at step 0), and the
decode check (:mod:`ikdata.diffusion.decode_check`) when a reference pipeline and a clip are named.

One trajectory is one case of the replay report (``definition`` ``trajectory:<pipeline class>``,
``uuid`` the trajectory id, measurements under ``trajectory``); the verdict is computed from the
measurements by :mod:`ikdata.diffusion.verdicts`, the rule import re-checks with.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from ikdata.diffusion import noise as noise_mod
from ikdata.diffusion import trajectories as traj_mod
from ikdata.diffusion import verdicts as rules
from ikdata.core.errors import IkdataError, RecordError, UsageError
from ikdata.core.records import Scalar, TensorRef
from ikdata.core.repeats import first_receipts
from ikdata.core.store import digest_from_path
from ikdata.diffusion import pipelines as families
from ikdata.diffusion import floor

PREFIX = "trajectory:"
DENOISER_TAG = "ikdata:needs-model"
CACHE_BYTES = 1 << 30  # verified tensors kept per run: conditioning repeats across steps, x is the last x_next
FALLBACK_TOLERANCE = 1e-4  # a degenerate floor without a definition: the default table's float32 rtol


@dataclass(frozen=True)
class Settings:
    """How trajectories are judged; recorded in every case."""

    reference_attention: str = floor.DEFAULT_REFERENCE
    alt_attention: str | None = floor.DEFAULT_ALT  # None: no floor (degenerate, fallback tolerance)
    k: float = rules.DEFAULT_K
    eps: float = rules.DEFAULT_EPS
    pipeline: str | None = None  # "FILE.py:FUNC" or "module:FUNC": the reference pipeline (decode check)
    clips: Mapping[str, str] = field(default_factory=dict)  # trajectory id prefix ("" = any) -> clip file
    psnr_mean_db: float = rules.PSNR_MEAN_DB
    psnr_worst_db: float = rules.PSNR_WORST_DB
    audio_snr_db: float = rules.AUDIO_SNR_DB
    seed: int | None = None  # the seed the reference expects (default: the one the trajectory records)

    def check(self) -> "Settings":
        """Raises UsageError on an unknown attention name or a negative bound."""
        try:
            floor.check_name(self.reference_attention)
            if self.alt_attention is not None:
                floor.check_name(self.alt_attention)
        except ValueError as exc:
            raise UsageError(f"--attention: {exc}") from None
        if self.alt_attention == self.reference_attention:
            raise UsageError(f"--floor-attention {self.alt_attention}: the floor needs another implementation than "
                             "the reference's")
        if self.k < 0 or self.eps < 0:
            raise UsageError("--floor-k and --floor-eps must be >= 0")
        if self.seed is not None:
            noise_mod.check_seed(self.seed, option="--seed")
        return self

    def clip_for(self, trajectory_id: str) -> str | None:
        hits = [p for prefix, p in self.clips.items() if prefix and trajectory_id.startswith(prefix)]
        return hits[0] if hits else self.clips.get("")


def is_trajectory_case(case: Mapping[str, Any]) -> bool:
    return str(case.get("definition", "")).startswith(PREFIX)


def is_denoiser(definition: Any) -> bool:
    """Denoiser workloads are judged per step by their trajectory (they need the model and the floor)."""
    record = getattr(definition, "record", None) or {}
    return DENOISER_TAG in (record.get("tags") or ())


def settle_step(run: Any, row: Any, case: dict[str, Any]) -> dict[str, Any]:
    """The diffusion family's settle (:mod:`ikdata.judging.families`): a denoiser step needs the model and
    the floor, so its case waits for its trajectory's."""
    return {**case, "status": "skipped",
            "reason": "a denoiser step: judged with its noise floor by its trajectory's case (trajectory:...)"}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64; 0 when both are zero."""
    a, b = a.double(), b.double()
    nb, d = float(b.norm()), float((a - b).norm())
    return d / nb if nb else (0.0 if d == 0 else math.inf)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float | None:
    a, b = a.double().flatten(), b.double().flatten()
    n = float(a.norm() * b.norm())
    return float((a * b).sum()) / n if n else None


# -- the reference pipeline (decode check): code the user names, so it runs only when named ----------------


def load_pipeline(spec: str) -> Any:
    """Call ``FILE.py:FUNC`` or ``module:FUNC`` (no arguments) and return the pipeline it builds.

    Raises:
        UsageError: a malformed spec, a missing file, module or function.
    """
    target, _, func = spec.rpartition(":")
    if not target or not func:
        raise UsageError(f"--pipeline {spec!r}: expected FILE.py:FUNCTION or module:FUNCTION")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UsageError(f"--pipeline {spec!r}: no such file {path}")
        module_spec = importlib.util.spec_from_file_location(f"ikdata_pipeline_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise UsageError(f"--pipeline {spec!r}: cannot import {target} ({exc})") from None
    builder = getattr(module, func, None)
    if not callable(builder):
        raise UsageError(f"--pipeline {spec!r}: {target} has no function {func}")
    return builder()


# -- one trajectory ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunnerHooks:
    """The replay runner's functions this judge uses (passed in: the runner imports this module, not back)."""

    load_tensor: Callable[..., tuple[torch.Tensor, str]]  # (run, TensorRef, where) -> (tensor, digest), verified
    reference: Callable[..., Any]  # (run, definition, row) -> the trusted reference's run, or None if refused
    name_outputs: Callable[..., dict]  # (definition, returned) -> {output name: value}


class _Context:
    """What judging one dataset's trajectories shares: the run (blobs, trust), rows, settings, pipeline."""

    def __init__(self, run: Any, settings: Settings, hooks: RunnerHooks) -> None:
        self.run = run
        self.hooks = hooks
        self.settings = settings
        self.rows = {row.uuid: row for row in run.ds.workloads()}
        self._pipeline: Any = None
        self.pipeline_error: str | None = None
        self._tensors: dict[str, torch.Tensor] = {}  # digest -> verified tensor (conditioning, x = last x_next)
        self._cached_bytes = 0
        self.models: dict[str, dict[str, Any]] = {}  # model digest -> {"record", "state_dict"}
        self.higher_models: dict[str, dict[str, Any]] = {}  # "digest@dtype" -> the model in a higher precision
        self.no_higher: set[tuple] = set()  # (model digest, dtype) that could not run in the higher precision

    def tensor(self, ref: Mapping[str, Any] | TensorRef, where: str) -> torch.Tensor:
        if not isinstance(ref, TensorRef):
            ref = TensorRef(ref["path"], ref.get("tensor_key", "tensor"))
        digest = digest_from_path(ref.path)
        if digest is not None and digest in self._tensors:
            return self._tensors[digest]  # verified once: the same content, by its name
        tensor, found = self.hooks.load_tensor(self.run, ref, where)
        if digest is not None and found == digest:
            size = tensor.numel() * tensor.element_size()
            if self._cached_bytes + size > CACHE_BYTES:
                self._tensors.clear()
                self._cached_bytes = 0
            self._tensors[digest] = tensor
            self._cached_bytes += size
        return tensor

    def pipeline(self) -> Any:
        if self._pipeline is None and self.pipeline_error is None and self.settings.pipeline:
            try:
                self._pipeline = load_pipeline(self.settings.pipeline)
            except UsageError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's code: its failure is the decode check's error
                self.pipeline_error = f"--pipeline {self.settings.pipeline} raised {type(exc).__name__}: {exc}"
        return self._pipeline


def _model(ctx: _Context, record: Mapping[str, Any], where: str | None = None,
           line: int | None = None) -> dict[str, Any]:
    """``{"record", "state_dict"}`` of the trajectory's denoiser: the stored tensors (verified), or the
    reference pipeline's denoiser when its weights have the recorded digest. The model record is read
    through the path rule (``where``:``line``, the trajectory, locates a refusal)."""
    from ikdata.diffusion import models

    summary = record.get("model")
    if not summary:
        raise RecordError("the trajectory names no denoiser model; it cannot be replayed step by step",
                          path=traj_mod.TRAJECTORIES_DIR)
    if summary["digest"] in ctx.models:
        return ctx.models[summary["digest"]]
    model = models.read_record(ctx.run.ds.root, summary["record"], paths=ctx.run.ds.paths, where=where, line=line,
                               pointer="/model/record")
    if model.digest != summary["digest"]:
        raise RecordError(f"model record {summary['record']} is model {model.digest[:12]}, the trajectory names "
                          f"{summary['digest'][:12]}; expected the record of the trajectory's model", path=where,
                          line=line, pointer="/model/record")
    if model.stored:
        state = {n: ctx.hooks.load_tensor(ctx.run, TensorRef(p), model.source)[0]
                 for n, p in model.blob_paths().items()}
        models.check_buildable(model, state)  # class, shapes and config checked before anything is built
        ctx.models[model.digest] = {"record": dict(model.record), "state_dict": state}
        return ctx.models[model.digest]
    pipe = ctx.pipeline()
    module = getattr(pipe, summary.get("component") or "transformer", None) if pipe is not None else None
    if module is None:
        raise RecordError(f"model {model.digest[:12]} is not stored in the dataset; name the reference pipeline "
                          "that holds it with --pipeline FILE.py:FUNCTION", path=model.source)
    from ikdata.core.store import raw_tensor

    state = dict(module.state_dict())
    digest = models.model_digest({n: raw_tensor(t).digest for n, t in state.items()})
    if digest != model.digest:
        raise RecordError(f"the --pipeline denoiser has weights {digest[:12]}, the trajectory's are "
                          f"{model.digest[:12]}: other weights, refused", path=model.source)
    models.check_buildable(model, state)
    return {"record": dict(model.record), "state_dict": state}


def judge(ctx: _Context, traj: traj_mod.Trajectory) -> dict[str, Any]:
    """The report case of one trajectory (errors recorded in the case, never raised)."""
    started = time.perf_counter()
    record = traj.record
    run = ctx.run
    case: dict[str, Any] = {"definition": PREFIX + record["pipeline"]["class"], "uuid": traj.id, "axes": {},
                            "device": run.device, "torch": run.torch_version}
    workloads = _workloads(ctx, traj)
    try:
        measures = _measure(ctx, traj)
    except Exception as exc:  # noqa: BLE001 - one trajectory's failure is its case, replay goes on
        settings = ctx.settings
        located = isinstance(exc, RecordError) and exc.path == traj.source  # the message names file, line, pointer
        reason = str(exc) if located else f"{traj.source}:{traj.line}: {type(exc).__name__}: {exc}"
        case.update(status="error", reason=reason,
                    error=traceback.format_exc(), seconds=time.perf_counter() - started,
                    trajectory={"k": settings.k, "eps": settings.eps, "steps": [], "workloads": workloads,
                                "attention": {"reference": settings.reference_attention,
                                              "alt": settings.alt_attention}})
        return case
    measures["workloads"] = workloads
    verdict = rules.decide(measures)
    measures.update(first_failure=verdict["first_failure"], worst=verdict["worst"], detectable=verdict["detectable"],
                    steps_passed=verdict["steps_passed"], steps_total=verdict["steps_total"])
    case.update(status=verdict["status"], trajectory=measures, seconds=time.perf_counter() - started)
    if verdict["reason"]:
        case["reason"] = verdict["reason"]
    return case


def _workloads(ctx: _Context, traj: traj_mod.Trajectory) -> list[dict[str, Any]]:
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


def _measure(ctx: _Context, traj: traj_mod.Trajectory) -> dict[str, Any]:
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
        "k": settings.k, "eps": settings.eps, "fallback_tolerance": FALLBACK_TOLERANCE,
        "steps": [], "continuity": [], "noise": {}, "schedule": {}, "decode": None, "level": None, "notes": []}
    _check_limits(ctx, traj)  # before a schedule, a noise draw or a scheduler is made from the record
    measures["continuity"] = _continuity(ctx, traj)
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
    measures["noise"] = _noise(ctx, traj, sched)
    measures["schedule"] = _schedule_check(record, reference, expected)
    measures["start"] = start_of(record)
    if measures["schedule"]["stopped"]:
        return measures
    io = families.STREAMS.get(model_summary.get("class") or "", {})  # declared hints; the rest is discovered
    model = _model(ctx, record, traj.source, traj.line)
    measures["fallback_tolerance"], measures["fallback_from"] = _fallback(ctx, traj)
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


def scheduler_names() -> frozenset[str]:
    """The scheduler class names diffusers exports (its ``diffusers.schedulers`` module), read without
    importing them."""
    import diffusers.schedulers as module

    structure = getattr(module, "_import_structure", None)
    names = {n for values in structure.values() for n in values} if isinstance(structure, dict) else set(dir(module))
    return frozenset(n for n in names if n.endswith("Scheduler") and not n.startswith(("Flax", "_")))


def scheduler_class(name: object, *, where: str | None = None, line: int | None = None) -> type:
    """The diffusers scheduler class a record names: one diffusers exports that subclasses SchedulerMixin;
    no other class is instantiated from a record.

    Raises:
        RecordError: any other name (a model, a pipeline, anything else), located at ``/scheduler/class``.
    """
    import diffusers.schedulers as module

    found = getattr(module, name, None) if isinstance(name, str) and name in scheduler_names() else None
    base = module.SchedulerMixin
    if not (isinstance(found, type) and issubclass(found, base) and found is not base):
        raise RecordError(f"scheduler class {name!r} is not a scheduler diffusers exports; expected a subclass of "
                          "SchedulerMixin from diffusers.schedulers (e.g. FlowMatchEulerDiscreteScheduler, "
                          "DDIMScheduler); replay instantiates no other class a record names",
                          path=where, line=line, pointer="/scheduler/class")
    return found


def _check_limits(ctx: _Context, traj: traj_mod.Trajectory) -> None:
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


def _header_elements(ctx: _Context, path: str) -> int | None:
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


def _fallback(ctx: _Context, traj: traj_mod.Trajectory) -> tuple[float, str]:
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


def _schedule_check(record: dict, reference: list, expected: int) -> dict[str, Any]:
    ref_sigmas = [r[0] for r in reference]
    found = {"reference_steps": len(reference), "steps": expected, "reference_sigmas": ref_sigmas,
             "stopped": False, "reason": None}
    if len(reference) != expected:
        start = start_of(record)
        took = f"{expected - start} steps from index {start}" if start else f"{expected} steps"
        found.update(stopped=True, reason=f"the trajectory took {took}, the reference schedule has {len(reference)}")
        return found
    for step in record["steps"]:
        i = step["index"] + start_of(record)  # a partial schedule's step 0 is the reference's step start
        sigma, sigma_next, timestep = reference[i]
        for name, want in (("sigma", sigma), ("sigma_next", sigma_next), ("timestep", timestep)):
            got = step.get(name)
            if got is None or want is None:
                continue
            if not math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-7):
                at = f", schedule index {i}" if i != step["index"] else ""
                found.update(stopped=True, reason=f"step {step['index']} ({step['stream']}{at}): {name} {got!r}, the "
                                                  f"reference schedule's is {want!r}")
                return found
    return found


def start_of(record: Mapping[str, Any]) -> int:
    """The schedule index a trajectory's first step took (``request.start``: img2img, inpainting; else 0)."""
    start = (record.get("request") or {}).get("start")
    return start if isinstance(start, int) and not isinstance(start, bool) and start >= 0 else 0


def _continuity(ctx: _Context, traj: traj_mod.Trajectory) -> list[dict[str, Any]]:
    """x_next of step i against x of step i+1, and the final latent against the last x_next, per stream."""
    record, found = traj.record, []
    where = f"{traj.source}:{traj.line}"
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
            if not equal and nxt is not None and (stream, step["index"]) in traj_mod.edited(record):
                item["edited"] = f"edited by callback_on_step_end at step {step['index']}"
            if not equal:
                a, b = ctx.tensor(step["x_next"], where), ctx.tensor(other, where)
                item["rel"] = _rel(b, a) if a.shape == b.shape else math.inf
            found.append(item)
    return found


def _noise(ctx: _Context, traj: traj_mod.Trajectory, sched: Any = None) -> dict[str, Any]:
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
    drawn = noise_mod.draw(int(seed), [noise_mod.Stream(n, tuple(shape)) for n, shape in shapes.items()]) \
        if compared else {}  # sized by _check_limits; nothing is drawn when no step 0 is there to compare
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
            item = {"equal": equal, "rel": 0.0 if equal else _rel(x, want), "method": method,
                    **({"dtype": str(first_x.dtype)} if first_x.dtype != torch.float32 else {})}
            if best is None or equal or (not best["equal"] and item["rel"] < best["rel"]):
                best = item
            if equal:
                break
        found[stream] = best
    return found


def _noised(ctx: _Context, sched: Any, first_x: torch.Tensor, init: torch.Tensor, drawn: torch.Tensor,
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
    return {"equal": equal, "rel": 0.0 if equal else _rel(first_x, want), "method": method, "start": start,
            **({"dtype": str(first_x.dtype)} if first_x.dtype != torch.float32 else {})}


def _conditioning(ctx: _Context, step: dict, where: str) -> tuple[Any, dict, dict]:
    """(definition, inputs, engine raw outputs) of a step's first denoiser workload."""
    return _calls(ctx, step, where)[0]


def _calls(ctx: _Context, step: dict, where: str) -> list[tuple[Any, dict, dict]]:
    """(definition, inputs, engine raw outputs) of each denoiser workload of a step, in call order."""
    uuids = (step.get("workloads") or {}).get("denoiser") or []
    if not uuids:
        why = (step.get("skipped") or {}).get("denoiser", "the step names no denoiser workload")
        raise RecordError(f"step {step['index']}: no denoiser workload to replay ({why})", path=where)
    found = []
    for uuid in uuids:
        row = ctx.rows.get(uuid)
        receipt = ctx.run.receipts.get(uuid)
        if row is None or receipt is None:
            raise RecordError(f"step {step['index']}: denoiser workload {uuid} has no row or receipt", path=where)
        definition = ctx.run.ds.definitions.get(row.definition)
        if definition is None:
            raise RecordError(f"step {step['index']}: no definition {row.definition!r}", path=where)
        found.append((definition, _values(ctx, definition.inputs, row.inputs, f"{row.source}:{row.line}"),
                      _values(ctx, definition.outputs, receipt.expected_output, f"{receipt.source}:{receipt.line}")))
    return found


def _values(ctx: _Context, specs: Mapping[str, Any], descriptors: Mapping[str, Any], where: str) -> dict[str, Any]:
    missing = [n for n in specs if n not in descriptors]
    if missing:
        raise RecordError(f"no descriptor for {missing}; the definition needs {list(specs)}", path=where)
    values = {}
    for name in specs:
        descriptor = descriptors[name]
        if isinstance(descriptor, TensorRef):
            values[name] = ctx.tensor(descriptor, where)
        elif isinstance(descriptor, Scalar):
            values[name] = descriptor.value
        else:
            raise RecordError(f"{name!r} is a 'random' input, which has no data to replay", path=where)
    return values


def _forward(ctx: _Context, definition: Any, inputs: dict, model: dict, attention: str) -> dict[str, torch.Tensor]:
    """The reference denoiser's raw outputs on ``inputs``: a discovered call (a definition ikdata generated) by
    ikdata's own forward of the recorded Diffusers model, a shipped family by its trusted reference."""
    from ikdata.diffusion import discovery

    if discovery.is_generic(definition):
        problem = discovery.check_generic(definition)
        if problem:
            raise RecordError(problem, path=f"definitions/{definition.op_type}/{definition.name}.json")
        try:
            with floor.attention(attention):
                return discovery.forward(definition, inputs, model)
        except ValueError as exc:  # a model class diffusers does not export
            raise RecordError(str(exc), path=f"definitions/{definition.op_type}/{definition.name}.json") from None
    reference = ctx.hooks.reference(ctx.run, definition, None)
    if reference is None:
        raise RecordError(f"the denoiser definition {definition.name} is not trusted; trust it to replay steps",
                          path=f"definitions/{definition.op_type}/{definition.name}.json")
    with floor.attention(attention), torch.inference_mode():
        returned = reference(*[inputs[n] for n in definition.inputs], model=model)
    return ctx.hooks.name_outputs(definition, returned)


def _sigma(reference: list, index: int) -> torch.Tensor:
    sigma_ref = reference[index][0] if index < len(reference) else None
    return torch.tensor(sigma_ref if sigma_ref is not None else 1.0, dtype=torch.float32)


def _plans(ctx: _Context, traj: traj_mod.Trajectory, index: int, by_stream: dict[str, dict], io: dict,
           sched: Any) -> tuple[list, dict[str, torch.Tensor], dict[str, Any]]:
    """The step's calls, each stream's x, and each stream's place in the calls (:func:`streams.plan`).

    Raises:
        RecordError: a stream whose latents or prediction are in none of the step's denoiser calls.
    """
    from ikdata.diffusion import streams as streams_mod

    where = f"{traj.source}:{traj.line}"
    main = next(s for s in traj.record["streams"] if s in by_stream)
    calls = _calls(ctx, by_stream[main], where)
    xs = {s: ctx.tensor(st["x"], where) for s, st in by_stream.items()}
    outs = {s: ctx.tensor(st["out"], where) for s, st in by_stream.items()}
    plans, missing = streams_mod.plan(calls, xs, outs, io, sched, index + start_of(traj.record))
    if missing and not plans:
        model_class = (traj.record.get("model") or {}).get("class")
        raise RecordError(f"step {index}: replay cannot find the streams in the calls of denoiser {model_class!r}: "
                          f"{'; '.join(missing)}", path=where)
    return calls, xs, plans


def _guidance(ctx: _Context, traj: traj_mod.Trajectory, steps_by_index: dict[int, dict[str, dict]], io: dict,
              sched: Any, reference: list, measures: dict) -> dict[str, Any]:
    """Per stream, the pipeline's guidance: the combination that rebuilds the engine's out from the engine's own
    raw outputs at the most steps (:func:`streams.choose`); a step where it does not is judged by it anyway."""
    from ikdata.diffusion import streams as streams_mod

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
        if chosen[stream] is None:
            continue
        for index, matches in per_step:
            if all(m.name != chosen[stream].name for m in matches):
                measures["notes"].append(f"step {index} ({stream}): the engine's out is not the pipeline's guidance "
                                         f"({chosen[stream].name}) of its own denoiser outputs")
    return chosen


def _step(ctx: _Context, traj: traj_mod.Trajectory, index: int, by_stream: dict[str, dict], io: dict, model: dict,
          sched: Any, reference: list, measures: dict, chosen: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every stream of one step: the reference (and the floor's) forward of each of the step's denoiser calls on
    the trajectory's x, combined by the pipeline's guidance, against the engine's out; and the chain check."""
    from ikdata.diffusion import streams as streams_mod

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
    raw_ref = [_forward(ctx, d, fed[c], model, settings.reference_attention) for c, (d, _, _) in enumerate(calls)]
    raw_alt = [_forward(ctx, d, fed[c], model, settings.alt_attention) for c, (d, _, _) in enumerate(calls)] \
        if settings.alt_attention else None
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
        else:  # the guidance is not one replay reproduces: judge the raw forward outputs (of the first call)
            level = "denoiser output"
            ref, eng = streams_mod.raws(p, raw_ref)[0], streams_mod.raws(p, engine_raw)[0]
            alt = streams_mod.raws(p, raw_alt)[0] if raw_alt is not None else None
        measures["level"] = measures["level"] or level
        if measures["level"] != level and "mixed levels" not in measures["notes"]:
            measures["notes"].append("mixed levels")
        chain, chain_reason = _chain(ctx, sched, pos, step, out_eng, x, x_next, where)
        if raw_hi is not None:  # e and f against the reference one precision higher; the engine dtype's rounding
            # of the same computation (and of the alt attention) is the floor, one rounding of the output the slack
            hi = combination.apply(streams_mod.raws(p, raw_hi), x.to(higher), sigma.to(higher)) \
                if combination is not None else streams_mod.raws(p, raw_hi)[0]
            floors = [_rel(ref, hi)] + ([_rel(alt, hi)] if alt is not None else [])
            measured = {"e": _rel(eng, hi), "cos": _cos(eng, hi), "f": max(floors),
                        "slack": _rel(hi.to(eng.dtype), hi), "e_same_dtype": _rel(eng, ref),
                        "reference_dtype": str(higher), "norm_ref": float(hi.double().norm())}
        else:  # no higher precision (a float64 engine, or a model that does not run in it): the attention pair
            measured = {"e": _rel(eng, ref), "cos": _cos(eng, ref), "f": _rel(alt, ref) if alt is not None else None,
                        "slack": 0.0, "reference_dtype": str(ref.dtype), "norm_ref": float(ref.double().norm())}
        rows.append({"index": index, "stream": stream, "dtype": str(eng.dtype), "level": level,
                     "combination": combination.name if combination else None, **measured,
                     "chain": chain, "chain_bound": rules.chain_bound(str(x.dtype)),
                     **({"chain_reason": chain_reason} if chain_reason else {}),
                     "sigma": step.get("sigma"), "sigma_ref": sigma_ref})
    return rows


HIGHER = {torch.float32: torch.float64, torch.bfloat16: torch.float32, torch.float16: torch.float32}


def _higher_forwards(ctx: _Context, calls: list, fed: list[dict], model: dict,
                     measures: dict) -> tuple[list[dict] | None, torch.dtype | None]:
    """The step's calls run by the reference one precision above the engine's (float64 for float32, float32 for
    bf16 and fp16): weights and floating inputs cast up. None (and a note, once) when there is none above or the
    model cannot run in it; e and f are then measured in the engine's dtype against the attention pair."""
    dtype = next((t.dtype for t in model["state_dict"].values() if t.is_floating_point()), None)
    higher = HIGHER.get(dtype)
    key = (model["record"].get("digest"), str(higher))
    if higher is None or key in ctx.no_higher:
        return None, None
    try:
        up = _model_in(ctx, model, higher)
        raws = [_forward(ctx, d, {n: _cast_up(v, higher) for n, v in fed[c].items()}, up,
                         ctx.settings.reference_attention) for c, (d, _, _) in enumerate(calls)]
    except Exception as exc:  # noqa: BLE001 - a model that does not run in the higher precision: judged as before
        ctx.no_higher.add(key)
        measures["notes"].append(f"the {higher} reference could not run ({type(exc).__name__}: {exc}); e and f are "
                                 "measured in the engine's dtype against the attention pair")
        return None, None
    return raws, higher


def _cast_up(value: Any, dtype: torch.dtype) -> Any:
    return value.to(dtype) if torch.is_tensor(value) and value.is_floating_point() else value


def _model_in(ctx: _Context, model: dict, dtype: torch.dtype) -> dict[str, Any]:
    """``model`` with its floating weights in ``dtype`` (built once per model and dtype: its digest names both)."""
    record = model["record"]
    key = f"{record.get('digest')}@{dtype}"
    found = ctx.higher_models.get(key)
    if found is None:
        state = {n: _cast_up(t, dtype) for n, t in model["state_dict"].items()}
        found = ctx.higher_models[key] = {"record": {**record, "digest": key}, "state_dict": state}
    return found


def _chain(ctx: _Context, sched: Any, index: int, step: dict, out: torch.Tensor, x: torch.Tensor,
           x_next: torch.Tensor, where: str) -> tuple[float, str | None]:
    """The chain error of one step: the engine's x_next against the reference scheduler's step on the engine's
    x and out, with the state, arguments and noise the step recorded; and why it could not be computed."""
    try:
        chain_ref = families.update(sched, index, out, x, step, lambda ref: ctx.tensor(ref, where))
    except Exception as exc:  # noqa: BLE001 - the reference step refused the recorded step: the chain fails so
        return math.inf, str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
    if x_next.shape != chain_ref.shape:
        return math.inf, f"x_next has shape {tuple(x_next.shape)}, the reference step's {tuple(chain_ref.shape)}"
    return _rel(x_next, chain_ref), None


# -- the runner's post-pass ----------------------------------------------------------------------------------


def finish(run: Any, *, shard: Any = None, settings: Settings | None = None) -> None:
    """The diffusion family's post-pass (:mod:`ikdata.judging.families`): one case per trajectory."""
    if not traj_mod.files(run.ds.root):
        return
    from ikdata.replay import runner

    try:
        judge_all(run, RunnerHooks(runner._load_tensor, runner._reference, runner._name_outputs), shard=shard,
                  settings=settings)
    finally:
        run.cache.flush()


def blob_paths(ds: Any) -> list[str]:
    """Every blob judging the trajectories of ``ds`` may load: the trajectories' tensors, the denoiser
    workloads' inputs and expected outputs, stored models. What a replay from a URL fetches first."""
    from ikdata.diffusion import models

    if not traj_mod.files(ds.root):
        return []
    found = traj_mod.read_all(ds.root)
    paths = {path for t in found.trajectories for _, path in t.tensor_paths()}
    receipts = first_receipts(ds.receipts())[0]
    for name, definition in ds.definitions.items():
        if not is_denoiser(definition):
            continue
        for row in ds.workloads(name):
            receipt = receipts.get(row.uuid)
            refs = list(row.inputs.values()) + (list(receipt.expected_output.values()) if receipt else [])
            paths |= {ref.path for ref in refs if isinstance(ref, TensorRef)}
    for traj in found.trajectories:
        summary = traj.record.get("model") or {}
        try:
            model = models.read_record(ds.root, summary["record"], paths=ds.paths) if summary.get("record") else None
        except (RecordError, KeyError, TypeError):
            continue  # judging names the problem in the trajectory's case
        if model is not None and model.stored:
            paths |= set(model.blob_paths().values())
    return sorted(paths)


def judge_all(run: Any, hooks: RunnerHooks, *, shard: Any = None, settings: Settings | None = None,
              progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Judge every trajectory of ``run.ds`` not already in the report (resume), in this shard; add each
    case to the report as it is decided. Returns the new cases."""
    settings = (settings or Settings()).check()
    found = traj_mod.read_all(run.ds.root)
    trajectories = [t for t in found.trajectories if shard is None or shard.contains(t.id)]
    todo = [t for t in trajectories if t.id not in run.out.by_uuid]
    if not todo:
        return []
    ctx = _Context(run, settings, hooks)
    cases = []
    for traj in todo:
        started = time.perf_counter()
        key = reuse_key(ctx, traj)
        earlier = _reused(ctx, traj, key)
        if earlier is not None:
            case = {**earlier, "seconds": time.perf_counter() - started, "reused": True}
        else:
            case = judge(ctx, traj)
            case = _decode(ctx, traj, case)
            if key is not None:
                case["reuse_key"] = key
            run.cache.remember(case)
        run.out.add(case)
        cases.append(case)
        for step_case in rules.step_cases(case):  # its step workloads' cases follow from it
            if step_case["uuid"] in run.out.by_uuid:
                run.out.add(rules.with_operator_facts(run.out.by_uuid[step_case["uuid"]], step_case))
        if progress:
            progress(case)
    return cases


def reuse_key(ctx: _Context, traj: traj_mod.Trajectory) -> str | None:
    """The digest that makes two trajectory judgements the same: the trajectory (its id covers every blob's
    digest), the model, the denoiser definitions' references, the settings, the clip's and the pipeline
    builder's bytes, the device kind, torch and ikdata versions. None when a named file cannot be read."""
    from ikdata._version import __version__
    from ikdata.core.digest import bytes_digest, record_digest

    settings = ctx.settings
    files: dict[str, str] = {}
    target = settings.pipeline.rpartition(":")[0] if settings.pipeline else None
    for name, path in (("clip", settings.clip_for(traj.id)), ("pipeline", target)):
        if not path:
            continue
        if name == "pipeline" and not path.endswith(".py"):
            files[name] = settings.pipeline or ""  # a module: its name is the claim
            continue
        try:
            files[name] = bytes_digest(Path(path).read_bytes())
        except OSError:
            return None
    references = sorted({ctx.run.ds.definitions[ctx.rows[w].definition].reference_digest
                         for step in traj.record["steps"] for w in (step.get("workloads") or {}).get("denoiser") or []
                         if w in ctx.rows and ctx.rows[w].definition in ctx.run.ds.definitions})
    return record_digest({"trajectory": traj.id, "model": (traj.record.get("model") or {}).get("digest"),
                          "references": references, "files": files, "device": ctx.run.device_kind,
                          "torch": ctx.run.torch_version, "ikdata": __version__,
                          "settings": {k: v for k, v in settings.__dict__.items() if k not in ("clips", "pipeline")}})


def _reused(ctx: _Context, traj: traj_mod.Trajectory, key: str | None) -> dict[str, Any] | None:
    """An earlier verdict of the same judgement, when every blob the trajectory names is confirmed (recorded
    evidence or a rehash now) and passes the path rule."""
    if key is None or not ctx.run.reuse:
        return None
    earlier = ctx.run.cache.lookup(key)
    if earlier is None or "trajectory" not in earlier:
        return None
    for _, path in traj.tensor_paths():
        if ctx.run.ds.paths.refusal(path) is not None:
            return None
        digest = digest_from_path(path)
        if digest is None or not ctx.run.cache.confirm(ctx.run.ds.root / path, digest):
            return None
    return {"definition": PREFIX + traj.record["pipeline"]["class"], "uuid": traj.id, "axes": {}, **earlier}


def _decode(ctx: _Context, traj: traj_mod.Trajectory, case: dict[str, Any]) -> dict[str, Any]:
    """Add the decode check to a judged case (when a reference pipeline and a clip are named) and decide again."""
    measures = case.get("trajectory")
    if not isinstance(measures, dict):
        return case
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
            _, inputs, _ = _conditioning(ctx, last[0], where)
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
    case.update(status=verdict["status"], seconds=case.get("seconds", 0.0) + measures["decode"]["seconds"])
    case.pop("reason", None)
    if verdict["reason"]:
        case["reason"] = verdict["reason"]
    return case


__all__ = ["PREFIX", "RunnerHooks", "Settings", "is_denoiser", "is_trajectory_case", "judge", "judge_all",
           "load_pipeline", "scheduler_class", "scheduler_names"]
