"""Greedy generation with a random-weight tiny Llama (transformers), with a KV cache.

Prefill runs causal attention over the prompt; each decode step attends one new
query to the growing cache (grouped-query attention: 4 query heads, 2 KV heads).
The model is bfloat16, so the GEMMs are ``dense_gemm_bf16_nt_*`` (bias-free
F.linear), LlamaRMSNorm is captured by its module adapter, and SDPA appears as
``sdpa_causal_*`` (prefill) and ``sdpa_*`` (decode).

    ikdata capture --into runs/llama --steps 0,1 -- python tools/examples/tiny_llama_generate.py
"""

from __future__ import annotations

import argparse


def build_model(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=3)
    parser.add_argument("--request-id", default=None, help="Tag the generation as this request (ikdata.capture.request).")
    args = parser.parse_args()

    import contextlib

    import torch

    model = build_model()
    prompt = torch.tensor([[1, 5, 7, 9, 3]])
    context = contextlib.nullcontext()
    if args.request_id:
        import ikdata.capture

        context = ikdata.capture.request(args.request_id)
    with context, torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.new_tokens,
                             do_sample=False, pad_token_id=0)
    print("generated:", out[0, prompt.shape[1]:].tolist())


if __name__ == "__main__":
    main()
