"""The tiny pipelines of :mod:`pipes_tiny` in another dtype: weights and text embeddings cast, the noise drawn
by the pipeline in that dtype (Diffusers' ``randn_tensor`` draws in the latents' dtype: the recipe, cast)."""

from __future__ import annotations

from typing import Any

import pipes_tiny

FAMILIES = {"sd": "UNet (UNet2DConditionModel, Euler)", "pixart-sigma": "DiT (PixArtTransformer2DModel, DDIM)",
            "sd3": "flow matching (SD3Transformer2DModel, flow Euler)"}
DTYPES = ("float32", "bfloat16", "float16")


def build(name: str, dtype: str, *, guidance: bool = True, **build_kwargs: Any) -> tuple[Any, dict]:
    """Pipeline ``name`` of :data:`pipes_tiny.BUILDERS` in ``dtype``; without ``guidance`` its scale is 1 (no CFG)."""
    import torch

    pipe, kwargs = pipes_tiny.BUILDERS[name](**build_kwargs)
    dt = getattr(torch, dtype)
    pipe.to(dt)
    for key, value in list(kwargs.items()):
        if torch.is_tensor(value) and value.is_floating_point():
            kwargs[key] = value.to(dt)
    if not guidance:
        kwargs["guidance_scale"] = 1.0
    return pipe, kwargs
