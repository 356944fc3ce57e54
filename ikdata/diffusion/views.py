"""Trajectories in the dataset operations: what validate checks, show prints, stats counts and lineage follows.

The other operations call these small functions so that a dataset with diffusion trajectories is
checked, described, counted and traced like one with operator workloads only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ikdata.diffusion import models
from ikdata.core.dataset import Dataset
from ikdata.core.errors import RecordError, UsageError
from ikdata.core.paths import UnsafePath
from ikdata.core.problems import Problem
from ikdata.core.records import TensorRef
from ikdata.diffusion.trajectories import Trajectory, check, read_all

# (where, line, pointer, ref, dtype, shape, context): a blob use for validate's header and digest checks
BlobUse = tuple


def validate_trajectories(ds: Dataset, workload_uuids: set[str]) -> tuple[list[Problem], list[BlobUse], int]:
    """Problems of every trajectory and model record, the blob uses validate checks like any other
    (missing, unreadable, dtype and shape), and how many trajectories were read."""
    found = read_all(ds.root)
    problems = list(found.problems)
    uses: list[BlobUse] = []
    seen_models: set[str] = set()
    for traj in found.trajectories:
        problems += check(traj, blob_exists=None, workload_uuids=workload_uuids)
        for pointer, ref, dtype, shape, context in _tensor_uses(traj):
            uses.append((traj.source, traj.line, pointer, ref, dtype, shape, context))
        model = traj.record.get("model")
        if model and model["record"] not in seen_models:
            seen_models.add(model["record"])
            problems += _check_model(ds, traj, model, uses)
    return problems, uses, len(found.trajectories)


def _tensor_uses(traj: Trajectory) -> list[tuple]:
    record, found = traj.record, []
    for i, step in enumerate(record["steps"]):
        for name in ("x", "out", "x_next"):
            d = step[name]
            found.append((f"/steps/{i}/{name}", TensorRef(d["path"], d["tensor_key"]), d.get("dtype"),
                          tuple(d["shape"]) if "shape" in d else None,
                          f"{name} of step {step['index']} ({step['stream']}) of trajectory {traj.id[:12]}"))
    for section in ("final", "decoded"):
        for stream, d in record[section].items():
            found.append((f"/{section}/{stream}", TensorRef(d["path"], d["tensor_key"]), d.get("dtype"),
                          tuple(d["shape"]) if "shape" in d else None,
                          f"{section} {stream} of trajectory {traj.id[:12]}"))
    return found


def _check_model(ds: Dataset, traj: Trajectory, model: dict, uses: list[BlobUse]) -> list[Problem]:
    where = f"{traj.source}"
    try:
        record = models.read_record(ds.root, model["record"], paths=ds.paths)
    except UnsafePath as exc:  # never read: outside the dataset, a link out, a FIFO or device, not models/
        return [exc.problem(where, traj.line, "/model/record")]
    except RecordError as exc:
        return [Problem(where, f"model record {model['record']} cannot be read: {exc}", traj.line, "/model/record",
                        "missing-model")]
    problems = []
    digest = models.model_digest({n: t["digest"] for n, t in record.record["tensors"].items()})
    if digest != record.digest or record.digest != model["digest"]:
        problems.append(Problem(model["record"], f"model digest {record.digest} does not match its tensors "
                                f"({digest}) or the trajectory's {model['digest']}", code="model-digest"))
    if record.stored:
        for name, path in record.blob_paths().items():
            t = record.record["tensors"][name]
            uses.append((model["record"], None, f"/tensors/{name}", TensorRef(path, "tensor"), t["dtype"],
                         tuple(t["shape"]), f"weight {name!r} of model {record.digest[:12]}"))
    return problems


def _by_prefix(ds: Dataset, prefix: str, named: str) -> Trajectory | None:
    """The one trajectory whose id starts with ``prefix``, or None; several is a usage error (``named`` says
    what the user typed, for the message)."""
    matches = [t for t in read_all(ds.root, validate=False).trajectories
               if str(t.record.get("trajectory", "")).startswith(prefix)]
    if len({t.id for t in matches}) > 1:
        raise UsageError(f"{named} matches {len(matches)} trajectories; give more of the id")
    return matches[0] if matches else None


def describe(ds: Dataset, prefix: str) -> dict[str, Any] | None:
    """The trajectory whose id starts with ``prefix``, for ``ikdata show``; None when no trajectory matches.

    Raises:
        UsageError: the prefix matches several trajectories.
    """
    if len(prefix) < 4:
        return None
    traj = _by_prefix(ds, prefix, f"{prefix!r}")
    if traj is None:
        return None
    record = traj.record
    steps = [{"index": s["index"], "stream": s["stream"], "timestep": s.get("timestep"), "sigma": s.get("sigma"),
              "sigma_next": s.get("sigma_next"), "x": _short(s["x"]), "out": _short(s["out"]),
              "x_next": _short(s["x_next"]), "workloads": s.get("workloads") or {}, "skipped": s.get("skipped") or {}}
             for s in record["steps"]]
    return {"kind": "trajectory", **traj.summary(), "request": record["request"],
            "scheduler_config": record["scheduler"]["config"], "noise": record["noise"], "model": record.get("model"),
            "final": {k: _short(v) for k, v in record["final"].items()},
            "decoded": {k: {**_short(v), "shape": v.get("shape")} for k, v in record["decoded"].items()},
            "steps_detail": steps}


def _short(ref: dict) -> dict:
    from ikdata.core.store import digest_from_path

    return {"digest": digest_from_path(ref["path"]) or ref["path"], "shape": ref.get("shape"), "dtype": ref.get("dtype")}


@dataclass
class TrajectoryCounts:
    """What ``stats`` adds for trajectories: how many, per pipeline, steps, and the bytes of every tensor
    they name counted once per use (as a store without deduplication would hold them)."""

    trajectories: int = 0
    incomplete: int = 0
    steps: int = 0
    per_pipeline: dict[str, int] = field(default_factory=dict)
    models: int = 0

    def to_dict(self) -> dict:
        return {"trajectories": self.trajectories, "incomplete": self.incomplete, "steps": self.steps,
                "per_pipeline": dict(self.per_pipeline), "models": self.models}


def count(ds: Dataset) -> TrajectoryCounts:
    """Trajectory counts of a dataset (unreadable lines are left to validate)."""
    found = read_all(ds.root, validate=False)
    counts = TrajectoryCounts()
    digests = set()
    for traj in found.trajectories:
        record = traj.record
        if not isinstance(record, dict) or not isinstance(record.get("steps"), list):
            continue
        counts.trajectories += 1
        counts.incomplete += record.get("status") != "complete"
        counts.steps += len(record["steps"])
        name = (record.get("pipeline") or {}).get("class", "?")
        counts.per_pipeline[name] = counts.per_pipeline.get(name, 0) + 1
        if isinstance(record.get("model"), dict):
            digests.add(record["model"].get("digest"))
    counts.models = len(digests)
    return counts


def step_chains(path: Any, key: str, trace: Callable[[Any, str], list]) -> list | None:
    """Lineage of a trajectory step: ``TRAJECTORY[:STEP[:STREAM]]`` (an id prefix of at least 8 hex digits)
    gives the chains of the workloads of those steps, each marked with the step; None when ``key`` is
    not a trajectory.

    Raises:
        UsageError: the step or stream is not in the trajectory, or the prefix is ambiguous.
    """
    import dataclasses

    prefix, _, rest = key.partition(":")
    if len(prefix) < 8 or any(c not in "0123456789abcdef" for c in prefix):
        return None
    traj = _by_prefix(Dataset.open(path), prefix, f"{path}: {prefix!r}")
    if traj is None:
        return None
    step_text, _, stream = rest.partition(":")
    steps = traj.record["steps"]
    if step_text:
        if not step_text.isdigit():
            raise UsageError(f"{key!r}: expected TRAJECTORY[:STEP[:STREAM]] with a step number")
        steps = [s for s in steps if s["index"] == int(step_text) and (not stream or s["stream"] == stream)]
        if not steps:
            raise UsageError(f"{path}: trajectory {traj.id[:12]} has no step {step_text}"
                             + (f" in stream {stream!r}" if stream else "") + f"; streams {traj.streams}")
    chains = []
    for step in steps:
        for kind, uuids in (step.get("workloads") or {}).items():
            for uuid in uuids:
                for chain in trace(path, uuid):
                    chains.append(dataclasses.replace(chain, uses=(
                        f"trajectory {traj.id[:12]} step {step['index']} {step['stream']} ({kind})",)))
    return chains


def calls_of(root: Any, uuids: set[str]) -> dict[str, dict[str, Any]]:
    """The pipeline call each workload uuid was a step of: trajectory id, pipeline, step, stream, seed and the
    request, for lineage. Uuids no trajectory names are absent."""
    found: dict[str, dict[str, Any]] = {}
    for traj in read_all(root, validate=False).trajectories:
        record = traj.record
        for step in record.get("steps") or []:
            for kind, named in (step.get("workloads") or {}).items():
                for uuid in set(named or []) & uuids:
                    found.setdefault(uuid, {
                        "trajectory": traj.id, "pipeline": (record.get("pipeline") or {}).get("class"),
                        "step": step.get("index"), "stream": step.get("stream"), "role": kind,
                        "seed": (record.get("noise") or {}).get("seed"), "request": record.get("request"),
                        "where": f"{traj.source}:{traj.line}"})
    return found


__all__ = ["validate_trajectories", "describe", "count", "TrajectoryCounts", "step_chains", "calls_of"]


def ids(root: Any) -> set[str]:
    """The ids of the trajectories a dataset holds now (for a capture's summary)."""
    from pathlib import Path

    if not Path(root).is_dir():
        return set()
    return {t.id for t in read_all(root, validate=False).trajectories if isinstance(t.record.get("trajectory"), str)}


def capture_summary(root: Any, before: set[str]) -> list[str]:
    """One line per trajectory added since ``before``: pipeline, steps per stream, noise check, id."""
    lines = []
    for traj in read_all(root, validate=False).trajectories:
        if traj.id in before:
            continue
        s = traj.summary()
        steps = ", ".join(f"{k} {v}/{s['expected_steps']}" for k, v in s["steps"].items())
        check = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in (s["noise_check"] or {}).items())
        lines.append(f"trajectory {traj.id[:12]} {s['pipeline']} {s['status']}: steps {steps}; noise is the recipe's "
                     f"(seed {s['seed']}): {check or 'not checked'}; see it with: ikdata show {root} {traj.id[:12]}")
    return lines
