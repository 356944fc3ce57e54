"""Tiny pipelines of the round-three tests (random weights from config, CPU, offline): Lumina2 (two calls a step,
normalized and negated CFG), and engines wrong at one call of one step or guided by a form ikdata does not
rebuild."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

STEPS = 4


def _gen(seed: int) -> Any:
    import torch

    return torch.Generator("cpu").manual_seed(seed)


def _embeds(*shape: int, seed: int = 1) -> Any:
    import torch

    return torch.randn(*shape, generator=_gen(seed))


def lumina2(*, steps: int = STEPS) -> tuple[Any, dict]:
    """Lumina2Pipeline: a conditional then an unconditional call a step, CFG normalized to the conditional norm,
    the prediction negated before the scheduler."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, Lumina2Pipeline, Lumina2Transformer2DModel

    torch.manual_seed(0)
    transformer = Lumina2Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, hidden_size=16, num_layers=1,
                                            num_refiner_layers=1, num_attention_heads=2, num_kv_heads=2, multiple_of=16,
                                            cap_feat_dim=16, axes_dim_rope=(4, 2, 2), axes_lens=(32, 32, 32))
    pipe = Lumina2Pipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(), vae=None,
                           text_encoder=None, tokenizer=None)
    pipe.set_progress_bar_config(disable=True)
    mask = torch.ones(1, 6, dtype=torch.long)
    return pipe, dict(prompt_embeds=_embeds(1, 6, 16), prompt_attention_mask=mask,
                      negative_prompt_embeds=_embeds(1, 6, 16, seed=3), negative_prompt_attention_mask=mask,
                      height=64, width=64, num_inference_steps=steps, generator=_gen(5), output_type="latent")


@contextlib.contextmanager
def wrong_call(pipe: Any, *, step: int, call: int, scale: float = 1.1, calls_per_step: int = 2) -> Iterator[None]:
    """Every attention output of the denoiser's ``call``-th forward of ``step`` times ``scale`` (Lumina2: two
    forwards a step)."""
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention
    forwards = [0]
    inside: list[int] = []

    def scaled(*args: Any, **kwargs: Any) -> Any:
        out = sdpa(*args, **kwargs)
        return out * scale if inside and forwards[0] == step * calls_per_step + call else out

    def before(*_: Any) -> None:
        inside.append(1)

    def after(*_: Any) -> None:
        inside.clear()
        forwards[0] += 1

    module = pipe.transformer if getattr(pipe, "transformer", None) is not None else pipe.unet
    hooks = [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    F.scaled_dot_product_attention = scaled
    try:
        yield
    finally:
        F.scaled_dot_product_attention = sdpa
        for hook in hooks:
            hook.remove()


def apg_like(outputs: list, g: float, negate: bool) -> Any:
    """A guidance form ikdata does not model (adaptive projected guidance, no momentum): the difference's
    component along the conditional prediction dropped. ``outputs``: one CFG batch (unconditional first) or two
    calls (conditional first)."""
    uncond, cond = outputs[0].chunk(2) if len(outputs) == 1 else (outputs[1], outputs[0])
    diff = cond - uncond
    dims = list(range(1, cond.dim()))
    parallel = (diff * cond).sum(dim=dims, keepdim=True) / (cond * cond).sum(dim=dims, keepdim=True) * cond
    guided = cond + (g - 1) * (diff - parallel)
    return -guided if negate else guided


@contextlib.contextmanager
def guided_by(pipe: Any, form: Any, *, steps: Any = None) -> Iterator[None]:
    """The scheduler fed ``form(outputs)`` of the step's denoiser outputs (every step, or those in ``steps``)
    instead of the pipeline's own guidance: the guidance dropped, or a form ikdata does not rebuild. The
    class-level capture patch stays inside the replaced step, so capture records what the scheduler was fed."""
    sched = pipe.scheduler
    cls = type(sched)
    patched = cls.__dict__["step"]
    index = [0]
    outputs: list[Any] = []

    def step_(self: Any, model_output: Any, *args: Any, **kwargs: Any) -> Any:
        if self is not sched:
            return patched(self, model_output, *args, **kwargs)
        try:
            if outputs and (steps is None or index[0] in steps):
                model_output = form(outputs).to(model_output.dtype)
            return patched(self, model_output, *args, **kwargs)
        finally:
            outputs.clear()
            index[0] += 1

    def after(module: Any, args: Any, output: Any) -> None:
        outputs.append(output[0] if isinstance(output, tuple) else output.sample)

    module = pipe.transformer if getattr(pipe, "transformer", None) is not None else pipe.unet
    hook = module.register_forward_hook(after)
    cls.step = step_
    try:
        yield
    finally:
        cls.step = patched
        hook.remove()


def conditional_alone(outputs: list, *, negate: bool = False) -> Any:
    """The guidance dropped: the conditional prediction alone (negated where the pipeline negates)."""
    cond = outputs[0] if len(outputs) > 1 else outputs[0].chunk(2)[1]
    return -cond if negate else cond


@contextlib.contextmanager
def wrong_sigma_in_table(pipe: Any, *, index: int, factor: float = 0.9) -> Iterator[None]:
    """The scheduler's sigma table wrong at ``index`` for the whole call (set after the pipeline's set_timesteps):
    the step that ends there (its sigma_next) and the step that starts there (its sigma) use it, and capture
    records it."""
    sched = pipe.scheduler
    original = type(sched).set_timesteps

    def set_timesteps(*args: Any, **kwargs: Any) -> Any:
        result = original(sched, *args, **kwargs)
        sched.sigmas[index] *= factor
        return result

    sched.set_timesteps = set_timesteps
    try:
        yield
    finally:
        del sched.set_timesteps


def _sd_unet() -> Any:
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    return UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                norm_num_groups=4, attention_head_dim=4)


def sd_img2img_pixels(*, strength: float = 0.5, steps: int = STEPS, generators: int = 1) -> tuple[Any, dict]:
    """StableDiffusionImg2ImgPipeline given a pixel image: its VAE encodes it and draws ``latent_dist.sample(generator)``
    from the generator before the pipeline draws the noise. ``generators``: one generator per image (a list)."""
    import torch
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionImg2ImgPipeline

    torch.manual_seed(0)
    vae = AutoencoderKL(block_out_channels=(4, 4), down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, norm_num_groups=2,
                        layers_per_block=1)
    pipe = StableDiffusionImg2ImgPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=_sd_unet(),
                                          scheduler=EulerDiscreteScheduler(num_train_timesteps=100, steps_offset=1),
                                          safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    image = torch.rand(generators, 3, 16, 16, generator=_gen(9))  # pixels in [0, 1]
    generator = _gen(21) if generators == 1 else [_gen(21 + i) for i in range(generators)]
    return pipe, dict(prompt_embeds=_embeds(generators, 6, 16), negative_prompt_embeds=_embeds(generators, 6, 16, seed=3),
                      image=image, num_inference_steps=steps, guidance_scale=4.0, strength=strength,
                      generator=generator, output_type="latent")


def sd_generator_list(*, steps: int = STEPS, images: int = 2) -> tuple[Any, dict]:
    """StableDiffusionPipeline making ``images`` images, one generator each (``generator=[g0, g1]``)."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline

    pipe = StableDiffusionPipeline(vae=None, text_encoder=None, tokenizer=None, unet=_sd_unet(),
                                   scheduler=EulerDiscreteScheduler(num_train_timesteps=100, steps_offset=1),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe, dict(prompt_embeds=_embeds(1, 6, 16), negative_prompt_embeds=_embeds(1, 6, 16, seed=3), height=64,
                      width=64, num_inference_steps=steps, guidance_scale=4.0, num_images_per_prompt=images,
                      generator=[_gen(31 + i) for i in range(images)], output_type="latent")


def mochi(*, steps: int = 3, dtype: str = "bfloat16") -> tuple[Any, dict]:
    """MochiPipeline in ``dtype``: noise drawn in float32 and cast to the transformer's dtype; every scheduler step
    taken in float32 on the latents cast up, its result cast back (a mixed-precision stepper)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, MochiPipeline, MochiTransformer3DModel

    torch.manual_seed(0)
    transformer = MochiTransformer3DModel(patch_size=2, num_attention_heads=2, attention_head_dim=8, num_layers=1,
                                          pooled_projection_dim=16, in_channels=4, text_embed_dim=16,
                                          time_embed_dim=4, max_sequence_length=6).to(getattr(torch, dtype))
    pipe = MochiPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=None, text_encoder=None, tokenizer=None,
                         transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    mask = torch.ones(1, 6, dtype=torch.long)
    cast = getattr(torch, dtype)
    return pipe, dict(prompt_embeds=_embeds(1, 6, 16).to(cast), prompt_attention_mask=mask,
                      negative_prompt_embeds=_embeds(1, 6, 16, seed=3).to(cast), negative_prompt_attention_mask=mask,
                      height=32, width=32, num_frames=7, num_inference_steps=steps, guidance_scale=4.5,
                      generator=_gen(7), output_type="latent")


def kandinsky3(*, steps: int = STEPS) -> tuple[Any, dict]:
    """Kandinsky3Pipeline (DDPM): a CFG batch guided as ``(g + 1) * cond - g * uncond``."""
    import torch
    from diffusers import DDPMScheduler, Kandinsky3Pipeline, Kandinsky3UNet

    torch.manual_seed(0)
    unet = Kandinsky3UNet(in_channels=4, time_embedding_dim=4, groups=2, attention_head_dim=4, layers_per_block=3,
                          block_out_channels=(32, 64), cross_attention_dim=4, encoder_hid_dim=32)
    pipe = Kandinsky3Pipeline(tokenizer=None, text_encoder=None, unet=unet, movq=None,
                              scheduler=DDPMScheduler(num_train_timesteps=100, steps_offset=1))
    pipe.set_progress_bar_config(disable=True)
    mask = torch.ones(1, 6, dtype=torch.long)
    return pipe, dict(prompt_embeds=_embeds(1, 6, 32), negative_prompt_embeds=_embeds(1, 6, 32, seed=3),
                      attention_mask=mask, negative_attention_mask=mask, height=64, width=64,
                      num_inference_steps=steps, guidance_scale=3.0, generator=_gen(17), output_type="latent")


def sd_ip_adapter(*, folder: Any, steps: int = 3) -> tuple[Any, dict]:
    """StableDiffusionPipeline with an IP-Adapter loaded (random weights written as a safetensors file in ``folder``
    and loaded by ``load_ip_adapter``), called with image embeddings: its projection runs inside the UNet at every
    step."""
    from pathlib import Path

    import torch
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline
    from safetensors.torch import save_file

    unet = _sd_unet()
    pipe = StableDiffusionPipeline(vae=None, text_encoder=None, tokenizer=None, unet=unet,
                                   scheduler=EulerDiscreteScheduler(num_train_timesteps=100, steps_offset=1),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    g = _gen(41)
    weights = {"image_proj.proj.weight": torch.randn(64, 8, generator=g), "image_proj.proj.bias": torch.zeros(64),
               "image_proj.norm.weight": torch.ones(16), "image_proj.norm.bias": torch.zeros(16)}
    for i, name in enumerate(unet.attn_processors):  # the key and value projections of every cross-attention
        if name.endswith("attn2.processor"):
            hidden = unet.get_submodule(name.rsplit(".processor", 1)[0]).to_q.out_features
            weights[f"ip_adapter.{i}.to_k_ip.weight"] = torch.randn(hidden, 16, generator=g) * 0.1
            weights[f"ip_adapter.{i}.to_v_ip.weight"] = torch.randn(hidden, 16, generator=g) * 0.1
    Path(folder).mkdir(parents=True, exist_ok=True)
    save_file(weights, str(Path(folder) / "ip.safetensors"))
    pipe.load_ip_adapter(folder, subfolder="", weight_name="ip.safetensors", image_encoder_folder=None)
    pipe.set_progress_bar_config(disable=True)
    return pipe, dict(prompt_embeds=_embeds(1, 6, 16), negative_prompt_embeds=_embeds(1, 6, 16, seed=3), height=64,
                      width=64, num_inference_steps=steps, guidance_scale=4.0,
                      ip_adapter_image_embeds=[_embeds(2, 1, 8, seed=4)], generator=_gen(14), output_type="latent")
