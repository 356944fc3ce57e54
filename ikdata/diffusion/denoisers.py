"""Denoisers of Diffusers pipelines and the shipped definitions their forward calls are workloads of.

LTX-2, LTX and UNet2DModel map their forward call (as the pipeline makes it) to the inputs and outputs
of a shipped definition under ``definitions/diffusion/`` (``op_type`` ``denoiser``), whose reference
needs the model. Every other Diffusers model (a ``ModelMixin``) is mapped from the call itself
(:mod:`ikdata.diffusion.discovery`): its arguments are the inputs of a definition made for the
call's structure. A pipeline ikdata refuses (:mod:`ikdata.diffusion.adapters`) is captured in the
trajectory only, and the trajectory says why no denoiser workload was written.
"""

from __future__ import annotations

import functools
from typing import Any

from ikdata.core.definitions import SHIPPED, Definition, read_folder, shipped_folder

_SUFFIX = {"torch.float32": "f32", "torch.bfloat16": "bf16", "torch.float16": "f16"}
# denoiser class -> (definition stem, name of the input whose dtype picks the definition)
_FAMILIES = {
    "LTX2VideoTransformer3DModel": ("ltx2_av_transformer", "hidden_states"),
    "LTXVideoTransformer3DModel": ("ltx_video_transformer", "hidden_states"),
    "UNet2DModel": ("unet2d", "sample"),
}


@functools.cache
def shipped() -> dict[str, Definition]:
    """The shipped diffusion definitions by name (scheduler steps and denoisers)."""
    found, _ = read_folder(shipped_folder() / "diffusion", origin=SHIPPED)
    return found


def denoiser_of(pipe: Any) -> Any:
    """The pipeline's denoiser module (``transformer`` or ``unet``), or None."""
    for name in ("transformer", "unet"):
        module = getattr(pipe, name, None)
        if module is not None:
            return module
    return None


def known(module: Any) -> bool:
    """Whether ikdata maps this denoiser's calls: a shipped family, or any Diffusers model (discovered)."""
    return type(module).__name__ in _FAMILIES or any(c.__name__ == "ModelMixin" for c in type(module).__mro__)


def definition_for(module: Any, dtype: Any) -> Definition | None:
    family = _FAMILIES.get(type(module).__name__)
    if family is None or dtype is None:
        return None
    return shipped().get(f"{family[0]}_{_SUFFIX.get(str(dtype), str(dtype))}")


def map_call(module: Any, args: tuple, kwargs: dict, output: Any) -> tuple[Definition, dict, dict] | None:
    """(definition, inputs, outputs) of one forward call, or None when the call does not fit a mapping.

    Raises:
        KeyError, TypeError: the call lacks an argument the definition needs (the recorder notes it).
        ValueError: an argument of a discovered call that cannot be recorded (the recorder notes it).
    """
    name = type(module).__name__
    if name == "UNet2DModel":
        sample = kwargs.get("sample", args[0] if args else None)
        timestep = kwargs.get("timestep", args[1] if len(args) > 1 else None)
        import torch

        if not torch.is_tensor(timestep):
            timestep = torch.tensor(timestep, dtype=torch.int64)
        out = output[0] if isinstance(output, tuple) else output.sample
        definition = definition_for(module, sample.dtype)
        if definition is None or timestep.dim() != 0:
            return None
        return definition, {"sample": sample, "timestep": timestep.to(torch.int64)}, {"out": out}
    if name == "LTXVideoTransformer3DModel":
        hidden = kwargs["hidden_states"]
        definition = definition_for(module, hidden.dtype)
        scale = kwargs.get("rope_interpolation_scale")
        if definition is None or scale is None or len(scale) != 3:
            return None
        inputs = {k: kwargs[k] for k in ("hidden_states", "encoder_hidden_states", "timestep",
                                         "encoder_attention_mask", "num_frames", "height", "width")}
        inputs.update(rope_scale_t=float(scale[0]), rope_scale_h=float(scale[1]), rope_scale_w=float(scale[2]))
        out = output[0] if isinstance(output, tuple) else output.sample
        return definition, inputs, {"out": out}
    if name == "LTX2VideoTransformer3DModel":
        hidden = kwargs["hidden_states"]
        definition = definition_for(module, hidden.dtype)
        if definition is None or kwargs.get("spatio_temporal_guidance_blocks") or \
                kwargs.get("perturbation_mask") is not None:
            return None
        inputs = {k: kwargs[k] for k in definition.inputs}
        inputs["fps"] = float(inputs["fps"])
        video, audio = (output[0], output[1]) if isinstance(output, tuple) else (output.sample, output.audio_sample)
        return definition, inputs, {"out": video, "audio_out": audio}
    if name in _FAMILIES:
        return None
    from ikdata.diffusion import discovery

    call = discovery.flatten(module, args, kwargs)
    outputs = discovery.outputs_of(output)
    return discovery.definition_for(module, call, outputs), call.values, outputs


__all__ = ["shipped", "denoiser_of", "known", "definition_for", "map_call"]
