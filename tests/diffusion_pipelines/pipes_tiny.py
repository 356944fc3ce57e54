"""Tiny Diffusers pipelines of many families, built from config with random weights (CPU, offline).

Each builder returns (pipe, call_kwargs) for one small call: 1 layer, 8-16 hidden, 8x8 latents, a few
steps, text embeddings passed in (the text encoders are not needed to judge the denoiser), latents
returned (``output_type="latent"``: no VAE). Used by the judging tests of this folder.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "diffusion"))
import tiny  # noqa: E402  (the capture tests' LTX-2, LTX and DDIM builders)

STEPS = 4


def _gen(seed: int) -> Any:
    import torch

    return torch.Generator("cpu").manual_seed(seed)


def _embeds(*shape: int, seed: int = 1) -> Any:
    import torch

    return torch.randn(*shape, generator=_gen(seed))


def flux(*, true_cfg: bool = False, steps: int = STEPS) -> tuple[Any, dict]:
    """FluxPipeline: packed 2x2 latents; with ``true_cfg`` two forwards per step (negative prompt)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                         attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                         pooled_projection_dim=16, guidance_embeds=False, axes_dims_rope=(2, 2, 4))
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=None, text_encoder=None, tokenizer=None,
                        text_encoder_2=None, tokenizer_2=None, transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    kwargs: dict[str, Any] = dict(prompt_embeds=_embeds(1, 6, 16), pooled_prompt_embeds=_embeds(1, 16, seed=2),
                                  height=64, width=64, num_inference_steps=steps, generator=_gen(11),
                                  output_type="latent", max_sequence_length=6)
    if true_cfg:
        kwargs.update(negative_prompt_embeds=_embeds(1, 6, 16, seed=3),
                      negative_pooled_prompt_embeds=_embeds(1, 16, seed=4), true_cfg_scale=3.0)
    return pipe, kwargs


def sd3(*, steps: int = STEPS) -> tuple[Any, dict]:
    """StableDiffusion3Pipeline: CFG batch, the scheduler's own shifted schedule."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(sample_size=8, patch_size=1, in_channels=4, num_layers=1, attention_head_dim=8,
                                        num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16,
                                        pooled_projection_dim=16, out_channels=4, pos_embed_max_size=16)
    pipe = StableDiffusion3Pipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
                                    vae=None, text_encoder=None, tokenizer=None, text_encoder_2=None,
                                    tokenizer_2=None, text_encoder_3=None, tokenizer_3=None)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt_embeds=_embeds(1, 6, 16), pooled_prompt_embeds=_embeds(1, 16, seed=2),
                  negative_prompt_embeds=_embeds(1, 6, 16, seed=3), negative_pooled_prompt_embeds=_embeds(1, 16, seed=4),
                  height=64, width=64, num_inference_steps=steps, guidance_scale=4.0, generator=_gen(12),
                  output_type="latent")
    return pipe, kwargs


def wan(*, steps: int = STEPS) -> tuple[Any, dict]:
    """WanPipeline (video): two forwards per step (conditional, then unconditional)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel

    torch.manual_seed(0)
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8,
                                        in_channels=4, out_channels=4, text_dim=16, freq_dim=16, ffn_dim=16,
                                        num_layers=1, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        rope_max_seq_len=32)
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=transformer,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt_embeds=_embeds(1, 6, 16), negative_prompt_embeds=_embeds(1, 6, 16, seed=3), height=64,
                  width=64, num_frames=5, num_inference_steps=steps, guidance_scale=4.0, generator=_gen(13),
                  output_type="latent")
    return pipe, kwargs


def sd(*, steps: int = STEPS, scheduler: Any = None) -> tuple[Any, dict]:
    """StableDiffusionPipeline (UNet2DConditionModel): CFG batch; Euler scales the noise by init_noise_sigma and the
    model input by scale_model_input."""
    import torch
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                norm_num_groups=4, attention_head_dim=4)
    pipe = StableDiffusionPipeline(vae=None, text_encoder=None, tokenizer=None, unet=unet,
                                   scheduler=scheduler or EulerDiscreteScheduler(num_train_timesteps=100, steps_offset=1),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt_embeds=_embeds(1, 6, 16), negative_prompt_embeds=_embeds(1, 6, 16, seed=3), height=64,
                  width=64, num_inference_steps=steps, guidance_scale=4.0, generator=_gen(14), output_type="latent")
    return pipe, kwargs


def cogvideox(*, steps: int = STEPS) -> tuple[Any, dict]:
    """CogVideoXPipeline (video, DDIM-style scheduler, v-prediction): CFG batch."""
    import torch
    from diffusers import CogVideoXDDIMScheduler, CogVideoXPipeline, CogVideoXTransformer3DModel

    torch.manual_seed(0)
    transformer = CogVideoXTransformer3DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                              out_channels=4, time_embed_dim=8, text_embed_dim=16, num_layers=1,
                                              sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
                                              temporal_compression_ratio=4, max_text_seq_length=6)
    pipe = CogVideoXPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=transformer,
                             scheduler=CogVideoXDDIMScheduler(num_train_timesteps=100, prediction_type="v_prediction",
                                                              timestep_spacing="trailing"))
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt_embeds=_embeds(1, 6, 16), negative_prompt_embeds=_embeds(1, 6, 16, seed=3), height=64,
                  width=64, num_frames=9, num_inference_steps=steps, guidance_scale=4.0, generator=_gen(15),
                  output_type="latent")
    return pipe, kwargs


def pixart_sigma(*, steps: int = STEPS) -> tuple[Any, dict]:
    """PixArtSigmaPipeline: CFG batch, attention masks, learned sigma (the output's second half is dropped)."""
    import torch
    from diffusers import DDIMScheduler, PixArtSigmaPipeline, PixArtTransformer2DModel

    torch.manual_seed(0)
    transformer = PixArtTransformer2DModel(sample_size=8, num_layers=1, num_attention_heads=2, attention_head_dim=8,
                                           in_channels=4, out_channels=8, cross_attention_dim=16, caption_channels=16,
                                           patch_size=2, norm_type="ada_norm_single", use_additional_conditions=False)
    pipe = PixArtSigmaPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=transformer,
                               scheduler=DDIMScheduler(num_train_timesteps=100))
    pipe.set_progress_bar_config(disable=True)
    mask = torch.ones(1, 6, dtype=torch.long)
    kwargs = dict(prompt_embeds=_embeds(1, 6, 16), prompt_attention_mask=mask,
                  negative_prompt_embeds=_embeds(1, 6, 16, seed=3), negative_prompt_attention_mask=mask, height=64,
                  width=64, num_inference_steps=steps, guidance_scale=4.0, generator=_gen(16), output_type="latent",
                  use_resolution_binning=False, negative_prompt=None)
    return pipe, kwargs


def ddpm(*, steps: int = STEPS) -> tuple[Any, dict]:
    """DDPMPipeline (UNet2DModel, a stochastic scheduler: each step adds noise)."""
    import torch
    from diffusers import DDPMPipeline, DDPMScheduler

    pipe, kwargs = tiny.ddim(steps=steps)
    pipe = DDPMPipeline(unet=pipe.unet, scheduler=DDPMScheduler(num_train_timesteps=100))
    pipe.set_progress_bar_config(disable=True)
    kwargs["generator"] = torch.Generator("cpu").manual_seed(3)
    return pipe, kwargs


BUILDERS: dict[str, Callable[..., tuple[Any, dict]]] = {
    "flux": flux, "flux-true-cfg": lambda **kw: flux(true_cfg=True, **kw), "sd3": sd3, "wan": wan, "sd": sd,
    "cogvideox": cogvideox, "pixart-sigma": pixart_sigma,
    "ltx": lambda steps=STEPS: tiny.ltx(steps=steps), "ltx2": lambda steps=STEPS: tiny.ltx2(steps=steps),
    "ddim": lambda steps=STEPS: tiny.ddim(steps=steps), "ddpm": ddpm}
