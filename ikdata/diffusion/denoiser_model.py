"""The trajectory's denoiser as replay runs it: its weights from the dataset (verified) or from the user's
reference pipeline (when their digest is the recorded one), and the same model one precision higher."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ikdata.core.errors import RecordError
from ikdata.core.records import TensorRef
from ikdata.diffusion import trajectories as traj_mod
from ikdata.diffusion.judge_context import Context

HIGHER = {torch.float32: torch.float64, torch.bfloat16: torch.float32, torch.float16: torch.float32}


def load(ctx: Context, record: Mapping[str, Any], where: str | None = None,
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


def cast_up(value: Any, dtype: torch.dtype) -> Any:
    """A floating tensor in ``dtype``; anything else as it is."""
    return value.to(dtype) if torch.is_tensor(value) and value.is_floating_point() else value


def model_in(ctx: Context, model: dict, dtype: torch.dtype) -> dict[str, Any]:
    """``model`` with its floating weights in ``dtype`` (built once per model and dtype: its digest names both)."""
    record = model["record"]
    key = f"{record.get('digest')}@{dtype}"
    found = ctx.higher_models.get(key)
    if found is None:
        state = {n: cast_up(t, dtype) for n, t in model["state_dict"].items()}
        found = ctx.higher_models[key] = {"record": {**record, "digest": key}, "state_dict": state}
    return found


__all__ = ["HIGHER", "cast_up", "load", "model_in"]
