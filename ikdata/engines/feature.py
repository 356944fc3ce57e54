"""What the serving engines declare: each a capture source, in detection order (SGLang may import vLLM)."""

from __future__ import annotations

from ikdata.core.features import Feature, Source

FEATURE = Feature(
    "engines",
    sources=(Source("sglang", "sglang", order="sglang", engine=True),  # its sampler: tools/launch_sglang_capture.py
             Source("vllm", "vllm", order="vllm", hooks="ikdata.engines.vllm", engine=True)),
)
