"""Tiny img2img and inpainting pipelines (Stable Diffusion's UNet, random weights from config, no VAE): the image
is given as latents (4 channels: Diffusers takes it as already encoded), the mask and the masked image's latents
too, so the pipeline starts part-way through its schedule (``strength`` < 1) from a noised latent."""

from __future__ import annotations

from typing import Any

import pipes_tiny


def _unet(in_channels: int) -> Any:
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    return UNet2DConditionModel(sample_size=8, in_channels=in_channels, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                norm_num_groups=4, attention_head_dim=4)


def _common(strength: float, steps: int) -> dict[str, Any]:
    return dict(prompt_embeds=pipes_tiny._embeds(1, 6, 16), negative_prompt_embeds=pipes_tiny._embeds(1, 6, 16, seed=3),
                num_inference_steps=steps, guidance_scale=4.0, strength=strength, generator=pipes_tiny._gen(21),
                output_type="latent")


def img2img(*, strength: float = 0.6, steps: int = 5) -> tuple[Any, dict]:
    """StableDiffusionImg2ImgPipeline (Euler): the image's latents noised to the schedule's start."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionImg2ImgPipeline

    pipe = StableDiffusionImg2ImgPipeline(vae=None, text_encoder=None, tokenizer=None, unet=_unet(4),
                                          scheduler=EulerDiscreteScheduler(num_train_timesteps=100, steps_offset=1),
                                          safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe, dict(image=pipes_tiny._embeds(1, 4, 8, 8, seed=5), **_common(strength, steps))


def inpaint(*, strength: float = 0.6, steps: int = 5) -> tuple[Any, dict]:
    """StableDiffusionInpaintPipeline with a 9-channel UNet (latents, mask, masked image's latents) and DDIM."""
    import torch
    from diffusers import DDIMScheduler, StableDiffusionInpaintPipeline

    from diffusers import AutoencoderKL

    torch.manual_seed(0)  # a VAE of two blocks (latents at half the size): the pipeline reads its config; nothing is
    vae = AutoencoderKL(block_out_channels=(4, 4), down_block_types=("DownEncoderBlock2D",) * 2,  # encoded by it
                        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, norm_num_groups=2,
                        layers_per_block=1)
    pipe = StableDiffusionInpaintPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=_unet(9),
                                          scheduler=DDIMScheduler(num_train_timesteps=100, steps_offset=1),
                                          safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    mask = torch.zeros(1, 1, 16, 16)
    mask[..., 4:12, 4:12] = 1.0
    return pipe, dict(image=pipes_tiny._embeds(1, 4, 8, 8, seed=5), mask_image=mask, height=16, width=16,
                      masked_image_latents=pipes_tiny._embeds(1, 4, 8, 8, seed=6), **_common(strength, steps))
