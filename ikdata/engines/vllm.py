"""vLLM (v1, 0.32) as a capture source: its sampler and its operators, recorded with no user code.

Installed in every captured process; each hook waits for the vLLM module that defines what it wraps, so
they land in the process that runs the model (vLLM v1 runs it two processes below the program: engine
core, then worker). What is recorded:

- **the sampler** (``GPUModelRunner._sample``, the CPU runner included): the logits copied *before* the
  call (``Sampler.forward`` changes them in place: temperature, min-p, top-k/top-p), then one workload of
  ``sampling_logits_f32`` per request row (:mod:`ikdata.engines.sampler_rows`), tied to vLLM's request id
  and the request's decode step (tokens it had generated), with the settings the request asked for and
  the cut order ``vllm``. Rows vLLM throws away (a partial prefill chunk) are not recorded; rows with
  settings the judge does not model (logit bias, allowed token ids, structured output, logits processors)
  are left out and counted by name; speculative decoding is named as lost.
- **operators**, at the layer whose kernel vLLM calls (its CPU kernels are custom ops on repacked
  weights, so the layer is where the real operands are):
  linear layers (``UnquantizedLinearMethod.apply``, the weight *as loaded*: kept when vLLM repacks it and
  drops the original) -> ``dense_gemm[_bias]_{dt}_nt``; ``lm_head`` likewise;
  attention (``CPUAttentionBackendImpl.forward``, the KV cache gathered per sequence after the update)
  -> ``attention_varlen_causal_{dt}``; RMSNorm -> ``rmsnorm_{dt}``, with a residual ->
  ``fused_add_rmsnorm_{dt}`` (inputs copied before the call: it works in place); rotary embedding
  (in place on query and key: copied before) -> ``rotary_neox_{dt}``; ``SiluAndMul`` -> ``silu_and_mul_{dt}``.

Keeping the loaded linear weights costs their memory again (vLLM's packed copy stays as well) and is
done only while capture selects ``gemm``.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

from ikdata.capture.sources import declared_by
from ikdata.capture.spread import looks_at
from ikdata.engines.sampler_rows import TEMPLATE as SAMPLER_TEMPLATE
from ikdata.engines.sampler_rows import RowSettings, SampledRow, record_row

SAMPLER_OPERATION = "vllm.v1.sample.sampler.Sampler.forward"
_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}

# vLLM module -> the patch to apply once it is imported
_WATCH: dict[str, str] = {
    "vllm.config.vllm": "_patch_config",
    "vllm.v1.worker.gpu_model_runner": "_patch_runner",
    "vllm.model_executor.layers.linear": "_patch_linear",
    "vllm.model_executor.layers.vocab_parallel_embedding": "_patch_embedding",
    "vllm.model_executor.layers.layernorm": "_patch_rmsnorm",
    "vllm.model_executor.layers.activation": "_patch_silu",
    "vllm.model_executor.layers.rotary_embedding.base": "_patch_rotary",
    "vllm.v1.attention.backends.cpu_attn": "_patch_attention",
    "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method": "_patch_named",
}

# Layers of the architectures vLLM ships for CPU that ikdata has no definition for: each call is counted under
# its name in the capture summary ("not captured"), so it is never hidden among ops with no definition.
NAMED: dict[str, tuple[tuple[str, str, str], ...]] = {
    "vllm.model_executor.layers.layernorm": (
        ("GemmaRMSNorm", "forward", "GemmaRMSNorm (Gemma's norm, weight + 1; no definition)"),),
    "vllm.model_executor.layers.activation": (
        ("GeluAndMul", "forward", "GeluAndMul (Gemma's MLP activation; no definition)"),),
    "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method": (
        ("UnquantizedFusedMoEMethod", "apply", "fused MoE (router top-k, experts' GEMMs and combine in "
                                               "_C::cpu_fused_moe; no definition)"),
        ("UnquantizedFusedMoEMethod", "apply_monolithic", "fused MoE (router top-k, experts' GEMMs and combine in "
                                                          "_C::cpu_fused_moe; no definition)")),
}


def _vllm() -> Any:
    """vLLM's declaration (:mod:`ikdata.engines.feature`): its name in receipts, its sampler's cut order."""
    return declared_by(__name__)


def _short(dtype: Any) -> str | None:
    return _SHORT.get(str(dtype).replace("torch.", ""))


def _skip(cap: Any, reason: str, count: int = 1) -> None:
    """A call or row seen and not recorded: counted under its reason (the capture summary names it)."""
    key = f"{_vllm().name}: {reason}"
    cap.refused[key] = cap.refused.get(key, 0) + count


def _wrap(cap: Any, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    original = owner.__dict__.get(name, getattr(owner, name))
    if getattr(original, "__ikdata_original__", None) is not None:
        return
    wrapper = functools.wraps(original)(make(original))
    wrapper.__ikdata_original__ = original
    setattr(owner, name, wrapper)
    cap._patches.append((owner, name, original))


def _active(cap: Any, prefix: str, op_type: str) -> bool:
    """Whether a call of this kind could be recorded now: capture on, the step selected, and ``--only``
    (if given) naming its op type or a definition or template starting with ``prefix``. Checked before any
    copy an in-place op needs."""
    if cap.tracker.local.skip or not (cap.enabled and cap.is_selected_now()):
        return False  # ``skip``: a step the default selection does not look at (capture's module hook sets it)
    only = cap.only
    return not only or op_type in only or any(name.startswith(prefix) for name in only)


# -- the engine's mode -------------------------------------------------------------------------------------

COMPILED_REFUSAL = ("ikdata capture: this vLLM engine would run compiled (torch.compile mode {mode}); capture "
                    "records vLLM only in eager mode (compiled graphs skip the layers' Python code, so operators "
                    "and their census would be silently missing). Run it eager: LLM(..., enforce_eager=True), or "
                    "--enforce-eager for the server (docs/vllm.md).")


def _patch_config(cap: Any, module: Any) -> None:
    """Refuse a compiled engine where its configuration is made (the program's own process, before any engine
    process starts): a clear message and exit status 1, never a crash inside the engine."""
    cls = getattr(module, "VllmConfig", None)
    if cls is None or not hasattr(cls, "__post_init__"):
        return

    def make(original: Any) -> Any:
        def __post_init__(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(self, *args, **kwargs)
            mode = getattr(getattr(self, "compilation_config", None), "mode", 0)
            if cap.enabled and getattr(self, "model_config", None) is not None and int(mode or 0) != 0:
                import sys

                sys.stderr.write(COMPILED_REFUSAL.format(mode=getattr(mode, "name", mode)) + "\n")
                sys.stderr.flush()
                raise SystemExit(1)
            return out

        return __post_init__

    _wrap(cap, cls, "__post_init__", make)


# -- the sampler ------------------------------------------------------------------------------------------


def _unmodelled(params: Any) -> str | None:
    """The first setting of a request the sampling judge does not model, or None."""
    if getattr(params, "logit_bias", None):
        return "logit_bias"
    if getattr(params, "allowed_token_ids", None):
        return "allowed_token_ids"
    if getattr(params, "structured_outputs", None) is not None:
        return "structured output"
    if getattr(params, "logits_processors", None):
        return "logits processors"
    return None


def external_id(internal: str) -> str:
    """The request id the user sees (the offline output's ``request_id``; the server's per-prompt id):
    vLLM's engine appends ``-`` and 8 random characters unless VLLM_DISABLE_REQUEST_ID_RANDOMIZATION is set."""
    import os

    if os.environ.get("VLLM_DISABLE_REQUEST_ID_RANDOMIZATION", "") not in ("", "0"):
        return internal
    head, sep, tail = internal.rpartition("-")
    return head if sep and len(tail) == 8 else internal


def settings_of(params: Any) -> RowSettings:
    """A vLLM ``SamplingParams`` as the judge's settings (vLLM's top-k -1 or 0: off; temperature < 1e-5: greedy)."""
    temperature = float(params.temperature)
    top_k = int(params.top_k or 0)
    seed = getattr(params, "seed", None)
    return RowSettings(temperature=0.0 if temperature < 1e-5 else temperature, top_k=top_k if top_k > 0 else 0,
                       top_p=float(params.top_p), min_p=float(params.min_p),
                       repetition_penalty=float(params.repetition_penalty),
                       presence_penalty=float(params.presence_penalty),
                       frequency_penalty=float(params.frequency_penalty),
                       min_tokens=int(getattr(params, "min_tokens", 0) or 0),
                       stops=tuple(sorted(int(t) for t in (getattr(params, "all_stop_token_ids", None) or ()))),
                       bad_words=tuple(tuple(int(t) for t in w) for w in (getattr(params, "bad_words_token_ids", None)
                                                                         or ())),
                       seed=int(seed) if seed is not None else -1)


def _noise(runner: Any) -> str | None:
    """How the sampler turns a request's generator into noise, where ikdata can replay it
    (:mod:`ikdata.sampling.seeded`): vLLM's CPU path keys ``_C.fused_gumbel_argmax`` with one 31-bit integer
    drawn from the generator per call (not under ``use_fp64_gumbel``, which draws exponentials instead)."""
    sampler = getattr(getattr(runner, "sampler", None), "topk_topp_sampler", None)
    forward = getattr(getattr(sampler, "forward", None), "__func__", None)
    if getattr(forward, "__name__", "") == "forward_cpu" and not getattr(sampler, "use_fp64_gumbel", False):
        from ikdata.sampling.seeded import GUMBEL_SPLITMIX64

        return GUMBEL_SPLITMIX64 if _kernel_is_splitmix() else None
    return None


@functools.lru_cache(maxsize=1)
def _kernel_is_splitmix() -> bool:
    """Whether this vLLM's ``_C.fused_gumbel_argmax`` draws what :func:`ikdata.sampling.seeded.replay` replays
    (checked once per process on a few random rows: another kernel, e.g. an older noise table, is not claimed)."""
    import numpy as np
    import torch

    from ikdata.sampling.seeded import GUMBEL_SPLITMIX64, replay

    try:
        g = torch.Generator().manual_seed(1234)
        for _ in range(8):
            x = torch.randn(1, 97, generator=g) * 3
            seed = int(torch.randint(0, 2**31, (1,), generator=g))
            drawn = int(torch.ops._C.fused_gumbel_argmax(x, torch.tensor([seed], dtype=torch.long)))
            if replay(x[0].numpy(), np.arange(97), drawn, {"noise": GUMBEL_SPLITMIX64, "noise_seed": seed}) \
                    not in ("match", "unclear"):
                return False
        return True
    except Exception:  # noqa: BLE001  no such kernel: nothing is claimed
        return False


def _generator(generator: Any, seed: int, position: int, noise: str | None) -> dict[str, Any]:
    """What a request's seed fixes for this call (:mod:`ikdata.sampling.seeded`): the seed, the position (decode
    step), a digest of the generator's state before the call and, where the noise is known, the integer the
    engine's CPU path will draw from it (read from a copy of the state: vLLM's generator is not advanced)."""
    import torch

    from ikdata.core.digest import bytes_digest

    state = generator.get_state()
    found: dict[str, Any] = {"seed": int(seed), "position": int(position),
                             "state": bytes_digest(state.numpy().tobytes())[:16]}
    if noise is not None:
        copy = torch.Generator(device=generator.device)
        copy.set_state(state)
        found.update(noise=noise, noise_seed=int(torch.randint(0, 2**31, (1,), generator=copy, dtype=torch.long)))
    return found


_BUILTIN_PROCESSORS = ("MinTokensLogitsProcessor", "LogitBiasLogitsProcessor", "MinPLogitsProcessor")


def _custom_processors(cap: Any, batch: Any) -> list[Any]:
    """The user's logits processors in effect for this batch (``LLM(logits_processors=...)``, the server's
    ``--logits-processors``, plugins): every processor vLLM runs that is not one of its built-ins (min tokens,
    logit bias and min-p, which the judge models or the row's settings name). Each is watched (:func:`_watch`)
    so that the rows it changed are known after the sampler ran."""
    procs = getattr(batch, "logitsprocs", None)
    found = []
    for proc in (getattr(procs, "all", None) or ()):
        if type(proc).__name__ in _BUILTIN_PROCESSORS and type(proc).__module__.startswith("vllm."):
            continue
        _watch(cap, proc)
        found.append(proc)
    return found


def _watch(cap: Any, proc: Any) -> None:
    """Wrap one processor instance's ``apply`` so each call notes the rows whose logits it changed (compared
    with a copy made before it; NaN equal to NaN), in ``proc._ikdata_changed`` (None: it could not be watched)."""
    if getattr(proc, "_ikdata_watched", False):
        return
    original = getattr(proc, "apply", None)

    def apply(logits: Any) -> Any:
        before = logits.clone() if cap.enabled else None
        out = original(logits)
        if before is not None:
            import torch

            same = (before == out) | (torch.isnan(before) & torch.isnan(out))
            proc._ikdata_changed.update(int(i) for i in torch.nonzero(~same.all(dim=1)).reshape(-1).tolist())
        return out

    try:
        proc._ikdata_changed = set()
        proc.apply = apply
        proc._ikdata_watched = True
    except (AttributeError, TypeError):
        proc._ikdata_changed = None


SAMPLER_ROWS = 256  # the default keeps at most this many sampler rows per engine process ...
ROWS_PER_STEP = 32  # ... and at most this many of each decode step it looks at


def _row_wanted(cap: Any, runner: Any, step: int) -> bool:
    """Whether capture's default selection keeps this row, decided before any copy: a bounded spread of
    sampler rows. Where steps were asked for (``--steps``, ``--per-step``) every row is offered to
    :meth:`record`, which decides by them (and ``--max-per-definition`` bounds them). Otherwise: rows at the
    decode steps the default looks at (:func:`ikdata.capture.spread.looks_at`: 0-3, then powers of two),
    at most :data:`ROWS_PER_STEP` of each such step and :data:`SAMPLER_ROWS` in all, so a long run or a busy
    server pays for a few hundred rows, spread over the generation, and then nothing."""
    config = cap.config
    if config.steps is not None or getattr(config, "per_step", False):
        return True
    if not looks_at(step):
        return False
    kept = runner.__dict__.setdefault("_ikdata_rows_kept", {})
    if kept.get(step, 0) >= ROWS_PER_STEP or sum(kept.values()) >= SAMPLER_ROWS:
        return False
    kept[step] = kept.get(step, 0) + 1
    return True


def _bad_words_reach_prompt(params: Any, state: Any) -> bool:
    """Whether vLLM's bad-word ban (a word's last token, where its other tokens end the *output*) differs for
    this row from the judge's (where they end the prompt and output together): a multi-token word whose prefix
    the prompt completes."""
    words = getattr(params, "bad_words_token_ids", None) or ()
    if not any(len(w) > 1 for w in words):
        return False
    output = list(state.output_token_ids)
    whole = list(state.prompt_token_ids or ()) + output
    for word in words:
        head = list(word[:-1])
        if head and (output[-len(head):] == head if len(output) >= len(head) else False) != (whole[-len(head):] == head):
            return True
    return False


class Pending(NamedTuple):
    """What the sampler hook decided before the call: the rows to record and their logits (copied), and the
    batch indices of every row it looked at (the rows a user's logits processor changes are counted over all
    of them, recorded or not)."""

    rows: list[tuple[int, SampledRow]]
    logits: Any
    looked: list[int]


def _rows_before(cap: Any, runner: Any, logits: Any) -> Pending | None:
    """The rows to record and their logits, copied before the sampler runs (None: nothing to record or count)."""
    import torch

    batch = runner.input_batch
    req_ids = list(batch.req_ids)
    discard = getattr(getattr(runner, "discard_request_mask", None), "np", None)
    generators = getattr(batch, "generators", None) or {}
    noise = _noise(runner) if generators else None
    processors = _custom_processors(cap, batch)
    for proc in processors:
        if proc._ikdata_changed is not None:
            proc._ikdata_changed.clear()
    rows: list[tuple[int, SampledRow]] = []
    looked: list[int] = []
    left = 0  # rows the default selection leaves (counted in the census)
    for index, req_id in enumerate(req_ids):
        if discard is not None and bool(discard[index]):
            continue  # a partial prefill chunk: vLLM discards this row's token
        state = runner.requests.get(req_id)
        params = getattr(state, "sampling_params", None)
        if params is None:
            continue
        reason = _unmodelled(params)
        if reason is not None:
            _skip(cap, f"sampler row with {reason} (not modelled by the sampling judge)")
            continue
        if _bad_words_reach_prompt(params, state):
            _skip(cap, "sampler row with a bad word whose prefix reaches into the prompt (vLLM matches output "
                       "tokens only; not modelled by the sampling judge)")
            continue
        looked.append(index)
        step = len(state.output_token_ids)
        if not _row_wanted(cap, runner, step):
            left += 1
            continue
        settings = settings_of(params)
        generator = generators.get(index)
        rows.append((index, SampledRow(external_id(str(req_id)), step, tuple(state.prompt_token_ids or ()),
                                       tuple(state.output_token_ids), settings,
                                       _generator(generator, settings.seed, step, noise)
                                       if generator is not None else None)))
    if left:
        from ikdata.capture import census

        census.skipped(SAMPLER_OPERATION, "selection rule", None, left)
    if not rows:
        return Pending([], None, looked) if processors and looked else None
    index = torch.tensor([i for i, _ in rows], dtype=torch.long, device=logits.device)
    return Pending(rows, logits.detach().index_select(0, index).to("cpu", torch.float32, copy=True), looked)


def _patch_runner(cap: Any, module: Any) -> None:
    runner_cls = getattr(module, "GPUModelRunner", None)
    if runner_cls is None:
        return

    def make(original: Any) -> Any:
        def _sample(self: Any, logits: Any, spec_decode_metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
            pending = None
            if cap.enabled and not self.__dict__.get("_ikdata_constants"):
                _check_constants(cap, self)
            only = cap.only
            if (cap.enabled and logits is not None and SAMPLER_TEMPLATE not in cap.disabled
                    and (not only or "sampling" in only or any(n.startswith(SAMPLER_TEMPLATE) for n in only))):
                if spec_decode_metadata is not None:
                    cap._fail(SAMPLER_TEMPLATE, RuntimeError("sampling not captured: speculative decoding draws "
                                                             "through vLLM's rejection sampler"), lost=True)
                else:
                    try:
                        pending = _rows_before(cap, self, logits)
                    except Exception as exc:  # noqa: BLE001  a failing capture must not break the engine
                        cap._fail(SAMPLER_TEMPLATE, RuntimeError(f"sampling not captured: {exc}"), lost=True)
            out = original(self, logits, spec_decode_metadata, *args, **kwargs)
            if pending is not None:
                try:
                    _record_rows(cap, self, pending, out)
                except Exception as exc:  # noqa: BLE001
                    cap._fail(SAMPLER_TEMPLATE, RuntimeError(f"sampling not captured: {exc}"), lost=True)
            return out

        return _sample

    _wrap(cap, runner_cls, "_sample", make)


def _check_constants(cap: Any, runner: Any) -> None:
    """Once per engine: the constants vLLM built (attention scale, rotary base and cache, norm epsilon) against
    the model's config (:mod:`ikdata.engines.vllm_constants`); a mismatch fails the capture, naming the layer
    and the config field (a kernel given a wrong constant replays clean with it)."""
    from ikdata.engines import vllm_constants

    runner._ikdata_constants = True
    try:
        config = getattr(getattr(runner, "model_config", None), "hf_config", None)
        model = getattr(runner, "model", None)
        if config is None or model is None:
            return
        checked, wrong = vllm_constants.check(model, config)
    except Exception as exc:  # noqa: BLE001  a failing check must not break the engine
        _skip(cap, f"constants not checked against the model's config ({type(exc).__name__}: {exc})")
        return
    runner._ikdata_constants = checked
    if wrong:
        cap._fail("vllm constants", RuntimeError("constants differ from the model's config: " + "; ".join(wrong)),
                  lost=True)


def _record_rows(cap: Any, runner: Any, pending: Pending, out: Any) -> None:
    """Record the selected rows the user's logits processors left alone; count by name every looked-at row one
    of them changed (recorded or not: it is not judged as if absent)."""
    changed: dict[int, list[str]] = {}
    for proc in _custom_processors(cap, runner.input_batch):
        name = f"{type(proc).__module__}.{type(proc).__qualname__}"
        touched = proc._ikdata_changed
        for index in pending.looked:
            if touched is None or index in touched:  # unwatchable: every row may have been changed
                changed.setdefault(index, []).append(name)
    for index in pending.looked:
        if index in changed:
            _skip(cap, f"sampler row changed by logits processor {', '.join(sorted(set(changed[index])))} "
                       "(not modelled by the sampling judge)")
    if not pending.rows:
        return
    drawn = out.sampled_token_ids[:, 0].to("cpu").tolist()
    facts = _model_facts(cap, runner)
    for slot, (index, row) in enumerate(pending.rows):
        if index not in changed:
            record_row(cap, pending.logits[slot], row, drawn[index], operation=SAMPLER_OPERATION,
                       order=_vllm().order, provenance=facts)


IDENTITY_BLOCK = 1 << 20  # the first and last MiB of each file name its content in the model's identity


def file_identity(file: Any) -> str:
    """One file's identity without reading it whole: its size, mtime (ns) and the digest of its first and last
    :data:`IDENTITY_BLOCK` bytes (a multi-gigabyte weight costs two MiB of reading, never a full hash)."""
    import os

    from ikdata.core.digest import bytes_digest

    stat = os.stat(file)
    with open(file, "rb") as stream:
        head = stream.read(IDENTITY_BLOCK)
        tail = b""
        if stat.st_size > IDENTITY_BLOCK:
            stream.seek(max(stat.st_size - IDENTITY_BLOCK, IDENTITY_BLOCK))
            tail = stream.read(IDENTITY_BLOCK)
    return f"{stat.st_size}:{stat.st_mtime_ns}:{bytes_digest(head + tail)}"


@functools.lru_cache(maxsize=8)
def _folder_facts(path: str) -> tuple[tuple[str, Any], ...]:
    """The model folder's identity (each file's path, size, mtime and first and last MiB: :func:`file_identity`,
    sorted), or nothing for a hub name. Computed once per process, on the first recorded sampler row, so it
    must stay cheap: no file is hashed whole."""
    from pathlib import Path

    from ikdata.core.digest import parts_digest

    folder = Path(path)
    if not folder.is_dir():
        return (("model", path),)
    parts = [f"{file.relative_to(folder)}\0{file_identity(file)}\n".encode()
             for file in sorted(p for p in folder.rglob("*") if p.is_file())]
    return (("model", path), ("model_digest", parts_digest(parts)))


def _model_facts(cap: Any, runner: Any) -> dict[str, Any]:
    """Engine, version, model folder and its digest (also as ``model_revision``, which lineage shows: a local
    folder has no hub revision, its content is its revision); what the user gave (--model, --model-revision,
    --engine) is kept."""
    path = str(getattr(getattr(runner, "model_config", None), "model", "") or "")
    engine = _vllm()
    facts: dict[str, Any] = {"engine": engine.name, "engine_version": engine.version()}
    if path:
        facts.update(_folder_facts(path))
    if facts.get("model_digest"):
        facts["model_revision"] = f"sha256:{facts['model_digest']}"
    given = cap.config.provenance
    return {k: v for k, v in facts.items() if given.get(k) is None}


# -- operators --------------------------------------------------------------------------------------------


def _gemm(cap: Any, x: Any, weight: Any, bias: Any, out: Any, operation: str) -> None:
    from ikdata.capture import adapters

    adapters._gemm(cap, x, weight, out, bias, operation, ("W", "bias") if bias is not None else ("W",))


def _patch_linear(cap: Any, module: Any) -> None:
    method = getattr(module, "UnquantizedLinearMethod", None)
    if method is None:
        return

    def make_load(original: Any) -> Any:
        def process_weights_after_loading(self: Any, layer: Any) -> Any:
            weight = getattr(layer, "weight", None)
            only = cap.only
            if cap.enabled and (not only or "gemm" in only or any(n.startswith("dense_gemm") for n in only)) \
                    and weight is not None and getattr(weight, "ndim", 0) == 2 \
                    and not weight.is_meta:
                layer._ikdata_weight = weight.detach()  # vLLM's CPU path repacks it and drops the original
            return original(self, layer)

        return process_weights_after_loading

    def make_apply(original: Any) -> Any:
        def apply(self: Any, layer: Any, x: Any, bias: Any = None) -> Any:
            out = original(self, layer, x, bias)
            if _active(cap, "dense_gemm", "gemm"):
                weight = getattr(layer, "_ikdata_weight", None)
                if weight is None:
                    weight = getattr(layer, "weight", None)
                if weight is None or weight.numel() == 0:
                    _skip(cap, "linear layer whose loaded weight was not kept")
                else:
                    _dispatch(cap, "vllm UnquantizedLinearMethod.apply",
                              lambda: _gemm(cap, x, weight, bias, out, "vllm.UnquantizedLinearMethod.apply"))
            return out

        return apply

    _wrap(cap, method, "process_weights_after_loading", make_load)
    _wrap(cap, method, "apply", make_apply)


def _patch_embedding(cap: Any, module: Any) -> None:
    method = getattr(module, "UnquantizedEmbeddingMethod", None)
    if method is None:
        return

    def make_apply(original: Any) -> Any:
        def apply(self: Any, layer: Any, x: Any, bias: Any = None) -> Any:
            out = original(self, layer, x, bias)
            if _active(cap, "dense_gemm", "gemm"):
                _dispatch(cap, "vllm UnquantizedEmbeddingMethod.apply",
                          lambda: _gemm(cap, x, layer.weight, bias, out, "vllm.UnquantizedEmbeddingMethod.apply"))
            return out

        return apply

    _wrap(cap, method, "apply", make_apply)


def _taken(cap: Any, label: str, template: str, fills: dict[str, int], variant: str, *, seen: bool = False) -> bool:
    """Whether this call's key was already recorded (capture keeps each distinct call once per run, or once per
    step where steps were asked for), decided *before* the copies an in-place op or the paged KV cache needs;
    such a call is counted in the census under the selection rule, as :meth:`record` would (``seen``: already
    counted as run, inside :func:`_dispatch`)."""
    resolved = cap._resolve(template, fills)
    req = cap.tracker.current_request()
    if resolved is None or req is None or cap.ranks.current().distributed:
        return False  # record() decides and counts
    if not cap.ledger.is_seen((resolved.name, req.request_id, cap.tracker.current_step(), variant)):
        return False
    from ikdata.capture import census

    if not seen:
        census.seen(label)
    census.skipped(label, "selection rule", resolved.name)
    return True


def _dispatch(cap: Any, label: str, record: Callable[[], None]) -> None:
    """Run a recording through the Capturer's guard (re-entrancy, a failing hook disables its label)."""
    cap._dispatch(lambda _cap, *call: record(), label, ((), {}, None))


def _patch_named(cap: Any, module: Any) -> None:
    """Count each call of the layers :data:`NAMED` lists for this module under its name (no definition)."""
    for cls_name, method, reason in NAMED.get(module.__name__, ()):
        cls = getattr(module, cls_name, None)
        if cls is None or not hasattr(cls, method):
            continue

        def make(original: Any, reason: str = reason) -> Any:
            def call(self: Any, *args: Any, **kwargs: Any) -> Any:
                if cap.enabled:
                    _skip(cap, reason)
                return original(self, *args, **kwargs)

            return call

        _wrap(cap, cls, method, make)


def _patch_rmsnorm(cap: Any, module: Any) -> None:
    _patch_named(cap, module)
    cls = getattr(module, "RMSNorm", None)
    if cls is None:
        return

    def make(original: Any) -> Any:
        def forward(self: Any, x: Any, residual: Any = None, *args: Any, **kwargs: Any) -> Any:
            plain = (not args and not kwargs and getattr(self, "variance_size_override", None) is None
                     and getattr(self, "has_weight", True))
            prefix = "rmsnorm" if residual is None else "fused_add_rmsnorm"
            if not plain or not _active(cap, prefix, "norm"):
                return original(self, x, residual, *args, **kwargs)
            s = _short(x.dtype)
            hidden = int(self.weight.shape[0])
            if s is not None and _taken(cap, "vllm RMSNorm.forward", f"{prefix}_{s}", {"H": hidden},
                                        f"m{x.numel() // hidden}"):
                return original(self, x, residual)
            before = (x.detach().clone(), residual.detach().clone()) if residual is not None else None
            out = original(self, x, residual)
            _dispatch(cap, "vllm RMSNorm.forward", lambda: _record_rmsnorm(cap, self, x, before, out))
            return out

        return forward

    _wrap(cap, cls, "forward", make)


def _record_rmsnorm(cap: Any, layer: Any, x: Any, before: Any, out: Any) -> None:
    weight, eps = layer.weight.data, float(layer.variance_epsilon)
    s = _short(x.dtype)
    if s is None or weight.dtype != x.dtype:
        _skip(cap, f"RMSNorm in {x.dtype} with a {weight.dtype} weight (no definition)")
        return
    hidden = weight.shape[0]
    if before is None:
        rows = x.reshape(-1, hidden)
        cap.record(f"rmsnorm_{s}", {"X": rows, "W": weight, "eps": eps}, {"Y": out.reshape(-1, hidden)},
                   operation="vllm.RMSNorm.forward", variant=f"m{rows.shape[0]}", weights=("W",), fills={"H": hidden})
        return
    x0, r0 = before
    y, r_out = out
    cap.record(f"fused_add_rmsnorm_{s}", {"X": x0.reshape(-1, hidden), "R": r0.reshape(-1, hidden), "W": weight,
                                           "eps": eps},
               {"Y": y.reshape(-1, hidden), "R_out": r_out.reshape(-1, hidden)},
               operation="vllm.RMSNorm.forward (fused_add_rms_norm)", variant=f"m{x0.numel() // hidden}",
               weights=("W",), fills={"H": hidden})


def _patch_silu(cap: Any, module: Any) -> None:
    _patch_named(cap, module)
    cls = getattr(module, "SiluAndMul", None)
    if cls is None:
        return

    def make(original: Any) -> Any:
        def forward(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(self, x, *args, **kwargs)
            if _active(cap, "silu_and_mul", "activation") and not args and not kwargs:
                _dispatch(cap, "vllm SiluAndMul.forward", lambda: _record_silu(cap, x, out))
            return out

        return forward

    _wrap(cap, cls, "forward", make)


def _record_silu(cap: Any, x: Any, out: Any) -> None:
    s = _short(x.dtype)
    if s is None:
        _skip(cap, f"SiluAndMul in {x.dtype} (no definition)")
        return
    d = x.shape[-1] // 2
    rows = x.reshape(-1, 2 * d)
    cap.record(f"silu_and_mul_{s}", {"X": rows}, {"Y": out.reshape(-1, d)}, operation="vllm.SiluAndMul.forward",
               variant=f"m{rows.shape[0]}", fills={"D": d})


def _patch_rotary(cap: Any, module: Any) -> None:
    cls = getattr(module, "RotaryEmbedding", None)
    if cls is None:
        return

    def make(original: Any) -> Any:
        def forward(self: Any, positions: Any, query: Any, key: Any = None, *args: Any, **kwargs: Any) -> Any:
            if (not _active(cap, "rotary_neox", "rope") or args or kwargs or key is None
                    or not _plain_rotary(type(self), cls) or not getattr(self, "is_neox_style", False)):
                return original(self, positions, query, key, *args, **kwargs)
            s = _short(query.dtype)
            if s is not None and _taken(cap, "vllm RotaryEmbedding.forward", f"rotary_neox_{s}",
                                        {"D": int(self.head_size), "R": int(self.rotary_dim)}, f"t{positions.numel()}"):
                return original(self, positions, query, key)
            before = (positions.detach().clone(), query.detach().clone(), key.detach().clone())
            out = original(self, positions, query, key)
            _dispatch(cap, "vllm RotaryEmbedding.forward", lambda: _record_rotary(cap, self, before, out))
            return out

        return forward

    _wrap(cap, cls, "forward", make)


def _plain_rotary(kind: type, base: type) -> bool:
    """A rotary class computing what the base computes (its own cos/sin cache allowed: Llama 3, NTK, YaRN)."""
    return all(getattr(kind, name) is getattr(base, name) for name in ("forward", "forward_cpu", "forward_native"))


def _record_rotary(cap: Any, layer: Any, before: Any, out: Any) -> None:
    import torch

    positions, query, key = before
    q_out, k_out = out
    s = _short(query.dtype)
    cache = layer.cos_sin_cache
    if s is None or cache.dtype != query.dtype:
        cache = cache.to(query.dtype)
    if s is None:
        _skip(cap, f"rotary embedding in {query.dtype} (no definition)")
        return
    t = positions.numel()
    cap.record(f"rotary_neox_{s}", {"positions": positions.reshape(t).to(torch.int64), "query": query.reshape(t, -1),
                                    "key": key.reshape(t, -1), "cos_sin_cache": cache,
                                    "head_size": int(layer.head_size)},
               {"query_out": q_out.reshape(t, -1), "key_out": k_out.reshape(t, -1)},
               operation="vllm.RotaryEmbedding.forward (_C.rotary_embedding)", variant=f"t{t}",
               weights=("cos_sin_cache",), fills={"D": int(layer.head_size), "R": int(layer.rotary_dim)})


def _patch_attention(cap: Any, module: Any) -> None:
    cls = getattr(module, "CPUAttentionBackendImpl", None)
    if cls is None:
        return

    def make(original: Any) -> Any:
        def forward(self: Any, layer: Any, query: Any, key: Any, value: Any, kv_cache: Any, attn_metadata: Any,
                    output: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs)
            if attn_metadata is not None and _active(cap, "attention_varlen_causal", "attention"):
                _dispatch(cap, "vllm CPUAttentionBackendImpl.forward",
                          lambda: _record_attention(cap, self, query, key, value, kv_cache, attn_metadata,
                                                            output))
            return result

        return forward

    _wrap(cap, cls, "forward", make)


def _layouts(blocks: Any) -> list[Any]:
    """The ways cache blocks [n, HKV, block_size, head] may hold their tokens: token-major (values, and keys
    on most ISAs) or head-dimension-major (keys on vLLM's ``vec`` ISA), each as [n, HKV, block_size, head]."""
    n, kv_heads, block_size, head = blocks.shape
    return [blocks, blocks.reshape(n, kv_heads, head, block_size).transpose(2, 3)]


def _gather(halves: Any, half: int, table: Any, seq_lens: Any, cu_q: Any, new: Any) -> list[Any] | None:
    """Each sequence's tokens [n, HKV, head] from one half of the cache (0: keys, 1: values), in the first
    layout whose newest tokens are the ones this call wrote (``new``); None when no layout reads them back.
    Only the sequences' own blocks are copied (the cache itself may be gigabytes)."""
    import torch

    block_size = halves.shape[2] // 2
    found: list[Any] = []
    for i in range(seq_lens.shape[0]):
        n, q0, q1 = int(seq_lens[i]), int(cu_q[i]), int(cu_q[i + 1])
        ids = table[i, : math.ceil(n / block_size)].to(halves.device)
        blocks = halves.index_select(0, ids)[:, :, half * block_size:(half + 1) * block_size].contiguous()
        for view in _layouts(blocks):
            tokens = view.permute(0, 2, 1, 3).reshape(-1, view.shape[1], view.shape[3])[:n]
            if q1 <= q0 or torch.equal(tokens[n - (q1 - q0):], new[q0:q1].reshape(q1 - q0, *tokens.shape[1:])):
                found.append(tokens)
                break
        else:
            return None
    return found


def _record_attention(cap: Any, impl: Any, query: Any, key: Any, value: Any, kv_cache: Any, meta: Any,
                      output: Any) -> None:
    """Gather each sequence's keys and values from the paged cache (after this call's update) and record."""
    import torch

    if (getattr(impl, "alibi_slopes", None) is not None or getattr(impl, "sliding_window", None) not in (None, -1)
            or getattr(impl, "logits_soft_cap", 0) or getattr(impl, "sinks", None) is not None
            or getattr(meta, "dynamic_causal", None) is not None or not bool(getattr(meta, "causal", True))
            or str(getattr(impl, "kv_cache_dtype", "auto")) != "auto" or key is None or value is None):
        _skip(cap, "attention with alibi, a sliding window, softcap, sinks, non-causal or a quantised cache "
                   "(no definition)")
        return
    s = _short(query.dtype)
    if s is None:
        _skip(cap, f"attention in {query.dtype} (no definition)")
        return
    tokens = int(meta.num_actual_tokens)
    blocks, kv_heads, block_size, _ = kv_cache.shape
    head = query.shape[-1]
    seq_lens = meta.seq_lens.to("cpu", torch.int64)
    heads = query[:tokens].reshape(tokens, -1, head).shape[1]
    if _taken(cap, "vllm CPUAttentionBackendImpl.forward", f"attention_varlen_causal_{s}",
              {"H": heads, "HKV": kv_heads, "D": head}, f"t{tokens}_s{int(seq_lens.sum())}", seen=True):
        return  # the gather below copies every sequence's keys and values: only for a call that is kept
    halves = kv_cache.view(blocks, kv_heads, block_size * 2, head)
    cu_q = meta.query_start_loc.to("cpu", torch.int64)
    table = meta.block_table.to("cpu", torch.int64)
    keys = _gather(halves, 0, table, seq_lens, cu_q, key)
    values = _gather(halves, 1, table, seq_lens, cu_q, value)
    if keys is None or values is None:
        _skip(cap, "attention whose KV cache layout ikdata cannot read (the keys or values read back differ)")
        return
    cu_k = torch.zeros(seq_lens.shape[0] + 1, dtype=torch.int64)
    cu_k[1:] = torch.cumsum(seq_lens, 0)
    q = query[:tokens].reshape(tokens, -1, head)
    cap.record(f"attention_varlen_causal_{s}",
               {"Q": q, "K": torch.cat(keys), "V": torch.cat(values),
                "cu_q": cu_q[: seq_lens.shape[0] + 1].contiguous(), "cu_k": cu_k, "scale": float(impl.scale)},
               {"O": output[:tokens].reshape(tokens, -1, head)},
               operation="vllm.CPUAttentionBackendImpl.forward (_C.cpu_attention_with_kv_cache)",
               variant=f"t{tokens}_s{int(cu_k[-1])}", fills={"H": q.shape[1], "HKV": kv_heads, "D": head})


# -- installation ------------------------------------------------------------------------------------------


def install(cap: Any) -> None:
    """Patch each vLLM module now if it is loaded, else right after the program imports it (for the capturer
    active then: :func:`ikdata.capture.running.when_imported`)."""
    from ikdata.capture.running import when_imported

    for name, patch in _WATCH.items():
        when_imported(name, cap, globals()[patch])


__all__ = ["SAMPLER_OPERATION", "external_id", "install", "settings_of"]
