"""Faults planted inside a real vLLM for the tests (an ``--adapter`` module: ``install(api)`` runs in every process).

``VLLM_FAULTS`` (comma-separated) picks them; each is planted *below* the layer ikdata records at, where a
broken kernel would be, so the recorded output is the broken one:

- ``temperature_twice``: vLLM's ``Sampler.apply_temperature`` divides the logits by the temperature twice;
- ``linear``: the repacked GEMM of ``model.layers.0.mlp.down_proj`` returns its output x1.01;
- ``attention``: the CPU attention kernel's output x1.01 in ``model.layers.0.self_attn.attn``;
- ``scale_wrong``: layer 0's attention scale is 1/D instead of 1/sqrt(D) (set after the model is loaded);
- ``rope_base_twice``: the rotary cos/sin cache is rebuilt with twice the config's base;
- ``seed_ignored``: vLLM's CPU sampler (``TopKTopPSampler.forward_cpu``) ignores the requests' own
  generators, so seeded requests draw from the global generator (a seed does not fix the draw).

``VLLM_BOOT_LOG=FILE`` appends one line per process where capture was installed (its pid and
multiprocessing name: ``MainProcess``, ``EngineCore...``, the worker), whatever the faults.
"""

from __future__ import annotations

import os
import sys
import threading

LINEAR_LAYER = "model.layers.0.mlp.down_proj"
ATTENTION_LAYER = "model.layers.0.self_attn.attn"
_LOCAL = threading.local()


def _faults() -> set[str]:
    return {f for f in os.environ.get("VLLM_FAULTS", "").split(",") if f}


def _sampler(module) -> None:
    sampler = module.Sampler
    original = sampler.apply_temperature

    def apply_temperature(logits, temp, all_random):
        return original(original(logits, temp, all_random), temp, all_random)

    sampler.apply_temperature = staticmethod(apply_temperature)


def _seed_ignored(module) -> None:
    import functools

    cls = module.TopKTopPSampler
    original = cls.forward_cpu

    @functools.wraps(original)
    def forward_cpu(self, logits, generators, k, p):
        return original(self, logits, {}, k, p)

    cls.forward_cpu = forward_cpu


def _constants(module, faults) -> None:
    cls = module.CPUModelRunner
    original = cls.load_model

    def load_model(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        for name, layer in self.model.named_modules():
            if "scale_wrong" in faults and name.endswith(ATTENTION_LAYER) and hasattr(layer, "impl"):
                layer.impl.scale = 1.0 / layer.impl.head_size
            if "rope_base_twice" in faults and type(layer).__name__ == "RotaryEmbedding":
                layer.cos_sin_cache.copy_(_cache(layer, 2 * layer.base).to(layer.cos_sin_cache.dtype))
        return result

    cls.load_model = load_model


def _cache(layer, base):
    import torch

    inv = 1.0 / (base ** (torch.arange(0, layer.rotary_dim, 2, dtype=torch.float) / layer.rotary_dim))
    freqs = torch.outer(torch.arange(layer.cos_sin_cache.shape[0], dtype=torch.float), inv)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def _linear(module) -> None:
    method = module.UnquantizedLinearMethod
    original = method.process_weights_after_loading

    def process_weights_after_loading(self, layer):
        result = original(self, layer)
        if getattr(layer, "prefix", "") == LINEAR_LAYER and hasattr(layer, "cpu_linear"):
            kernel = layer.cpu_linear
            layer.cpu_linear = lambda x, weight, bias: kernel(x, weight, bias) * 1.01
        return result

    method.process_weights_after_loading = process_weights_after_loading


def _attention_layer(module) -> None:
    layer_cls = module.Attention
    original = layer_cls.forward

    def forward(self, *args, **kwargs):
        _LOCAL.layer = getattr(self, "layer_name", None)
        try:
            return original(self, *args, **kwargs)
        finally:
            _LOCAL.layer = None

    layer_cls.forward = forward


def _attention_kernel(module) -> None:
    original = module.cpu_attention_with_kv_cache

    def cpu_attention_with_kv_cache(*args, **kwargs):
        result = original(*args, **kwargs)
        if getattr(_LOCAL, "layer", None) == ATTENTION_LAYER:
            kwargs["output"].mul_(1.01)
        return result

    module.cpu_attention_with_kv_cache = cpu_attention_with_kv_cache


def install(api) -> None:
    import ikdata_boot

    log = os.environ.get("VLLM_BOOT_LOG")
    if log:
        import json
        import multiprocessing

        with open(log, "a") as stream:
            stream.write(json.dumps({"pid": os.getpid(), "name": multiprocessing.current_process().name}) + "\n")

    plan = {"temperature_twice": [("vllm.v1.sample.sampler", _sampler)],
            "linear": [("vllm.model_executor.layers.linear", _linear)],
            "seed_ignored": [("vllm.v1.sample.ops.topk_topp_sampler", _seed_ignored)],
            "scale_wrong": [("vllm.v1.worker.cpu_model_runner", lambda m: _constants(m, _faults()))],
            "rope_base_twice": [("vllm.v1.worker.cpu_model_runner", lambda m: _constants(m, _faults()))],
            "attention": [("vllm.model_executor.layers.attention.attention", _attention_layer),
                          ("vllm._custom_ops", _attention_kernel)]}
    for fault in _faults():
        for name, patch in plan[fault]:
            if name in sys.modules:
                patch(sys.modules[name])
            else:
                ikdata_boot.watch(lambda name=name, patch=patch: patch(sys.modules[name]), name)
