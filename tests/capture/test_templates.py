"""Shipped templates: valid definitions, deterministic instances, trust by digest, and CPU references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ikdata.core.templates import TEMPLATE_TAG, instantiate, load_templates, match_instance, trusted_instances
from ikdata.core.definitions import DATASET, SHIPPED, Definition, load_reference, read_folder, shipped_folder
from ikdata.core.errors import DefinitionError, UntrustedReference


def test_shipped_folder_parses_cleanly_and_templates_are_marked():
    found, problems = read_folder(shipped_folder(), origin=SHIPPED)
    assert problems == []
    templates = load_templates()
    assert {"dense_gemm_bf16_nt", "dense_gemm_bias_f32_nt", "sdpa_causal_bf16", "sdpa_masked_f16",
            "rmsnorm_bf16", "layernorm_f32"} <= set(templates)
    assert all(TEMPLATE_TAG in t.definition.record["tags"] for t in templates.values())


def test_instantiate_fills_const_axes_and_names():
    template = load_templates()["dense_gemm_bf16_nt"]
    instance = instantiate(template, {"N": 4096, "K": 1024})
    assert instance.name == "dense_gemm_bf16_nt_n4096_k1024"
    assert instance.const_axes == {"N": 4096, "K": 1024}
    assert instance.var_axes == ["M"]
    assert "template" not in instance.record
    assert instance.record["tags"] == ["ikdata:template=dense_gemm_bf16_nt"]
    assert instance.check() == []
    assert instantiate(template, {"N": 4096, "K": 1024}).digest == instance.digest
    with pytest.raises(DefinitionError, match="template needs values for \\['K'\\]"):
        instantiate(template, {"N": 1})


def test_match_instance():
    template, values = match_instance("sdpa_causal_bf16_h32_kv8_d128")
    assert template.name == "sdpa_causal_bf16" and values == {"H": 32, "HKV": 8, "D": 128}
    assert match_instance("sdpa_causal_bf16_h32_kv8") is None


def test_trusted_instances_accepts_exact_instances_only():
    template = load_templates()["rmsnorm_f32"]
    good = Definition.from_dict(dict(instantiate(template, {"H": 64}).record), origin=DATASET, source="ds")
    tampered_record = dict(good.record, reference=good.reference + "\nimport os\n")
    tampered = Definition.from_dict(tampered_record, origin=DATASET, source="ds")
    renamed = Definition.from_dict(dict(good.record, name="rmsnorm_f32_h65"), origin=DATASET, source="ds")
    trusted = trusted_instances({good.name: good, "evil": tampered, renamed.name: renamed})
    assert list(trusted) == ["rmsnorm_f32_h64"]
    assert callable(load_reference(good, trusted_definitions=trusted))
    with pytest.raises(UntrustedReference):
        load_reference(tampered, trusted_definitions=trusted)


def _run(name: str, values: dict, **inputs):
    definition = instantiate(load_templates()[name], values)
    return load_reference(definition)(**inputs)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_references_match_torch_on_cpu(dtype, tol):
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g).to(dtype)  # noqa: E731
    s = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
    close = lambda a, b: torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)  # noqa: E731

    a, w, bias = r(5, 16), r(8, 16), r(8)
    out = _run(f"dense_gemm_{s}_nt", {"N": 8, "K": 16}, A=a, W=w)
    assert out.dtype == dtype
    close(out, F.linear(a, w))
    close(_run(f"dense_gemm_bias_{s}_nt", {"N": 8, "K": 16}, A=a, W=w, bias=bias), F.linear(a, w, bias))

    q, k, v = r(2, 4, 5, 8), r(2, 2, 7, 8), r(2, 2, 7, 8)
    scale = 1 / math.sqrt(8)
    fills = {"H": 4, "HKV": 2, "D": 8}
    close(_run(f"sdpa_{s}", fills, Q=q, K=k, V=v, scale=scale),
          F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    close(_run(f"sdpa_causal_{s}", fills, Q=q, K=k, V=v, scale=0.3),
          F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True))
    mask = torch.rand(2, 1, 5, 7, generator=g) > 0.3
    mask[..., 0] = True
    close(_run(f"sdpa_masked_{s}", fills, Q=q, K=k, V=v, mask=mask, scale=scale),
          F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True))

    x, weight, b = r(6, 16), r(16), r(16)
    close(_run(f"rmsnorm_{s}", {"H": 16}, X=x, W=weight, eps=1e-6), F.rms_norm(x, (16,), weight, 1e-6))
    close(_run(f"layernorm_{s}", {"H": 16}, X=x, W=weight, B=b, eps=1e-5), F.layer_norm(x, (16,), weight, b, 1e-5))
