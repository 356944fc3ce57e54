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


def count(ds: Dataset | Any) -> TrajectoryCounts:
    """Trajectory counts of a dataset (or its folder; unreadable lines are left to validate)."""
    from pathlib import PurePath

    found = read_all(ds if isinstance(ds, (str, PurePath)) else ds.root, validate=False)
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


def print_trajectory(document: dict[str, Any], out: Any) -> None:
    """A trajectory (:func:`describe`) for a person: request, noise and its check, model, then every step of every
    stream, printed with the command line's output module ``out`` (handed in: this package imports no CLI)."""
    out.info(f"trajectory {document['trajectory']}  {document['pipeline']} / {document['scheduler']}  "
             f"({document['source']})  {document['status']}"
             + (f": {document['reason']}" if document.get("reason") else ""))
    request = {k: v for k, v in document["request"].items() if v is not None}
    out.info("request: " + ", ".join(f"{k}={v}" for k, v in sorted(request.items())))
    noise = document["noise"]
    checks = ", ".join(f"{s}={'yes' if ok else 'NO'}" for s, ok in document["noise_check"].items())
    shapes = " ".join(f"{s['name']}={'x'.join(map(str, s['shape']))}" for s in noise.get("streams", []))
    out.info(f"noise: {noise['recipe']} seed {noise.get('seed')} {shapes} digest {noise.get('digest')}; "
             f"first latents are the recipe's noise: {checks or 'no stream checked'}"
             + (f" ({noise['reason']})" if noise.get("reason") else ""))
    model = document.get("model")
    if model:
        out.info(f"model: {model['class']} ({model['component']}) digest {model['digest']}, "
                 f"{'stored in the dataset' if model['stored'] else 'recorded by digests (not stored)'}")
    out.info("steps per stream: " + ", ".join(f"{s}={n}/{document['expected_steps']}"
                                             for s, n in document["steps"].items()))
    from rich import box
    from rich.table import Table

    table = Table(title="steps (digests of x, out, x_next; workloads: step = scheduler step, den = denoiser)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column in ("step", "stream", "t", "sigma", "next", "x", "out", "x_next", "work"):  # fits 80 columns
        table.add_column(column, no_wrap=True)
    for s in document["steps_detail"]:
        table.add_row(*map(out.cell, (  # cells from the record: shown literally (out.cell)
            s["index"], s["stream"], _num(s["timestep"]), _num(s["sigma"]), _num(s["sigma_next"]),
            s["x"]["digest"][:8], s["out"]["digest"][:8], s["x_next"]["digest"][:8],
            " ".join(_SHORT.get(k, k) + (f"x{len(v)}" if len(v) > 1 else "")
                     for k, v in sorted(s["workloads"].items(), reverse=True)))))
    out.console.print(table)
    reasons: dict[str, set] = {}
    for s in document["steps_detail"]:
        for kind, why in s["skipped"].items():
            reasons.setdefault(f"{kind}: {why}", set()).add(f"{s['index']}{s['stream'][0]}")
    for reason, where in sorted(reasons.items()):
        out.info(f"no workload for {reason} (steps {' '.join(sorted(where))})")
    for name, ref in document["decoded"].items():
        out.info(f"decoded {name}: {ref['shape']} {ref['dtype']} {ref['digest'][:12]}")
    for name, ref in document["final"].items():
        out.info(f"final latent {name}: {ref['digest'][:12]}")


_SHORT = {"scheduler_step": "step", "denoiser": "den"}


def _num(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"


__all__ = ["validate_trajectories", "describe", "count", "TrajectoryCounts", "step_chains", "calls_of",
           "print_trajectory"]


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
