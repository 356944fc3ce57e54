"""Writing trajectories: host copies hashed and stored off the engine thread, then rows, model, and the record.

:class:`BlobQueue` (one per dataset and process) copies a tensor to host memory on the engine thread
and stores it on background threads (hashing and fsync release the GIL). :func:`write_trajectory`
waits for a call's blobs, then appends, in this order: the workload rows and receipts of every
step (scheduler step, denoiser), the model record, and the trajectory line, so that no record
names a file that is not durable yet.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ikdata.capture.writer import leave_signals_to_the_main_thread
from ikdata.core import jsonl, schema
from ikdata.diffusion import models
from ikdata.core.definitions import workloads_relpath
from ikdata.core.digest import finite_json
from ikdata.core.errors import RecordError
from ikdata.core.locking import dataset_lock
from ikdata.core.records import Receipt, Scalar, WorkloadRow
from ikdata.core.store import PutResult
from ikdata.diffusion.trajectories import trajectory_id, trajectory_relpath
from ikdata.core.writer import DatasetWriter, default_provenance, workload_uuid

BLOB_THREADS = 2
_QUEUES: dict[tuple[str, int], "BlobQueue"] = {}
_QUEUES_LOCK = threading.Lock()
_MODELS: "weakref.WeakKeyDictionary[Any, tuple[tuple, dict]]" = weakref.WeakKeyDictionary()


class Blob:
    """A host copy on its way to the store: held until its call ends (or memory runs short), then hashed and
    written on a background thread; :meth:`put` waits for it."""

    __slots__ = ("host", "future", "nbytes", "dtype", "shape", "keep", "queue")

    def __init__(self, queue: "BlobQueue", host: Any) -> None:
        self.queue, self.host = queue, host
        self.future: Future | None = None
        self.nbytes = host.numel() * host.element_size()
        self.dtype, self.shape = str(host.dtype), tuple(host.shape)
        self.keep: Any = None

    def put(self) -> PutResult:
        self.queue.start(self)
        assert self.future is not None
        return self.future.result()

    def descriptor(self) -> dict:
        """The trajectory's tensor descriptor: the blob, with dtype and shape for readers without torch."""
        return {**self.put().ref.to_dict(), "dtype": self.dtype, "shape": list(self.shape)}


class BlobQueue:
    """Host copies of one process, stored into one dataset on background threads, memory bounded.

    Copies are held while the pipeline call runs and written when it ends (:meth:`start_all`), so the
    steps themselves pay only the copies: hashing and fsync on other threads during the steps would
    compete with the engine for the GIL and the cores. When the copies held exceed half of
    ``queue_bytes``, the oldest are written at once; past ``queue_bytes`` the engine waits.
    """

    def __init__(self, root: str, queue_bytes: int) -> None:
        self.writer = DatasetWriter(root)
        self.queue_bytes = queue_bytes
        self._pool = ThreadPoolExecutor(max_workers=BLOB_THREADS, thread_name_prefix="ikdata-trajectory",
                                        initializer=leave_signals_to_the_main_thread)
        self._held: list[Blob] = []
        self._held_bytes = 0
        self._flying_bytes = 0
        self._cond = threading.Condition()

    @classmethod
    def for_root(cls, root: str, *, queue_bytes: int) -> "BlobQueue":
        key = (str(root), os.getpid())
        with _QUEUES_LOCK:
            queue = _QUEUES.get(key)
            if queue is None:
                queue = _QUEUES[key] = cls(str(root), queue_bytes)
            return queue

    def copy(self, tensor: Any) -> Blob:
        """Copy ``tensor`` to host memory now; store it later."""
        import torch

        host = torch.empty(tuple(tensor.shape), dtype=tensor.dtype, device="cpu")
        host.copy_(tensor.detach())
        blob = Blob(self, host)
        with self._cond:
            self._held.append(blob)
            self._held_bytes += blob.nbytes
            while self._held and self._held_bytes > self.queue_bytes // 2:
                self._start_locked(self._held[0])
            while self._flying_bytes > self.queue_bytes:
                self._cond.wait()
        return blob

    def start(self, blob: Blob) -> None:
        """Write ``blob`` now (on a background thread) if it is not on its way yet."""
        with self._cond:
            self._start_locked(blob)

    def start_all(self, blobs: Any) -> None:
        with self._cond:
            for blob in blobs:
                self._start_locked(blob)

    def _start_locked(self, blob: Blob) -> None:
        if blob.future is not None:
            return
        try:
            self._held.remove(blob)
            self._held_bytes -= blob.nbytes
        except ValueError:
            pass
        self._flying_bytes += blob.nbytes
        blob.future = self._pool.submit(self._put, blob)

    def _put(self, blob: Blob) -> PutResult:
        try:
            return self.writer.store.put(blob.host)
        finally:
            blob.host = None
            with self._cond:
                self._flying_bytes -= blob.nbytes
                self._cond.notify_all()


def write_trajectory(rec: Any, *, result: Any, error: str | None) -> str:
    """Write everything ``rec`` captured; return the trajectory id."""
    queue: BlobQueue = rec.queue
    writer = queue.writer
    expected = _expected_steps(rec)
    decoded = {} if error else _decoded(queue, result)
    queue.start_all([*(b for s in rec.steps for b in (s.x, s.out, s.x_next)), *decoded.values(), *rec.init.values(),
                     *(v for c in rec.denoiser_calls for v in (*c.inputs.values(), *c.outputs.values())
                       if isinstance(v, Blob))])
    model = _model(rec, writer)
    steps = sorted(rec.steps, key=lambda s: (s.index, _order(rec, s.stream)))
    final = {}
    for stream in _stream_order(rec):
        last = [s for s in steps if s.stream == stream]
        if last and last[-1].index == expected - 1:
            final[stream] = last[-1].x_next
    facts = _provenance(rec)
    root = Path(writer.root)
    step_rows, rows, receipts = _step_workloads(rec, steps, writer, facts)
    records = []
    for step in steps:
        records.append({"index": step.index, "stream": step.stream, "timestep": step.timestep, "sigma": step.sigma,
                        "sigma_next": step.sigma_next, "x": step.x.descriptor(), "out": step.out.descriptor(),
                        "x_next": step.x_next.descriptor(), "workloads": step_rows.get(id(step), {}),
                        **_scheduler_extra(step),
                        **({"skipped": dict(step.skipped)} if step.skipped else {})})
    for step, record in zip(steps, records):
        why = rec.denoiser_skipped or "; ".join(rec.denoiser_skips.get(step.index, [])) \
            if step.stream == streams_main(rec) else None
        if why:
            record.setdefault("skipped", {})["denoiser"] = why
    streams = _stream_order(rec)
    noise_streams = _noise_streams(rec, streams)
    from ikdata.diffusion import noise as noise_mod
    from ikdata.diffusion import noise_draws

    check = {s: rec.noise_check.get(s, False) for s in streams}
    record = {
        "status": "incomplete" if error else "complete",
        "reason": error,
        "pipeline": _pipeline(rec),
        "scheduler": _scheduler(rec),
        "request": _request(rec, expected),
        "streams": streams,
        "selection": {"steps": list(rec.config.steps) if rec.config.steps is not None else None,
                      "streams": list(rec.config.streams) or None},
        "steps": records,
        "final": {s: b.descriptor() for s, b in final.items()},
        "decoded": {n: b.descriptor() for n, b in decoded.items()},
        **({"init": {n: b.descriptor() for n, b in rec.init.items()}} if rec.init else {}),
        **({"edits": list(rec.edits)} if rec.edits else {}),
        **({"unjudged": rec.unjudged()} if rec.helper_calls else {}),
        "noise": {"recipe": noise_mod.RECIPE,
                  "seed": _seed(rec),
                  "streams": [{"name": s, "shape": list(d.shape)} for s, d in noise_streams],
                  "digest": _noise_digest(rec, noise_streams, check),
                  **({"dtype": str(noise_streams[0][1].dtype)} if noise_streams else {}),
                  "check": check, "reason": rec.noise_reason if not all(check.values()) else None,
                  **(noise_draws.record(rec.draws, rec.stream_draws) if streams and
                     set(streams) <= set(rec.stream_draws) else {})},
        "model": model,
        "provenance": {k: v for k, v in facts.items() if isinstance(v, (str, int, float, bool)) or v is None},
    }
    record["trajectory"] = trajectory_id(record)
    relative = trajectory_relpath(type(rec.pipe).__name__)
    problems = schema.check("trajectory", record, path=relative)
    if problems:
        raise RecordError("; ".join(f"{p.pointer} {p.message}" for p in problems[:5]), path=relative)
    with dataset_lock(root, exclusive=False):
        writer.append_records(rows, receipts)  # the one writer of rows and receipts: rows first (core/writer.py)
        jsonl.append(root / relative, [record])
    return record["trajectory"]


def _step_workloads(rec: Any, steps: list, writer: DatasetWriter, facts: dict) -> tuple[dict, dict, list]:
    """Rows and receipts of every step's scheduler-step and denoiser workloads, by file."""
    from ikdata.diffusion.denoisers import shipped

    definitions = shipped()
    step_rows: dict[int, dict[str, list[str]]] = {}
    rows: dict[str, list[dict]] = {}
    receipts: list[dict] = []
    by_index = {}
    for step in steps:
        by_index.setdefault(step.index, step)
        if step.scheduler_step is None:
            continue
        definition = definitions[step.scheduler_step]
        inputs = {"x": step.x.put().ref, "out": step.out.put().ref,
                  **{n: Scalar(v) for n, v in step.step_scalars.items()}}
        outputs = {"x_next": step.x_next.put().ref}
        axes = definition.bind({"x": step.x.shape, "out": step.out.shape, "x_next": step.x_next.shape,
                                **{n: None for n in step.step_scalars}},
                               tensors=[*definition.inputs, *definition.outputs])
        uuid = _add(writer, definition, axes, inputs, outputs, rows, receipts,
                    {**facts, "step": step.index, "variant": step.stream,
                     "operation": f"{type(rec.schedulers[step.stream]).__name__}.step"})
        step_rows.setdefault(id(step), {}).setdefault("scheduler_step", []).append(uuid)
    for call in rec.denoiser_calls:
        step = by_index.get(call.step)
        if step is None:
            continue
        inputs = {n: _value(v) for n, v in call.inputs.items()}
        outputs = {n: _value(v) for n, v in call.outputs.items()}
        uuid = _add(writer, call.definition, call.axes, inputs, outputs, rows, receipts,
                    {**facts, "step": call.step, "variant": f"call{call.call}",
                     "operation": f"{type(_denoiser(rec)).__name__}.forward"})
        step_rows.setdefault(id(step), {}).setdefault("denoiser", []).append(uuid)
    return step_rows, rows, receipts


def _add(writer: DatasetWriter, definition: Any, axes: dict, inputs: dict, outputs: dict, rows: dict,
         receipts: list, provenance: dict) -> str:
    writer.add_definition(definition)
    facts = {**default_provenance(), **provenance}
    uuid = workload_uuid(definition.name, inputs, facts)
    ordered = {n: inputs[n] for n in definition.inputs}
    rows.setdefault(workloads_relpath(definition.name, definition.op_type), []).append(
        WorkloadRow(definition.name, uuid, axes, ordered).to_dict())
    receipts.append(Receipt(uuid, definition.name, axes, outputs, facts).to_dict())
    return uuid


def _value(value: Any) -> Any:
    if isinstance(value, Blob):
        return value.put().ref
    if isinstance(value, (bool, int, float)):
        return Scalar(value)
    raise TypeError(f"cannot record a {type(value).__name__} as a workload input")


def _expected_steps(rec: Any) -> int:
    sched = rec.schedulers.get(_stream_order(rec)[0]) if rec.schedulers else getattr(rec.pipe, "scheduler", None)
    timesteps = getattr(sched, "timesteps", None)
    if timesteps is not None and hasattr(timesteps, "__len__") and len(timesteps):
        return len(timesteps) - _start(rec)  # a partial schedule (strength < 1) takes the steps from its start
    steps = rec.bound.get("num_inference_steps")
    return int(steps) if isinstance(steps, int) else max(rec.counts.values(), default=0)


def _start(rec: Any) -> int:
    """The schedule index the main stream's first step took (0 unless the call started part-way)."""
    main = streams_main(rec)
    return int(rec.starts.get(main, 0)) if main is not None else 0


def streams_main(rec: Any) -> str | None:
    order = _stream_order(rec)
    return order[0] if order else None


def _stream_order(rec: Any) -> list[str]:
    return list(rec.streams.values())


def _order(rec: Any, stream: str) -> int:
    return _stream_order(rec).index(stream)


def _decoded(queue: BlobQueue, result: Any) -> dict[str, Blob]:
    """The call's returned frames, images or audio, as blobs (PIL images become uint8 arrays)."""
    found: dict[str, Any] = {}
    if isinstance(result, tuple):
        names = ("video", "audio")
        for name, value in zip(names, result):
            found[name] = value
    else:
        for attr, name in (("frames", "video"), ("images", "images"), ("audio", "audio")):
            value = getattr(result, attr, None)
            if value is not None:
                found[name] = value
    blobs = {}
    for name, value in found.items():
        tensor = _as_tensor(value)
        if tensor is not None:
            blobs[name] = queue.copy(tensor)
    return blobs


def _as_tensor(value: Any) -> Any:
    import numpy as np
    import torch

    if torch.is_tensor(value):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value)) if value.dtype.name in (
            "float32", "float16", "float64", "uint8") else None
    if isinstance(value, list) and value:
        try:
            if all(torch.is_tensor(v) for v in value):
                return torch.stack(value)
            return torch.from_numpy(np.stack([np.asarray(_pil_list(v)) for v in value]))
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def _pil_list(value: Any) -> Any:
    import numpy as np

    if isinstance(value, list):
        return np.stack([np.asarray(v) for v in value])
    return np.asarray(value)


def _denoiser(rec: Any) -> Any:
    from ikdata.diffusion.denoisers import denoiser_of

    return denoiser_of(rec.pipe)


def _model(rec: Any, writer: DatasetWriter) -> dict | None:
    """Name the denoiser's weights by content; store them when small; write the model record."""
    module = _denoiser(rec)
    if module is None or not hasattr(module, "state_dict"):
        return None
    params = list(module.state_dict().items())
    versions = tuple((id(t), t._version) for _, t in params)
    cached = _MODELS.get(module)
    if cached is not None and cached[0] == versions:
        return cached[1]
    from ikdata.core.store import raw_tensor

    tensors, total, raws = {}, 0, {}
    for name, tensor in params:
        raw = raw_tensor(tensor)
        raws[name] = raw
        tensors[name] = {"digest": raw.digest, "dtype": raw.dtype, "shape": list(raw.shape)}
        total += memoryview(raw.data).nbytes
    digest = models.model_digest({n: t["digest"] for n, t in tensors.items()})
    stored = total <= models.DEFAULT_STORE_LIMIT
    if stored:  # once per model; fsync latency is hidden by writing many small tensors at once
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="ikdata-model",
                                initializer=leave_signals_to_the_main_thread) as pool:
            list(pool.map(lambda item: writer.store.put_raw(item[1], digest=tensors[item[0]]["digest"]),
                          raws.items()))
    repo, revision = _model_source(rec.pipe)
    record = {"digest": digest, "class": type(module).__name__, "library": type(module).__module__.split(".")[0],
              "library_version": rec.library.version(), "config": _json_safe(dict(getattr(module, "config", {}))),
              "stored": stored, "bytes": total, "repo_id": repo, "revision": revision,
              "subfolder": "transformer" if getattr(rec.pipe, "transformer", None) is module else "unet",
              "tensors": tensors}
    relative = models.write_record(writer.root, record)
    summary = {"digest": digest, "class": type(module).__name__, "component": record["subfolder"],
               "record": relative, "stored": stored}
    _MODELS[module] = (versions, summary)
    return summary


def _model_source(pipe: Any) -> tuple[str | None, str | None]:
    path = getattr(pipe, "name_or_path", None) or (getattr(pipe, "config", {}) or {}).get("_name_or_path")
    if not isinstance(path, str) or not path:
        return None, None
    parts = Path(path).parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--"):].replace("--", "/"), parts[-1]
    return path, None


def _pipeline(rec: Any) -> dict:
    repo, revision = _model_source(rec.pipe)
    return {"class": type(rec.pipe).__name__, "library": type(rec.pipe).__module__.split(".")[0],
            "library_version": rec.library.version(), "model": repo, "revision": revision}


def _scheduler(rec: Any) -> dict:
    sched = rec.schedulers.get(_stream_order(rec)[0]) if rec.schedulers else getattr(rec.pipe, "scheduler", None)
    config = dict(getattr(sched, "config", {}) or {})
    found = {"class": type(sched).__name__, "config": _json_safe(config), "order": getattr(sched, "order", None)}
    calls = {stream: rec.set_timesteps[id(s)] for stream, s in (rec.schedulers or {}).items()
             if id(s) in getattr(rec, "set_timesteps", {})}
    if calls:
        found["set_timesteps"] = calls
    return found


def _scheduler_extra(step: Any) -> dict:
    """What the step read besides (x, out) (:mod:`ikdata.diffusion.scheduler_state`): its state when it began,
    the noise it drew or was given, its scalar arguments; what could not be recorded goes to ``skipped``."""
    extra = getattr(step, "extra", None)
    if extra is None:
        return {}

    def described(value: Any) -> Any:
        if isinstance(value, Blob):
            return value.descriptor()
        if isinstance(value, dict):
            return {k: described(v) for k, v in value.items()}
        if isinstance(value, list):
            return [described(v) for v in value]
        return value

    if extra.unrecorded:
        step.skipped["scheduler_state"] = "not recorded: " + ", ".join(extra.unrecorded)
    return {"state": described(extra.state), "step_args": dict(extra.args),
            "noise": [{"source": source, "tensor": blob.descriptor()} for source, blob in extra.noise]}


def _noise_streams(rec: Any, streams: list[str]) -> list[tuple[str, Any]]:
    """(stream, its noise) in order: the draws the noise check found each stream made of (a VAE's draw before it
    skipped, one generator per image joined on the batch), else the k-th draw for the k-th stream."""
    import torch

    if not streams or not set(streams) <= set(rec.stream_draws):  # a stream made of no draw: as before, k for k
        return [(s, d) for s, (_, d) in zip(streams, rec.draws)]
    found = []
    for s in streams:
        parts = [rec.draws[k][1] for k in rec.stream_draws[s]]
        found.append((s, torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]))
    return found


def _noise_digest(rec: Any, noise_streams: list, check: dict) -> str | None:
    """The recipe digest of the drawn noise: of the float32 draws themselves, or, for a pipeline that drew in
    bf16/fp16 (the recipe's numbers rounded, as the check found), of the float32 recipe they were cast from."""
    from ikdata.diffusion import noise as noise_mod

    if not noise_streams:
        return None
    if all(str(d.dtype) == "torch.float32" for _, d in noise_streams):
        return noise_mod.digest((s, tuple(d.shape), d) for s, d in noise_streams)
    seed = _seed(rec)
    if seed is None or not check or not all(check.values()):
        return None
    return noise_mod.recipe_digest(seed, [noise_mod.Stream(s, tuple(d.shape)) for s, d in noise_streams])


def _seed(rec: Any) -> int | None:
    generator = rec.bound.get("generator")
    if isinstance(generator, list) and generator:
        generator = generator[0]
    try:
        return int(generator.initial_seed()) if generator is not None else None
    except (AttributeError, RuntimeError):
        return None


def _request(rec: Any, expected: int) -> dict:
    b = rec.bound
    generator = b.get("generator")
    if isinstance(generator, list) and generator:
        generator = generator[0]
    request: dict[str, Any] = {
        "steps": expected,
        **({"start": _start(rec)} if _start(rec) else {}),
        "num_inference_steps": _int(b.get("num_inference_steps")),
        "height": _int(b.get("height")), "width": _int(b.get("width")),
        "frames": _int(b.get("num_frames")),
        "fps": _float(b.get("frame_rate", b.get("fps"))),
        "guidance_scale": _float(b.get("guidance_scale")),
        "seed": _seed(rec),
        "generator_device": str(generator.device) if hasattr(generator, "device") else None,
        "output_type": b.get("output_type") if isinstance(b.get("output_type"), str) else None,
        "request_id": rec.request_id if isinstance(rec.request_id, (str, int)) else None,
    }
    for name in _GUIDANCE_FIELDS:  # what step replay needs to rebuild the step's out from the denoiser's
        if _float(b.get(name)) is not None:
            request[name] = _float(b.get(name))
    unet = getattr(rec.pipe, "unet", None)
    if request["height"] is None and unet is not None:
        size = unet.config.get("sample_size")
        if isinstance(size, int):
            request["height"] = request["width"] = size
    for name in ("prompt", "negative_prompt"):
        value = b.get(name)
        if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            request[name] = value
    for name in ("prompt_embeds", "negative_prompt_embeds"):
        value = b.get(name)
        if hasattr(value, "dtype") and hasattr(value, "shape"):
            from ikdata.core.store import raw_tensor

            request[f"{name}_digest"] = raw_tensor(value).digest
    return request


_GUIDANCE_FIELDS = ("true_cfg_scale", "guidance_rescale", "audio_guidance_scale", "audio_guidance_rescale", "stg_scale",
                    "audio_stg_scale", "modality_scale", "audio_modality_scale")


def _provenance(rec: Any) -> dict:
    probe = getattr(getattr(rec, "capturer", None), "ranks", None)  # rank and world size, as operator receipts
    ranks = probe.current().facts() if probe is not None else {}
    return {"engine": rec.library.name, "engine_version": rec.library.version(),
            "model": _pipeline(rec)["model"], "request_id": rec.request_id, "captured_at": time.time(),
            "process_id": os.getpid(), **ranks}


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return finite_json(value)  # a tagged string: the id and the written record agree (core/digest.py)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


__all__ = ["Blob", "BlobQueue", "write_trajectory"]
