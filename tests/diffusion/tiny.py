"""Tiny Diffusers pipelines built from config with random weights (CPU, offline), for the diffusion tests.

Each builder returns (pipe, call_kwargs): the pipeline and the arguments of one small call, with text
embeddings passed directly (no text encoder, nothing downloaded).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "examples"))
import tiny_video  # noqa: E402  (the example's tiny LTX-2, so tests and demo build the same pipeline)


def ltx2(*, seed: int = 7, steps: int = 3, layers: int = 2, heads: int = 2, head_dim: int = 8,
         size: int = 32, frames: int = 9) -> tuple[Any, dict]:
    """LTX2Pipeline (video and audio): the transformer, connectors, both VAEs and the vocoder, tiny."""
    import torch

    caption, text_layers = 32, 2  # as tiny_video.build makes them
    pipe = tiny_video.build(layers=layers, heads=heads, head_dim=head_dim)  # the example's pipeline, one builder
    g = torch.Generator("cpu").manual_seed(1)
    embeds = torch.randn(1, 16, caption * (text_layers + 1), generator=g)
    mask = torch.ones(1, 16, dtype=torch.long)
    kwargs = dict(prompt_embeds=embeds, prompt_attention_mask=mask, negative_prompt_embeds=torch.zeros_like(embeds),
                  negative_prompt_attention_mask=mask, generator=torch.Generator("cpu").manual_seed(seed),
                  num_inference_steps=steps, guidance_scale=3.0, height=size, width=size, num_frames=frames,
                  frame_rate=25.0, stg_scale=0.0, audio_stg_scale=0.0, modality_scale=1.0, audio_modality_scale=1.0, output_type="np",
                  return_dict=False)
    return pipe, kwargs


def ltx(*, seed: int = 5, steps: int = 3) -> tuple[Any, dict]:
    """LTXPipeline (video only)."""
    import torch
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline, LTXVideoTransformer3DModel

    torch.manual_seed(0)
    transformer = LTXVideoTransformer3DModel(
        in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=4, attention_head_dim=8,
        cross_attention_dim=32, num_layers=1, caption_channels=32)
    vae = AutoencoderKLLTXVideo(
        in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
        decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1, 1), spatio_temporal_scaling=(True, True, False, False),
        decoder_spatio_temporal_scaling=(True, True, False, False), decoder_inject_noise=(False, False, False, False, False),
        upsample_residual=(False, False, False, False), upsample_factor=(1, 1, 1, 1), timestep_conditioning=False,
        patch_size=1, patch_size_t=1, encoder_causal=True, decoder_causal=False)
    vae.use_framewise_encoding = False
    vae.use_framewise_decoding = False
    pipe = LTXPipeline(transformer=transformer, vae=vae, scheduler=FlowMatchEulerDiscreteScheduler(),
                       text_encoder=None, tokenizer=None)
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator("cpu").manual_seed(2)
    embeds = torch.randn(1, 8, 32, generator=g)
    mask = torch.ones(1, 8, dtype=torch.long)
    kwargs = dict(prompt_embeds=embeds, prompt_attention_mask=mask, negative_prompt_embeds=torch.zeros_like(embeds),
                  negative_prompt_attention_mask=mask, generator=torch.Generator("cpu").manual_seed(seed),
                  num_inference_steps=steps, guidance_scale=3.0, height=32, width=32, num_frames=9, frame_rate=25,
                  output_type="np", return_dict=False)
    return pipe, kwargs


def ddim(*, seed: int = 3, steps: int = 4) -> tuple[Any, dict]:
    """DDIMPipeline (unconditional images, UNet2DModel): another family, no flow matching."""
    import torch
    from diffusers import DDIMPipeline, DDIMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(8, 16), norm_num_groups=4,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    pipe = DDIMPipeline(unet=unet, scheduler=DDIMScheduler(num_train_timesteps=100))
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(batch_size=1, generator=torch.Generator("cpu").manual_seed(seed), num_inference_steps=steps,
                  output_type="np")
    return pipe, kwargs
