"""What step replay must know of a pipeline family: streams, guidance, schedule, decoding.

A trajectory step stores the latent ``x`` a step started from and the ``out`` the scheduler consumed;
the denoiser workload of the step stores the forward call's conditioning and raw outputs. To rerun
the reference on the trajectory's ``x``, replay must know which forward input and output belong to
which latent stream (:data:`STREAMS`), how the pipeline turns raw outputs into the step's ``out``
(:func:`combinations`: classifier-free guidance in the plain form or in LTX-2's x0 form, or none),
how the reference scheduler builds its schedule (:func:`reference_schedule`), and how the final
latents become frames (:func:`decode`, needs the reference pipeline's VAE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ikdata.core.errors import IkdataError

# Declared hints (:mod:`ikdata.diffusion.streams` discovers the rest): a denoiser whose streams could have equal
# shapes. denoiser class -> stream -> (forward input holding the stream's latents, forward output of that stream)
STREAMS: dict[str, dict[str, tuple[str, str]]] = {
    "LTX2VideoTransformer3DModel": {"video": ("hidden_states", "out"), "audio": ("audio_hidden_states", "audio_out")},
}
SCALES = ("guidance_scale", "true_cfg_scale")  # request fields that scale classifier-free guidance


@dataclass(frozen=True)
class Combination:
    """How a pipeline turns the denoiser's raw outputs of one step (one per call, CFG batch included) into the
    step's ``out``."""

    name: str
    apply: Callable[[list, torch.Tensor, torch.Tensor], torch.Tensor]  # (raws per call, x, sigma) -> out


def guidance(request: dict, pipeline_class: str, stream: str) -> dict[str, Any]:
    """The guidance settings of one stream: the candidate scales (``guidance_scale``, Flux's ``true_cfg_scale``)
    and the rescale, from the request, else the pipeline's defaults (LTX-2's audio stream has its own, falling
    back to the video's)."""
    defaults: dict[str, Any] = {}
    try:
        import inspect

        import diffusers

        signature = inspect.signature(getattr(diffusers, pipeline_class).__call__)
        defaults = {n: p.default for n, p in signature.parameters.items() if p.default is not inspect.Parameter.empty}
    except (AttributeError, TypeError, ValueError, ImportError):
        pass

    def value(name: str) -> Any:
        found = request.get(name)
        return found if found is not None else defaults.get(name)

    scales = [value(n) for n in SCALES]
    rescale = value("guidance_rescale") or 0.0
    if stream == "audio" and "audio_guidance_scale" in (set(request) | set(defaults)):
        scales = [value("audio_guidance_scale") or scales[0]]
        rescale = value("audio_guidance_rescale") or rescale
    found = [float(v) for v in scales if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {"scale": found[0] if found else None, "scales": list(dict.fromkeys(found)), "rescale": float(rescale)}


def _rescale(guided: torch.Tensor, cond: torch.Tensor, factor: float) -> torch.Tensor:
    """Diffusers' rescale_noise_cfg: match the guided prediction's std to the conditional one's, mixed by factor."""
    if not factor:
        return guided
    dims = list(range(1, guided.ndim))
    rescaled = guided * (cond.std(dim=dims, keepdim=True) / guided.std(dim=dims, keepdim=True))
    return factor * rescaled + (1 - factor) * guided


def combinations(settings: dict[str, Any], ratios: list[int] | int) -> list[Combination]:
    """The candidate combinations of a step's denoiser calls, each ``ratios[c]`` times the latent's batch, with
    the stream's guidance ``settings`` (:func:`guidance`): one call of the latent's batch (no guidance); one CFG
    batch (unconditional first) guided on the prediction (SD, SD3, PixArt, CogVideoX, LTX) or on x0 (LTX-2);
    two calls, conditional then unconditional (Wan, Flux's true CFG), or the other way round."""
    ratios = [ratios] if isinstance(ratios, int) else list(ratios)
    scales = settings.get("scales") or ([settings["scale"]] if settings.get("scale") is not None else [])
    r = float(settings.get("rescale") or 0.0)
    if ratios == [1]:  # no guidance (Lumina2 negates its prediction, also on steps past its CFG truncation)
        return [Combination("none", lambda raws, x, sigma: raws[0]),
                Combination("none-negated", lambda raws, x, sigma: -raws[0])]
    found: list[Combination] = []
    for g in (float(s) for s in scales):
        suffix = "" if g == float(scales[0]) else f"@{g:g}"
        if ratios == [2]:
            found += [Combination("cfg-x0" + suffix, _x0_form(g, r)), Combination("cfg" + suffix, _plain(g, r)),
                      Combination("cfg-kandinsky3" + suffix, _kandinsky3(g))]
        elif ratios == [1, 1]:
            found += [Combination("cfg-2calls" + suffix, _two_calls(g, r, cond_first=True)),
                      Combination("cfg-2calls-uncond-first" + suffix, _two_calls(g, r, cond_first=False)),
                      Combination("cfg-2calls-normalized-negated" + suffix, _lumina2(g, normalized=True)),
                      Combination("cfg-2calls-negated" + suffix, _lumina2(g, normalized=False))]
    return found


# The guidance forms rebuilt (:func:`combinations`); any other (APG, PAG's perturbed batch, STG, skip-layer, dynamic
# CFG, ...) is declared "guidance not judged" (:func:`ikdata.diffusion.streams.guidance_record`).
FORMS = ("none", "none-negated", "cfg", "cfg-x0", "cfg-kandinsky3", "cfg-2calls", "cfg-2calls-uncond-first",
         "cfg-2calls-normalized-negated", "cfg-2calls-negated")


def _up(t: torch.Tensor) -> torch.Tensor:
    """At least float32, as the pipelines guide; float64 stays (the higher-precision reference of a float32 run)."""
    return t if t.dtype == torch.float64 else t.float()


def _plain(g: float, r: float) -> Callable:
    def plain(raws: list, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        uncond, cond = _up(raws[0]).chunk(2)  # LTX, SD-style: on the velocity / noise prediction
        return _rescale(uncond + g * (cond - uncond), cond, r)

    return plain


def _x0_form(g: float, r: float) -> Callable:
    def x0_form(raws: list, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        uncond, cond = _up(raws[0]).chunk(2)  # LTX-2: on the x0 prediction, in delta form, rescaled there
        cond_x0, uncond_x0 = x - cond * sigma, x - uncond * sigma
        guided = cond_x0 + (g - 1) * (cond_x0 - uncond_x0)
        return (x - _rescale(guided, cond_x0, r)) / sigma

    return x0_form


def _two_calls(g: float, r: float, *, cond_first: bool) -> Callable:
    def two_calls(raws: list, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        cond, uncond = (raws[0], raws[1]) if cond_first else (raws[1], raws[0])
        return _rescale(uncond + g * (cond - uncond), cond, r)

    return two_calls


def _kandinsky3(g: float) -> Callable:
    def kandinsky3(raws: list, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        uncond, cond = _up(raws[0]).chunk(2)  # Kandinsky 3: (g + 1) * cond - g * uncond, in that order
        return (g + 1.0) * cond - g * uncond

    return kandinsky3


def _lumina2(g: float, *, normalized: bool) -> Callable:
    def lumina2(raws: list, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        cond, uncond = raws[0], raws[1]  # Lumina2: conditional call first, guided in the model's dtype
        guided = uncond + g * (cond - uncond)
        if normalized:  # cfg_normalization: the guided prediction rescaled to the conditional's norm per token
            guided = guided * (torch.norm(cond, dim=-1, keepdim=True) / torch.norm(guided, dim=-1, keepdim=True))
        return -guided  # the pipeline negates its prediction before the scheduler

    return lumina2


def reference_schedule(scheduler_class: str, config: dict, steps: int, seq_len: int | None,
                       arguments: dict | None = None) -> Any:
    """The reference scheduler, its timesteps set for ``steps`` as the pipeline set them.

    With the recorded ``set_timesteps`` ``arguments`` (:mod:`ikdata.diffusion.scheduler_state`; shift,
    ``mu`` of dynamic shifting, custom sigmas or timesteps): the scheduler's own ``set_timesteps`` with
    them. Without (a trajectory captured before they were recorded): flow-matching schedulers get
    ``sigmas = linspace(1, 1/N, N)`` and, with dynamic shifting, the ``mu`` of the video latent's
    sequence length (LTX, LTX-2); others ``set_timesteps(N)``.

    Raises:
        ValueError: a ``set_timesteps`` argument capture could not record.
    """
    import diffusers
    import numpy as np

    from ikdata.core.digest import from_finite_json
    from ikdata.diffusion import scheduler_state

    cls = getattr(diffusers, scheduler_class)
    sched = cls.from_config(from_finite_json(dict(config)))
    if arguments is not None:
        sched.set_timesteps(**scheduler_state.decode_arguments(arguments))
    elif "FlowMatch" in scheduler_class:
        sigmas = np.linspace(1.0, 1.0 / steps, steps)
        kwargs: dict[str, Any] = {"sigmas": sigmas}
        if sched.config.get("use_dynamic_shifting") and seq_len is not None:
            base_len, max_len = sched.config.get("base_image_seq_len", 1024), sched.config.get("max_image_seq_len", 4096)
            base_shift, max_shift = sched.config.get("base_shift", 0.95), sched.config.get("max_shift", 2.05)
            slope = (max_shift - base_shift) / (max_len - base_len)
            kwargs["mu"] = seq_len * slope + (base_shift - slope * base_len)
        sched.set_timesteps(**kwargs)
    else:
        sched.set_timesteps(steps)
    if arguments is None and hasattr(sched, "set_begin_index"):
        sched.set_begin_index(0)
    return sched


def schedule_values(sched: Any, steps: int) -> list[tuple[float | None, float | None, float]]:
    """(sigma, sigma_next, timestep) per step of a reference scheduler."""
    sigmas = getattr(sched, "sigmas", None)
    values = []
    for i in range(min(steps, len(sched.timesteps))):
        if sigmas is not None and i + 1 < len(sigmas):
            values.append((float(sigmas[i]), float(sigmas[i + 1]), float(sched.timesteps[i])))
        else:
            values.append((None, None, float(sched.timesteps[i])))
    return values


def update(sched: Any, index: int, out: torch.Tensor, x: torch.Tensor, step: dict | None = None,
           load: Callable[[Any], torch.Tensor] | None = None) -> torch.Tensor:
    """The reference scheduler's step ``index`` applied to (out, x) with the state, arguments and noise the
    trajectory's ``step`` recorded (``load`` reads its tensors): what x_next must be
    (:func:`ikdata.diffusion.scheduler_state.replay_step`)."""
    from ikdata.diffusion import scheduler_state

    try:
        return scheduler_state.replay_step(sched, index, step or {}, out, x, load or (lambda ref: None))
    except INTERNAL as exc:  # the reference step could not run on what ikdata gave it: ikdata's error
        raise ReferenceStepError(f"ikdata could not run the reference {type(sched).__name__}.step at schedule index "
                                 f"{index} (an error in ikdata's replay of the scheduler, not the engine's step: it "
                                 f"lacks state capture did not record): {type(exc).__name__}: {exc}") from exc


INTERNAL = (AttributeError, TypeError, KeyError, NameError)  # raised by the reference step: ikdata's, not the engine's


class ReferenceStepError(IkdataError):
    """ikdata's replay of a scheduler step failed (state it did not record, an argument it did not pass): the case
    is an error named as ikdata's, never the engine's wrong step."""


def decode(pipe: Any, finals: dict[str, torch.Tensor], scalars: dict[str, Any]) -> dict[str, Any]:
    """The frames ([F, H, W, 3] floats in [0, 1]) and audio ([channels, samples]) the reference pipeline
    decodes from the final latents, as numpy arrays.

    Raises:
        NotImplementedError: a pipeline whose decoding replay does not know.
    """
    import numpy as np

    name = type(pipe).__name__
    with torch.no_grad():
        if name == "LTX2Pipeline":
            frames, height, width = int(scalars["num_frames"]), int(scalars["height"]), int(scalars["width"])
            latents = pipe._unpack_latents(finals["video"], frames, height, width, pipe.transformer_spatial_patch_size,
                                           pipe.transformer_temporal_patch_size)
            latents = pipe._denormalize_latents(latents, pipe.vae.latents_mean, pipe.vae.latents_std,
                                                pipe.vae.config.scaling_factor).to(pipe.vae.dtype)
            video = pipe.vae.decode(latents, None, return_dict=False)[0]
            video = pipe.video_processor.postprocess_video(video, output_type="np")[0]
            found: dict[str, Any] = {"video": np.asarray(video, dtype=np.float64)}
            if "audio" in finals and getattr(pipe, "audio_vae", None) is not None:
                audio = pipe._denormalize_audio_latents(finals["audio"], pipe.audio_vae.latents_mean,
                                                        pipe.audio_vae.latents_std)
                mel_bins = pipe.audio_vae.config.mel_bins // pipe.audio_vae_mel_compression_ratio
                audio = pipe._unpack_audio_latents(audio, int(scalars["audio_num_frames"]), num_mel_bins=mel_bins)
                mel = pipe.audio_vae.decode(audio.to(pipe.audio_vae.dtype), return_dict=False)[0]
                found["audio"] = pipe.vocoder(mel)[0].float().numpy().astype(np.float64)
                found["sample_rate"] = int(pipe.vocoder.config.output_sampling_rate)
            return found
        if name == "DDIMPipeline":
            image = (finals["image"] / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).float().numpy()
            return {"video": np.asarray(image, dtype=np.float64)}
    raise NotImplementedError(f"replay does not know how {name} decodes its latents")


__all__ = ["Combination", "FORMS", "ReferenceStepError", "STREAMS", "combinations", "decode", "guidance", "reference_schedule", "schedule_values", "update"]
