"""A step's denoiser calls as replay feeds them: each call's definition, its inputs and the engine's raw outputs
loaded from the dataset, and the reference's forward of one call (a discovered call by ikdata's own forward of
the recorded Diffusers model, a shipped family by its trusted reference)."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ikdata.core.errors import RecordError
from ikdata.core.records import Scalar, TensorRef
from ikdata.diffusion import floor
from ikdata.diffusion.judge_context import Context


def conditioning(ctx: Context, step: dict, where: str) -> tuple[Any, dict, dict]:
    """(definition, inputs, engine raw outputs) of a step's first denoiser workload."""
    return calls(ctx, step, where)[0]


def calls(ctx: Context, step: dict, where: str) -> list[tuple[Any, dict, dict]]:
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
        found.append((definition, values(ctx, definition.inputs, row.inputs, f"{row.source}:{row.line}"),
                      values(ctx, definition.outputs, receipt.expected_output, f"{receipt.source}:{receipt.line}")))
    return found


def values(ctx: Context, specs: Mapping[str, Any], descriptors: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The values a definition's inputs (or outputs) take from a row's (or receipt's) descriptors, tensors verified.

    Raises:
        RecordError: a missing descriptor, or a 'random' input (which has no data to replay), at ``where``.
    """
    missing = [n for n in specs if n not in descriptors]
    if missing:
        raise RecordError(f"no descriptor for {missing}; the definition needs {list(specs)}", path=where)
    found = {}
    for name in specs:
        descriptor = descriptors[name]
        if isinstance(descriptor, TensorRef):
            found[name] = ctx.tensor(descriptor, where)
        elif isinstance(descriptor, Scalar):
            found[name] = descriptor.value
        else:
            raise RecordError(f"{name!r} is a 'random' input, which has no data to replay", path=where)
    return found


def forward(ctx: Context, definition: Any, inputs: dict, model: dict, attention: str) -> dict[str, torch.Tensor]:
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


__all__ = ["calls", "conditioning", "forward", "values"]
