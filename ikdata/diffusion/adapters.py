"""What cannot be discovered from a pipeline call: declared per family, small, in one place.

Step replay discovers a pipeline's streams, its denoiser calls and its guidance from the call itself
(:mod:`ikdata.diffusion.discovery`, :mod:`ikdata.diffusion.replay`). Two things are declared here:

- **refusals**: pipelines whose denoising a trajectory cannot describe with one denoiser (a second
  transformer that takes over mid-schedule, a prior and a decoder), refused at capture time with the
  reason, which the trajectory carries (``skipped.denoiser``) and replay repeats;
- **layouts of the initial noise**: how a pipeline turns the drawn noise into its first latents
  (packing, ``init_noise_sigma``), for the noise check (:func:`noise_layouts`).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterator

# pipeline class -> why its trajectories get no denoiser workloads (the exotic ones of diffusers' pipelines/)
REFUSED: dict[str, str] = {
    "StableCascadePriorPipeline": "a prior network (StableCascadeUNet 'prior'), not a denoiser of image latents",
    "StableCascadeDecoderPipeline": "the decoder is conditioned on a prior's image embeddings passed per step",
    "StableCascadeCombinedPipeline": "two pipelines (prior and decoder) in one call: only the outer call is recorded",
    "KandinskyPriorPipeline": "a prior transformer over CLIP embeddings, not a denoiser of latents",
    "KandinskyV22PriorPipeline": "a prior transformer over CLIP embeddings, not a denoiser of latents",
    "ShapEPipeline": "a prior over implicit-function parameters, rendered afterwards",
    "ShapEImg2ImgPipeline": "a prior over implicit-function parameters, rendered afterwards",
    "WuerstchenPriorPipeline": "a prior network, not a denoiser of latents",
    "WuerstchenCombinedPipeline": "two pipelines (prior and decoder) in one call: only the outer call is recorded",
    "UnCLIPPipeline": "three denoisers (prior, decoder, super-resolution) in one call",
}
SECOND_DENOISERS = ("transformer_2", "unet_2", "prior")


def refusal(pipe: Any) -> str | None:
    """Why this pipeline's denoiser calls are not recorded as workloads, or None."""
    name = type(pipe).__name__
    reason = REFUSED.get(name)
    if reason:
        return f"{name}: {reason}; ikdata records its scheduler steps only"
    for attribute in SECOND_DENOISERS:
        if getattr(pipe, attribute, None) is not None:
            return (f"{name} has a second denoiser ({attribute}) that takes over during the schedule (e.g. Wan 2.2's "
                    "high- and low-noise transformers); a trajectory names one denoiser model, so ikdata records the "
                    "scheduler steps only")
    return None


def noise_layouts(pipe: Any, stream: str, drawn: Any) -> Iterator[tuple[str, Any]]:
    """(name, tensor) candidates for a stream's first latents made from the drawn noise: as drawn, packed by the
    pipeline's own ``_pack_latents`` (LTX, LTX-2, Flux: bound by parameter name), and each scaled by the
    scheduler's ``init_noise_sigma`` (Euler, Karras-sigma schedulers), as the pipeline multiplies it."""
    layouts: list[tuple[str, Any]] = [("as drawn", drawn)]
    pack = getattr(pipe, "_pack_audio_latents" if stream == "audio" else "_pack_latents", None)
    if callable(pack):
        packed = _call_packing(pack, pipe, drawn, defaults=stream != "audio")
        if packed is not None:
            layouts.append(("packed", packed))
    half = _half_dtype(pipe)
    if half is not None and drawn.dtype != half:  # Mochi: drawn in float32, cast to the model's dtype, stepped up
        layouts += [(f"{name}, cast to {half}", tensor.to(half)) for name, tensor in list(layouts)]
    scheduler = getattr(pipe, "scheduler", None)
    sigma = getattr(scheduler, "init_noise_sigma", 1.0)
    for name, tensor in layouts:
        yield name, tensor
    if not _is_one(sigma):
        for name, tensor in layouts:
            yield f"{name}, times init_noise_sigma", tensor * sigma


def _half_dtype(pipe: Any) -> Any:
    """The denoiser's dtype when it is a half precision (bf16, fp16), else None."""
    import torch

    from ikdata.diffusion.denoisers import denoiser_of

    try:
        dtype = next(denoiser_of(pipe).parameters()).dtype
    except Exception:  # noqa: BLE001 - no denoiser or no parameters: no cast candidate
        return None
    return dtype if dtype in (torch.bfloat16, torch.float16) else None


def _is_one(value: Any) -> bool:
    try:
        return float(value) == 1.0
    except (TypeError, ValueError):
        return False


def _call_packing(pack: Callable, pipe: Any, drawn: Any, *, defaults: bool = True) -> Any:
    """``pack(drawn, ...)`` with its other parameters filled by name from the latents' shape and the pipeline
    (those with a default too, unless ``defaults`` is false: LTX-2's audio packing takes its own)."""
    try:
        params = list(inspect.signature(pack).parameters.values())
    except (TypeError, ValueError):
        return None
    shape = tuple(drawn.shape)
    known = {"batch_size": shape[0], "num_channels_latents": shape[1], "height": shape[-2], "width": shape[-1],
             "num_frames": shape[2] if len(shape) == 5 else None,
             "patch_size": getattr(pipe, "transformer_spatial_patch_size", 1),
             "patch_size_t": getattr(pipe, "transformer_temporal_patch_size", 1)}
    args = [drawn]
    for param in params[1:]:
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            break
        if param.default is not param.empty and not defaults:
            break
        if param.name in known and known[param.name] is not None:
            args.append(known[param.name])
        elif param.default is not param.empty:
            break
        else:
            return None
    try:
        return pack(*args)
    except Exception:  # noqa: BLE001  another packing than its parameter names suggest: not a candidate
        return None


__all__ = ["REFUSED", "noise_layouts", "refusal"]
