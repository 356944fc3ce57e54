"""The recorder of one pipeline call: its steps, its noise, its request, written as one trajectory.

The engine thread only copies tensors to host memory (``x``, the denoiser's ``out``, ``x_next``; an
``x`` that is the previous step's ``x_next`` is not copied again) and hands them to background
threads that hash and store them (:mod:`ikdata.diffusion.trajectory_writer`). When the call returns
(or raises, or the process ends), the recorder waits for its blobs, then writes the workload rows
of each step, the model record and, last, the trajectory line: a trajectory never names a blob
that is not on disk, and a killed process leaves blobs only (``ikdata gc`` reclaims them).
"""

from __future__ import annotations

import inspect
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from ikdata.capture import selection
from ikdata.diffusion.trajectory_writer import Blob, BlobQueue, write_trajectory
from ikdata.diffusion import scheduler_state

_OPEN: "weakref.WeakSet[TrajectoryRecorder]" = weakref.WeakSet()
_SIGNATURES: dict[Any, inspect.Signature] = {}


def open_recorders() -> list["TrajectoryRecorder"]:
    """Recorders of calls still running in this process."""
    return [r for r in list(_OPEN) if not r.finished]


@dataclass
class StepCapture:
    """One captured step of one stream: host copies (as Blobs) and the schedule's values."""

    index: int
    stream: str
    timestep: float | None
    sigma: float | None
    sigma_next: float | None
    x: Blob
    out: Blob
    x_next: Blob
    scheduler_step: str | None = None  # the definition name, or None with a reason in skipped
    step_scalars: dict[str, float] = field(default_factory=dict)  # the step definition's scalar inputs
    skipped: dict[str, str] = field(default_factory=dict)
    extra: Any = None  # scheduler_state.StepRecord: the state, noise and arguments the step read


@dataclass
class DenoiserCall:
    """One forward of the denoiser during a captured step: its inputs and outputs as Blobs or scalars."""

    step: int
    call: int
    definition: Any
    axes: dict[str, int]
    inputs: dict[str, Any]
    outputs: dict[str, Any]


class TrajectoryRecorder:
    """Everything one pipeline call does that a trajectory records. Created by :meth:`start`."""

    def __init__(self, capturer: Any, pipe: Any, original: Callable, args: tuple, kwargs: dict, *,
                 library: Any) -> None:
        self.capturer = capturer
        self.library = library  # the declared source the pipeline comes from: its name and version in the records
        self.config = capturer.config
        self.pipe = pipe
        self.finished = False
        self.in_step = False
        self.stopped: str | None = None
        self.lock = threading.Lock()
        self.queue = BlobQueue.for_root(self.config.into, queue_bytes=self.config.queue_bytes)
        self.bound = _bind(original, pipe, args, kwargs)
        self.main_name = "video" if "num_frames" in self.bound or "frame_rate" in self.bound else "image"
        self.streams: dict[int, str] = {}  # id(scheduler) -> stream name, in order of first step
        self.schedulers: dict[str, Any] = {}
        self.counts: dict[str, int] = {}
        self.steps: list[StepCapture] = []
        self.last_next: dict[str, tuple[Any, int, Blob]] = {}
        self.draws: list[tuple[Any, Any]] = []
        self.step_draws: list[Blob] | None = None  # noise drawn inside the scheduler step being recorded
        self.set_timesteps: dict[int, dict[str, Any]] = {}  # id(scheduler) -> its last set_timesteps arguments
        self.noise_check: dict[str, bool] = {}
        self.stream_draws: dict[str, list[int]] = {}  # stream -> the draws its noise is (in order)
        self.noised: list[tuple[Any, Any, Any]] = []  # (original latents, noise, result) of add_noise before step 0
        self.init: dict[str, Blob] = {}  # stream -> the latents add_noise noised into its first x (partial schedule)
        self.starts: dict[str, int] = {}  # stream -> the schedule index its first step takes (strength < 1)
        self.edits: list[dict[str, Any]] = []  # latents changed between steps while a callback_on_step_end was set
        self.noise_reason: str | None = None
        self.denoiser_calls: list[DenoiserCall] = []
        self.denoiser_skipped: str | None = None  # why no step has denoiser workloads
        self.denoiser_skips: dict[int, list[str]] = {}  # step -> calls not recorded, and why
        self.conditioning: dict[tuple[int, int], Blob] = {}
        self.hook_handle: Any = None
        self.helper_calls: list[tuple[str, str, int]] = []  # (component, class, main-stream steps done) per call
        self.helper_handles: list[Any] = []
        self.request_id = _request_id(capturer)
        self._install_denoiser_hook()
        self._install_helper_hooks()
        _OPEN.add(self)

    @classmethod
    def start(cls, capturer: Any, pipe: Any, original: Callable, args: tuple, kwargs: dict, *,
              library: Any) -> "TrajectoryRecorder | None":
        """A recorder for this call, or None when the current request is not being captured. ``library``: the
        declared source the pipeline comes from (:func:`ikdata.diffusion.capture.library`)."""
        if capturer.tracker.current_request() is None:
            return None
        return cls(capturer, pipe, original, args, kwargs, library=library)

    # -- engine-thread events -----------------------------------------------------------------------

    def on_draw(self, generator: Any, tensor: Any) -> None:
        """A ``torch.randn(..., generator=g)`` during the call, before the first step: candidate noise; inside a
        recorded scheduler step (any generator): the noise that step adds."""
        if self.in_step:
            if self.step_draws is not None:
                self.step_draws.append(self.queue.copy(tensor))
            return
        if not self.steps and not self.counts and len(self.draws) < 8:
            self.draws.append((generator, tensor.detach().clone()))

    def on_add_noise(self, sched: Any, args: tuple, kwargs: dict, result: Any) -> None:
        """``scheduler.add_noise(original, noise, timesteps)`` before the first step: how a partial schedule
        (img2img, inpainting with strength < 1) makes its first latents from the image's."""
        if self.steps or self.counts or len(self.noised) >= 8:
            return
        values = list(args[:2]) + [None] * (2 - min(2, len(args)))
        original = kwargs.get("original_samples", values[0])
        noise = kwargs.get("noise", values[1])
        if _is_tensor(original) and _is_tensor(noise) and _is_tensor(result):
            self.noised.append((original.detach().clone(), noise.detach(), result.detach().clone()))

    def on_step(self, original: Callable, sched: Any, args: tuple, kwargs: dict) -> Any:
        stream = self._stream_of(sched)
        index = self.counts.get(stream, 0)
        self.counts[stream] = index + 1
        model_output, timestep, sample = _step_args(args, kwargs)
        if index == 0:
            self.starts[stream] = _start_index(sched, timestep)
            self._check_noise(stream, sample)
        if not self._selected(stream, index):
            return original(sched, *args, **kwargs)
        last = self.last_next.get(stream)
        if last is not None and not (last[0] is sample and sample._version == last[1]):
            if self.bound.get("callback_on_step_end") is not None:  # the callback returned (or changed) the latents
                self.edits.append({"stream": stream, "step": index - 1, "by": "callback_on_step_end"})
            else:
                cast = _cast_between(last[0], sample)
                if cast is not None:  # a mixed-precision stepper (Mochi): float32 steps, latents kept in half between
                    self.edits.append({"stream": stream, "step": index - 1, "by": "cast", "dtype": str(cast)})
        x = self._host_x(stream, sample)
        reused = last is not None and x is last[2]  # x is the previous x_next: no new bytes
        out = self.queue.copy(model_output)
        extra = scheduler_state.snapshot(sched, original, args, kwargs, self._host_conditioning)
        self.step_draws = []
        self.in_step = True
        try:
            result = original(sched, *args, **kwargs)
        finally:
            self.in_step = False
            extra.noise += [("randn", blob) for blob in self.step_draws]
            self.step_draws = None
        x_next_tensor = result[0] if isinstance(result, tuple) else result.prev_sample
        x_next = self.queue.copy(x_next_tensor)
        self.last_next[stream] = (x_next_tensor, x_next_tensor._version, x_next)
        sigma, sigma_next = _sigmas(sched)
        capture = StepCapture(index, stream, _number(timestep), sigma, sigma_next, x, out, x_next, extra=extra)
        found = _scheduler_step_definition(sched, args, kwargs, timestep, sample, model_output, x_next_tensor,
                                           sigma, sigma_next, capture.skipped)
        if found is not None:
            capture.scheduler_step, capture.step_scalars = found
        nbytes = out.nbytes + x_next.nbytes + (0 if reused else x.nbytes)
        # --max-bytes applies (shared with operator capture); --max-per-definition does not: a name per step
        refusal = self.capturer.ledger.reserve(f"trajectory-step:{stream}:{index}",
                                               ("trajectory", os.getpid(), id(self), stream, index), nbytes)
        if refusal == selection.BYTES_FULL:
            self.stopped = f"--max-bytes reached at step {index} of stream {stream!r}"
            self.capturer.refused[refusal] = self.capturer.refused.get(refusal, 0) + 1
            return result
        with self.lock:
            self.steps.append(capture)
        return result

    def on_set_timesteps(self, original: Callable, sched: Any, args: tuple, kwargs: dict) -> None:
        """The arguments the pipeline sets a scheduler's schedule with (replay's schedule check calls the
        reference's own ``set_timesteps`` with them)."""
        try:
            self.set_timesteps[id(sched)] = scheduler_state.encode_arguments(original, sched, args, kwargs)
        except Exception as exc:  # noqa: BLE001  recorded as unrecorded, capture goes on
            self.set_timesteps[id(sched)] = {"_error": {"unrecorded": f"{type(exc).__name__}: {exc}"}}

    # -- finishing ----------------------------------------------------------------------------------

    def finish(self, *, result: Any = None, error: str | None = None) -> str | None:
        """Write the trajectory (complete, or incomplete with ``error``); return its id, or None if nothing
        was captured (the reason is logged as a capture failure)."""
        with self.lock:
            if self.finished:
                return None
            self.finished = True
        if self.hook_handle is not None:
            self.hook_handle.remove()
        for handle in self.helper_handles:
            handle.remove()
        try:
            if not self.steps:
                self._nothing_captured(error)
                return None
            return write_trajectory(self, result=result, error=error or self.stopped)
        except Exception as exc:  # noqa: BLE001  a failing capture must not break the program
            if self.config.strict:
                raise
            self.capturer.failures.append({"definition": "trajectory", "message": f"{type(exc).__name__}: {exc}"})
            return None

    def _nothing_captured(self, error: str | None) -> None:
        scheduler = getattr(self.pipe, "scheduler", None)
        name = type(self.pipe).__name__
        if scheduler is not None and not callable(getattr(scheduler, "step", None)):
            why = (f"{name}: its scheduler {type(scheduler).__name__} has no step(); no trajectory captured "
                   "(ikdata records the steps a scheduler's step() takes)")
        elif self.counts:
            why = f"{name}: no step was selected (--steps/--streams); no trajectory written"
        else:
            why = f"{name}: the call made no scheduler step(); no trajectory captured"
        if error:
            why += f" ({error})"
        self.capturer.failures.append({"definition": "trajectory", "message": why})

    # -- helpers ------------------------------------------------------------------------------------

    def _stream_of(self, sched: Any) -> str:
        key = id(sched)
        name = self.streams.get(key)
        if name is None:
            if sched is getattr(self.pipe, "scheduler", None) or not self.streams:
                name = self.main_name if self.main_name not in self.streams.values() else f"stream{len(self.streams)}"
            elif "audio" not in self.streams.values() and (getattr(self.pipe, "audio_vae", None) is not None
                                                         or getattr(self.pipe, "vocoder", None) is not None):
                name = "audio"
            else:
                name = f"stream{len(self.streams)}"
            self.streams[key] = name
            self.schedulers[name] = sched
        return name

    def _selected(self, stream: str, index: int) -> bool:
        if self.stopped:
            return False
        if self.config.streams and stream not in self.config.streams:
            return False
        req = self.capturer.tracker.current_request()
        steps = req.steps if req is not None and req.steps is not None else self.config.steps
        return steps is None or index in steps

    def _host_x(self, stream: str, sample: Any) -> Blob:
        last = self.last_next.get(stream)
        if last is not None and last[0] is sample and sample._version == last[1]:
            return last[2]
        return self.queue.copy(sample)

    def _check_noise(self, stream: str, sample: Any) -> None:
        """Whether this stream's first latents are the recipe's noise for the generator's seed: the first draw (or
        run of draws, one generator per image) after the previous stream's that makes them, as drawn, packed or
        noised by add_noise, and is what torch.randn gives on its generator after that generator's earlier draws
        (a VAE's latent_dist.sample(generator) of pixel img2img draws before the noise)."""
        from ikdata.diffusion import noise_draws

        order = len(self.noise_check)
        start = 1 + max((k for indices in self.stream_draws.values() for k in indices), default=-1)
        if start >= len(self.draws):
            self.noise_check[stream] = False
            self.noise_reason = self.noise_reason or (
                f"no noise drawn from a generator for stream {stream!r} (latents passed in, or drawn another way)")
            return

        def made_of(drawn: Any) -> str | None:
            return _matches_packed(self.pipe, stream, sample, drawn) or self._noised(stream, sample, drawn)

        found = noise_draws.find(self.draws, sample, start, made_of)
        if found is None:
            same, why = False, None
            if order < len(self.draws):
                why = noise_draws.recipe_equal(self.draws, [order])[1]
                why = why and f"stream {stream!r}: {why}"
            self.noise_reason = self.noise_reason or why or (
                f"stream {stream!r}: the first latents are not the drawn noise as drawn, packed by the pipeline's "
                "_pack_latents, or times the scheduler's init_noise_sigma (the pipeline made them another way)")
        else:
            indices, _ = found
            self.stream_draws[stream] = indices
            same, why = noise_draws.recipe_equal(self.draws, indices)
            if not same and not self.noise_reason:
                self.noise_reason = f"stream {stream!r}: {why}"
        self.noise_check[stream] = bool(same)

    def _noised(self, stream: str, sample: Any, drawn: Any) -> str | None:
        """"add_noise" when ``sample`` is what the scheduler's add_noise made from the drawn noise (a partial
        schedule's start); its original latents are kept for the trajectory (``init``)."""
        import torch

        for original, noise, result in self.noised:
            if noise.shape == drawn.shape and torch.equal(noise.to(drawn.dtype), drawn) and \
                    result.shape == sample.shape and torch.equal(result, sample.detach()):
                self.init[stream] = self.queue.copy(original)
                return "add_noise"
        return None

    def _install_helper_hooks(self) -> None:
        """Count the calls of every other Diffusers model of the pipeline (ControlNet, adapters, image encoders,
        the VAE): they run but are not judged, and the trajectory names them (``unjudged``)."""
        from ikdata.diffusion import denoisers

        denoiser = denoisers.denoiser_of(self.pipe)
        components = getattr(self.pipe, "components", None)
        helpers = [(name, module) for name, module in (components.items() if isinstance(components, dict) else ())
                   if module is not None and module is not denoiser and hasattr(module, "register_forward_hook") and
                   ("ModelMixin" in {c.__name__ for c in type(module).__mro__} or name == "image_encoder")]
        projection = getattr(denoiser, "encoder_hid_proj", None)  # IP-Adapter's image projection, inside the denoiser
        if projection is not None and "IPAdapter" in type(projection).__name__ and \
                hasattr(projection, "register_forward_hook"):
            helpers.append((f"{_component_name(self.pipe, denoiser)}.encoder_hid_proj", projection))
        for name, module in helpers:
            self.helper_handles.append(module.register_forward_hook(
                lambda m, a, o, name=name: self.helper_calls.append(
                    (name, type(m).__name__, self.counts.get(self.main_name, 0)))))

    def unjudged(self) -> list[dict[str, Any]]:
        """The pipeline's other models called during the call, by component, with the main stream's step being
        taken at each call (its scheduler steps done so far; the step count: after the last): none is judged."""
        found: dict[tuple[str, str], list[int]] = {}
        for name, cls, done in self.helper_calls:
            found.setdefault((name, cls), []).append(done)
        return [{"component": n, "class": c, "calls": len(d), "steps": sorted(set(d))} for (n, c), d in found.items()]

    def _install_denoiser_hook(self) -> None:
        from ikdata.diffusion import denoisers

        module = denoisers.denoiser_of(self.pipe)
        if module is None or not hasattr(module, "register_forward_hook"):
            self.denoiser_skipped = "the pipeline has no transformer or unet"
            return
        from ikdata.diffusion import adapters

        refused = adapters.refusal(self.pipe)
        if refused:
            self.denoiser_skipped = refused
            return
        if not denoisers.known(module):
            self.denoiser_skipped = (f"{type(module).__name__} is not a Diffusers model (ModelMixin): ikdata maps the "
                                     "calls of Diffusers denoisers only")
            return
        self.hook_handle = module.register_forward_hook(self._on_forward, with_kwargs=True)

    def _on_forward(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        from ikdata.diffusion import denoisers

        main = self.main_name
        index = self.counts.get(main, 0)
        if self.in_step or not self._selected(main, index):
            return
        try:
            mapped = denoisers.map_call(module, args, kwargs, output)
            if mapped is None:
                self.denoiser_skips.setdefault(index, []).append(
                    f"a {type(module).__name__} call ikdata does not map (e.g. with spatio-temporal guidance)")
                return
            definition, inputs, outputs = mapped
            axes = self.queue.writer.check(definition, inputs, outputs)
        except Exception as exc:  # noqa: BLE001  recorded on the trajectory, capture goes on
            self.denoiser_skips.setdefault(index, []).append(f"{type(exc).__name__}: {exc}")
            return
        calls = sum(1 for c in self.denoiser_calls if c.step == index)
        self.denoiser_calls.append(DenoiserCall(
            index, calls, definition, axes, {n: self._host_conditioning(v) for n, v in inputs.items()},
            {n: self.queue.copy(v) if _is_tensor(v) else v for n, v in outputs.items()}))

    def _host_conditioning(self, value: Any) -> Any:
        """A denoiser input as a Blob; the same unchanged tensor (text embeddings, masks) is copied once."""
        if not _is_tensor(value):
            return value
        key = (id(value), value._version)
        blob = self.conditioning.get(key)
        if blob is None:
            blob = self.conditioning[key] = self.queue.copy(value)
            blob.keep = value  # keeps the id from being reused while the call runs
        return blob


def _bind(original: Callable, pipe: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    try:
        signature = _SIGNATURES.get(original)
        if signature is None:
            signature = _SIGNATURES[original] = inspect.signature(original)
        bound = signature.bind(pipe, *args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        for name, param in signature.parameters.items():
            if param.kind == param.VAR_KEYWORD and isinstance(values.get(name), dict):
                values.update(values.pop(name))
        return values
    except (TypeError, ValueError):
        return dict(kwargs)


def _request_id(capturer: Any) -> Any:
    req = capturer.tracker.current_request()
    return req.request_id if req is not None else None


def _step_args(args: tuple, kwargs: dict) -> tuple[Any, Any, Any]:
    names = ("model_output", "timestep", "sample")
    values = list(args[:3]) + [None] * (3 - min(3, len(args)))
    for i, name in enumerate(names):
        if name in kwargs:
            values[i] = kwargs[name]
    return values[0], values[1], values[2]


def _start_index(sched: Any, timestep: Any) -> int:
    """Where in its schedule a stream's first step is: the scheduler's ``begin_index`` (img2img and inpainting
    set it from ``strength``), else the first position of the step's timestep in ``scheduler.timesteps``."""
    begin = getattr(sched, "begin_index", None)
    if isinstance(begin, int) and begin >= 0:
        return begin
    timesteps, t = getattr(sched, "timesteps", None), _number(timestep)
    if timesteps is None or t is None or not hasattr(timesteps, "__len__"):
        return 0
    for i, value in enumerate(timesteps):
        if _number(value) == t:
            return i
    return 0


def _sigmas(sched: Any) -> tuple[float | None, float | None]:
    sigmas = getattr(sched, "sigmas", None)
    index = getattr(sched, "step_index", None)
    if sigmas is None or index is None or not hasattr(sigmas, "__len__"):
        return None, None
    j = int(index) - 1
    if j < 0 or j + 1 >= len(sigmas):
        return None, None
    return float(sigmas[j]), float(sigmas[j + 1])


def _scheduler_step_definition(sched: Any, args: tuple, kwargs: dict, timestep: Any, x: Any, out: Any,
                               x_next: Any, sigma: float | None, sigma_next: float | None,
                               skipped: dict[str, str]) -> tuple[str, dict[str, float]] | None:
    """The shipped step definition this step is a workload of, with its scalar inputs; or None, with why in
    ``skipped``: flow-matching Euler (deterministic) and DDIM (eta = 0, epsilon prediction)."""
    names = {c.__name__ for c in type(sched).__mro__}
    dtypes = {str(x.dtype), str(out.dtype), str(x_next.dtype)}
    suffix = {"torch.float32": "f32", "torch.bfloat16": "bf16", "torch.float16": "f16"}
    config = sched.config
    if len(dtypes) != 1 or next(iter(dtypes)) not in suffix or tuple(x.shape) != tuple(out.shape) or \
            not 2 <= x.dim() <= 5:
        skipped["scheduler_step"] = f"x, out and x_next differ in dtype or shape ({sorted(dtypes)})"
    elif "FlowMatchEulerDiscreteScheduler" in names:
        if config.get("stochastic_sampling") or kwargs.get("per_token_timesteps") is not None:
            skipped["scheduler_step"] = "stochastic sampling or per-token timesteps: not the deterministic Euler step"
        elif sigma is None or sigma_next is None:
            skipped["scheduler_step"] = "the scheduler's sigmas were not readable"
        else:
            return f"flow_euler_step_r{x.dim()}_{suffix[str(x.dtype)]}", {"sigma": sigma, "sigma_next": sigma_next}
    elif type(sched).__name__ == "DDIMScheduler":
        eta = kwargs.get("eta", args[3] if len(args) > 3 else 0.0)
        if eta or config.get("prediction_type") != "epsilon" or config.get("thresholding") or \
                str(x.dtype) != "torch.float32" or not 3 <= x.dim() <= 5:
            skipped["scheduler_step"] = "DDIM with eta > 0, another prediction type, thresholding or not float32"
        else:
            t = int(timestep)
            prev = t - config.num_train_timesteps // sched.num_inference_steps
            a_prev = sched.alphas_cumprod[prev] if prev >= 0 else sched.final_alpha_cumprod
            clip = float(config.clip_sample_range) if config.get("clip_sample") else 0.0
            return f"ddim_step_r{x.dim()}_f32", {"alpha_prod_t": float(sched.alphas_cumprod[t]),
                                                 "alpha_prod_t_prev": float(a_prev), "clip_sample_range": clip}
    else:
        skipped["scheduler_step"] = f"no shipped step definition for {type(sched).__name__}"
    return None


def _component_name(pipe: Any, module: Any) -> str:
    """The pipeline component name of ``module`` (``unet``, ``transformer``), else its class name."""
    components = getattr(pipe, "components", None)
    found = [n for n, m in (components.items() if isinstance(components, dict) else ()) if m is module]
    return found[0] if found else type(module).__name__


def _cast_between(x_next: Any, sample: Any) -> Any:
    """The half precision (bf16, fp16) that ``sample`` is ``x_next`` rounded to, or None: a pipeline that steps its
    scheduler in float32 and keeps its latents in the model's dtype between steps (Mochi)."""
    import torch

    if not (_is_tensor(x_next) and _is_tensor(sample)) or x_next.shape != sample.shape or \
            x_next.dtype != sample.dtype or not sample.is_floating_point():
        return None
    for half in (torch.bfloat16, torch.float16):
        if half != sample.dtype and torch.equal(x_next.to(half).to(sample.dtype), sample):
            return half
    return None


def _matches_packed(pipe: Any, stream: str, sample: Any, drawn: Any) -> str | None:
    """How ``sample`` was made from ``drawn`` (as drawn, packed by the pipeline, times ``init_noise_sigma``:
    :func:`ikdata.diffusion.adapters.noise_layouts`), or None when it is none of them."""
    import torch

    from ikdata.diffusion import adapters

    if sample.numel() != drawn.numel():
        return None
    target = sample.detach().to("cpu")
    for name, candidate in adapters.noise_layouts(pipe, stream, drawn):
        if tuple(candidate.shape) == tuple(target.shape) and torch.equal(candidate.to(target.dtype), target):
            return name
    return None


def _number(value: Any) -> float | None:
    try:
        if hasattr(value, "numel"):
            return float(value.reshape(-1)[0]) if value.numel() else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "element_size")


__all__ = ["TrajectoryRecorder", "StepCapture", "DenoiserCall", "open_recorders"]
