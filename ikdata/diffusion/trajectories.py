"""Diffusion trajectories in a dataset: where they live, their identity, reading them, and checking them.

A trajectory is one line of ``trajectories/<pipeline class>.jsonl`` (schemas/trajectory.schema.json):
every captured step of one pipeline call, per latent stream, in order, each naming the blobs of
``x``, ``out`` and ``x_next``. Its id is the sha256 of its canonical JSON without the id itself.
Torch-free: :func:`check` is what ``ikdata validate`` runs on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ikdata.core import jsonl, schema
from ikdata.core.digest import record_digest
from ikdata.core.errors import IkdataError
from ikdata.core.problems import Problem
from ikdata.core.store import digest_from_path

TRAJECTORIES_DIR = "trajectories"
TENSOR_FIELDS = ("x", "out", "x_next")
MAX_SCHEDULE_STEPS = 10_000  # a step count beyond this and beyond the steps a record holds is refused
NOISE_FACTOR = 4  # the recipe's noise may hold at most this many times the elements of the largest tensor


def trajectory_relpath(pipeline_class: str) -> str:
    """Where the trajectories of one pipeline class live."""
    return f"{TRAJECTORIES_DIR}/{pipeline_class}.jsonl"


def trajectory_id(record: dict) -> str:
    """The id of a trajectory record: sha256 of its canonical JSON without ``trajectory``."""
    return record_digest({k: v for k, v in record.items() if k != "trajectory"})


@dataclass(frozen=True)
class Trajectory:
    """One trajectory record and where it was read from."""

    record: dict
    source: str = ""
    line: int = 0

    @property
    def id(self) -> str:
        return self.record["trajectory"]

    @property
    def streams(self) -> list[str]:
        return list(self.record["streams"])

    def steps_of(self, stream: str) -> list[dict]:
        return [s for s in self.record["steps"] if s["stream"] == stream]

    def tensor_paths(self) -> Iterator[tuple[str, str]]:
        """Every blob this trajectory names, as (JSON pointer, dataset-relative path)."""
        for i, step in enumerate(self.record["steps"]):
            for name in TENSOR_FIELDS:
                yield f"/steps/{i}/{name}", step[name]["path"]
            for pointer, ref in step_extra_tensors(step):
                yield f"/steps/{i}/{pointer}", ref["path"]
        for section in ("final", "decoded", "init"):
            for stream, ref in (self.record.get(section) or {}).items():
                yield f"/{section}/{stream}", ref["path"]

    def workload_uuids(self) -> Iterator[tuple[int, str, str]]:
        """(step position, definition kind, uuid) for every workload a step names."""
        for i, step in enumerate(self.record["steps"]):
            for kind, uuids in (step.get("workloads") or {}).items():
                for uuid in uuids:
                    yield i, kind, uuid

    def summary(self) -> dict[str, Any]:
        """The facts ``show``, ``stats`` and ``ls`` print: id, pipeline, status, steps per stream, noise, model."""
        record = self.record
        noise = record["noise"]
        model = record.get("model") or {}
        return {"trajectory": self.id, "source": f"{self.source}:{self.line}", "status": record["status"],
                "reason": record.get("reason"), "pipeline": record["pipeline"]["class"],
                "scheduler": record["scheduler"]["class"], "model": record["pipeline"].get("model"),
                "steps": {s: len(self.steps_of(s)) for s in self.streams}, "expected_steps": record["request"]["steps"],
                "seed": noise.get("seed"), "noise_digest": noise.get("digest"),
                "noise_check": {s: noise["check"][s] for s in self.streams if s in (noise.get("check") or {})},
                "model_digest": model.get("digest"), "model_stored": model.get("stored")}


@dataclass
class TrajectorySet:
    """Every trajectory of a dataset, and the problems met reading them."""

    trajectories: list[Trajectory] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def files(root: Path) -> list[Path]:
    folder = Path(root) / TRAJECTORIES_DIR
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def read_all(root: str | Path, *, validate: bool = True) -> TrajectorySet:
    """Every trajectory record under ``trajectories/``; torn, malformed and schema-breaking lines are problems."""
    root = Path(root)
    found = TrajectorySet()
    for path in files(root):
        display = path.relative_to(root).as_posix()
        content = jsonl.read(path, display=display, dataset=root)
        found.problems += content.problems
        for line, record in content.records:
            if validate:
                problems = schema.check("trajectory", record, path=display, line=line)
                if problems:
                    found.problems += problems
                    continue
            found.trajectories.append(Trajectory(record, display, line))
    return found


def find(root: str | Path, prefix: str) -> list[Trajectory]:
    """The trajectories whose id starts with ``prefix``."""
    return [t for t in read_all(root, validate=False).trajectories
            if isinstance(t.record.get("trajectory"), str) and t.record["trajectory"].startswith(prefix)]


def check(traj: Trajectory, *, blob_exists: Any, workload_uuids: set[str] | None = None) -> list[Problem]:
    """Every way one (schema-valid) trajectory is inconsistent, each naming file, line and step.

    Checks: the id matches the content; step counts, noise shapes and seed within :func:`limit_problems`;
    steps of each stream in strictly increasing order, at
    most ``request.steps`` of them and exactly that many for a complete trajectory captured without
    a step or stream selection; every stream named; continuity (x_next of step i is x of step i+1,
    by digest, when both steps were captured); every blob present (``blob_exists(path)``); every
    workload a step names present (when ``workload_uuids`` is given); the model record named.
    """
    record, where, line = traj.record, traj.source, traj.line
    problems: list[Problem] = []

    def add(message: str, pointer: str, code: str) -> None:
        problems.append(Problem(where, message, line, pointer, code))

    if trajectory_id(record) != record["trajectory"]:
        add(f"trajectory id {record['trajectory'][:12]}... does not match its content (expected "
            f"{trajectory_id(record)[:12]}...): the record was edited", "/trajectory", "trajectory-id")
    streams = record["streams"]
    expected = record["request"]["steps"]
    selection = record.get("selection") or {}
    selected = selection.get("steps") is not None
    last: dict[str, tuple[int, dict]] = {}
    counts = {s: 0 for s in streams}
    for i, step in enumerate(record["steps"]):
        stream, index = step["stream"], step["index"]
        pointer = f"/steps/{i}"
        if stream not in counts:
            add(f"step {index} names stream {stream!r}, which is not one of the trajectory's streams {streams}",
                pointer + "/stream", "trajectory-stream")
            continue
        counts[stream] += 1
        previous = last.get(stream)
        if previous is not None and index <= previous[0]:
            add(f"step {index} of stream {stream!r} comes after step {previous[0]}; steps must be listed in "
                "increasing order", pointer + "/index", "trajectory-order")
        elif index >= expected:
            add(f"step {index} of stream {stream!r} is beyond the request's {expected} steps", pointer + "/index",
                "trajectory-step-count")
        elif previous is not None and index == previous[0] + 1 and \
                _digest(previous[1]["x_next"]) != _digest(step["x"]) and (stream, previous[0]) not in edited(record):
            add(f"step {index} of stream {stream!r}: x is not the x_next of step {previous[0]} (continuity broken)",
                pointer + "/x", "trajectory-continuity")
        last[stream] = (index, step)
    if record["status"] == "complete" and not selected:
        for stream in (selection.get("streams") or streams):
            if counts.get(stream, 0) != expected:
                add(f"stream {stream!r} has {counts.get(stream, 0)} steps, but the request took {expected} "
                    "(a complete trajectory lists every step)", "/steps", "trajectory-step-count")
    for pointer, message in limit_problems(record, largest=descriptor_elements(record)):
        add(message, pointer, "trajectory-limit")
    for pointer, path in traj.tensor_paths() if blob_exists is not None else ():
        if not blob_exists(path):
            step = _step_of(record, pointer)
            add(f"blob {path} does not exist{step}", pointer + "/path", "missing-blob")
    if workload_uuids is not None:
        for i, kind, uuid in traj.workload_uuids():
            if uuid not in workload_uuids:
                add(f"step {record['steps'][i]['index']} ({record['steps'][i]['stream']}) names {kind} workload "
                    f"{uuid}, which no workload row holds", f"/steps/{i}/workloads/{kind}", "unknown-workload")
    return problems


def limit_problems(record: dict, *, largest: int | None) -> list[tuple[str, str]]:
    """(JSON pointer, what is wrong and what was expected) for every size in a trajectory record that would
    size an allocation beyond what the dataset holds; replay refuses such a record before it allocates.

    - step counts (``request.steps``, ``request.num_inference_steps``, integer scheduler settings whose name
      says steps, such as ``num_train_timesteps``): at most :data:`MAX_SCHEDULE_STEPS`, or the number of steps
      the record lists when that is more (a schedule's arrays grow with them);
    - the noise recipe: a seed the generator takes, at most :data:`~ikdata.diffusion.noise.MAX_DIMS` dimensions a
      stream, and in all at most :data:`NOISE_FACTOR` times ``largest``: the elements of the largest tensor
      the trajectory holds (a latent, or a decoded output: a selection may leave a stream's latents out,
      but the recipe still draws that stream's noise); None: not known, not checked.
    """
    from ikdata.diffusion import noise as noise_mod

    found: list[tuple[str, str]] = []
    steps = record.get("steps") if isinstance(record.get("steps"), list) else []
    cap = max(MAX_SCHEDULE_STEPS, len(steps))
    counts = [(f"/request/{name}", f"request.{name}", value) for name, value in (record.get("request") or {}).items()
              if name in ("steps", "num_inference_steps")]
    config = (record.get("scheduler") or {}).get("config")
    counts += [(f"/scheduler/config/{name}", f"scheduler setting {name}", value)
               for name, value in (config.items() if isinstance(config, dict) else ()) if "step" in name.lower()]
    for pointer, what, value in counts:
        if isinstance(value, int) and not isinstance(value, bool) and value > cap:
            found.append((pointer, f"{what} is {value}; expected at most {cap:,} (no schedule takes more, and the "
                                   f"trajectory lists {len(steps)} step(s))"))
    from ikdata.diffusion.scheduler_state import limit_problems as scheduler_problems

    found += scheduler_problems(record.get("scheduler"), cap=cap)  # orders, arguments, array lengths and dtypes
    noise = record.get("noise") if isinstance(record.get("noise"), dict) else {}
    if noise.get("seed") is not None:
        refusal = noise_mod.seed_refusal(noise["seed"])
        if refusal is not None:
            found.append(("/noise/seed", f"noise {refusal}"))
    total = 0
    for i, stream in enumerate(noise.get("streams") or []):
        shape = stream.get("shape") if isinstance(stream, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            continue  # the schema names it
        if len(shape) > noise_mod.MAX_DIMS:
            found.append((f"/noise/streams/{i}/shape", f"noise stream shape has {len(shape)} dimensions; expected at "
                                                        f"most {noise_mod.MAX_DIMS}"))
            continue
        total += math.prod(shape)
    if largest is not None and total > NOISE_FACTOR * max(largest, 1):
        held = f"the {largest:,} of the largest tensor the trajectory holds" if largest else \
            "the elements of the largest tensor the trajectory holds, and it holds none that can be read"
        found.append(("/noise/streams", f"the noise streams hold {total:,} elements; expected at most {NOISE_FACTOR} "
                                        f"times {held}"))
    from ikdata.diffusion.noise_draws import limit_problems as draw_problems

    found += draw_problems(noise, largest)  # a recorded draw order (a VAE's draw first, a generator per image)
    return found


def edited(record: dict) -> set[tuple[str, int]]:
    """(stream, step) after which a callback_on_step_end may have edited the latents (``edits``)."""
    return {(e.get("stream"), e.get("step")) for e in record.get("edits") or [] if isinstance(e, dict)}


def descriptor_elements(record: dict) -> int | None:
    """The elements of the largest tensor a trajectory names (a step's x, out or x_next, a final latent, a
    decoded output) by the shapes its descriptors give (validate checks those against the blobs), or None
    when none gives one."""
    shapes = [d.get("shape") for step in record.get("steps") or [] if isinstance(step, dict)
              for d in (step.get(n) for n in TENSOR_FIELDS) if isinstance(d, dict)]
    for section in ("final", "decoded"):
        value = record.get(section)
        shapes += [d.get("shape") for d in (value.values() if isinstance(value, dict) else ()) if isinstance(d, dict)]
    sizes = [math.prod(s) for s in shapes if isinstance(s, list) and all(isinstance(v, int) for v in s)]
    return max(sizes) if sizes else None


def step_extra_tensors(step: dict) -> Iterator[tuple[str, dict]]:
    """(pointer inside the step, tensor descriptor) of every blob a step's scheduler record names: the noise
    the step drew and the tensors of the state it read (:mod:`ikdata.diffusion.scheduler_state`)."""
    noise = step.get("noise")
    for k, item in enumerate(noise if isinstance(noise, list) else ()):
        if isinstance(item, dict) and isinstance(item.get("tensor"), dict) and isinstance(item["tensor"].get("path"), str):
            yield f"noise/{k}/tensor", item["tensor"]

    def walk(value: Any, pointer: str) -> Iterator[tuple[str, dict]]:
        if isinstance(value, dict) and set(value) == {"tensor"} and isinstance(value["tensor"], dict):
            if isinstance(value["tensor"].get("path"), str):
                yield pointer + "/tensor", value["tensor"]
        elif isinstance(value, dict) and set(value) == {"list"} and isinstance(value["list"], list):
            for k, item in enumerate(value["list"]):
                yield from walk(item, f"{pointer}/list/{k}")

    state = step.get("state")
    for name, value in (state.items() if isinstance(state, dict) else ()):
        yield from walk(value, f"state/{name}")


def _digest(ref: dict) -> str | None:
    return digest_from_path(ref["path"])


def _step_of(record: dict, pointer: str) -> str:
    parts = pointer.split("/")
    if len(parts) > 2 and parts[1] == "steps":
        step = record["steps"][int(parts[2])]
        return f" (step {step['index']}, stream {step['stream']!r}, {parts[3]})"
    return f" ({parts[1]} of stream {parts[2]!r})" if len(parts) > 2 else ""


__all__ = ["TRAJECTORIES_DIR", "TENSOR_FIELDS", "MAX_SCHEDULE_STEPS", "NOISE_FACTOR", "Trajectory", "TrajectorySet",
           "trajectory_relpath", "trajectory_id", "referenced_paths", "files", "read_all", "find", "check",
           "limit_problems", "descriptor_elements", "step_extra_tensors"]


def referenced_paths(root: str | Path) -> tuple[list[str], list[Problem]]:
    """Every blob path the trajectories and the stored model records of a dataset name, once per use,
    and the unreadable lines met: what gc keeps, what a pull fetches, what stats counts, beside the
    rows and receipts."""
    from ikdata.diffusion.models import MODELS_DIR, read_record
    from ikdata.core.paths import PathResolver
    from ikdata.core.store import blob_path

    root = Path(root)
    paths: list[str] = []
    problems: list[Problem] = []
    models: set[str] = set()
    for path in files(root):
        content = jsonl.read(path, display=path.relative_to(root).as_posix(), dataset=root)
        problems += content.problems
        for _, record in content.records:
            paths += _descriptor_paths(record)
            model = record.get("model") if isinstance(record, dict) else None
            if isinstance(model, dict):
                models |= {v for v in (model.get("record"), _model_path(model.get("digest"))) if isinstance(v, str)}
    folder = root / MODELS_DIR
    if folder.is_dir():
        models |= {p.relative_to(root).as_posix() for p in folder.glob("*.json")}
    resolver = PathResolver(root)
    for relative in sorted(models):
        try:  # through the path rule: a record naming a file outside, a link out or a FIFO is never read
            record = read_record(root, relative, paths=resolver, validate=False).record
        except (OSError, IkdataError):
            continue  # validate reports a missing, unsafe or malformed model record
        if isinstance(record, dict) and record.get("stored") and isinstance(record.get("tensors"), dict):
            paths += [blob_path(t["digest"]) for t in record["tensors"].values()
                      if isinstance(t, dict) and isinstance(t.get("digest"), str)]
    return paths, problems


def _model_path(digest: Any) -> str | None:
    from ikdata.diffusion.models import model_relpath

    ok = isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
    return model_relpath(digest) if ok else None


def _descriptor_paths(record: Any) -> list[str]:
    if not isinstance(record, dict):
        return []
    found = []
    for step in record.get("steps") or []:
        if isinstance(step, dict):
            found += [step[n] for n in TENSOR_FIELDS if isinstance(step.get(n), dict)]
            found += [ref for _, ref in step_extra_tensors(step)]
    for section in ("final", "decoded", "init"):
        value = record.get(section)
        if isinstance(value, dict):
            found += [v for v in value.values() if isinstance(v, dict)]
    return [d["path"] for d in found if d.get("type") == "safetensors" and isinstance(d.get("path"), str)]
