"""Seeded sampling with a random-weight tiny Llama (transformers): what the sampling judge needs.

Each seed is one request: ``torch.manual_seed(seed)``, then ``generate`` with temperature,
top-p (top-k off: with both on, the Hugging Face and SGLang orders keep different tokens and
``order: any`` excludes the position). Every request starts from the same prompt, so the first token of all
requests is drawn from one distribution (a TV test over the seeds); later tokens follow
different prefixes (one draw per position: the pooled PIT test). One greedy request is
captured too. The model is float32, so the raw logits have no bfloat16 ties.

    ikdata capture --into runs/sampling --only sampling -- python tools/examples/generate_with_sampling.py
    ikdata replay runs/sampling
"""

from __future__ import annotations

import argparse
import contextlib


def build_model(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharper logits than the random init's, closer to a trained model's
        model.lm_head.weight.mul_(8.0)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300, help="requests, one seed each")
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=0.9)
    args = parser.parse_args()

    import torch

    try:
        import ikdata.capture as capture
    except ImportError:  # run without ikdata: nothing is tagged
        capture = None
    model = build_model()
    prompt = torch.tensor([[1, 5, 7, 9, 3]])
    mask = torch.ones_like(prompt)
    first = {}
    with torch.inference_mode():
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            tag = capture.request(f"seed-{seed}") if capture else contextlib.nullcontext()
            with tag:
                out = model.generate(prompt, attention_mask=mask, max_new_tokens=args.new_tokens, do_sample=True,
                                     temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                     pad_token_id=0)
            token = int(out[0, prompt.shape[1]])
            first[token] = first.get(token, 0) + 1
        tag = capture.request("greedy") if capture else contextlib.nullcontext()
        with tag:
            greedy = model.generate(prompt, attention_mask=mask, max_new_tokens=args.new_tokens, do_sample=False,
                                    pad_token_id=0)
    print(f"{args.seeds} seeded requests; first tokens drawn: {dict(sorted(first.items()))}")
    print("greedy:", greedy[0, prompt.shape[1]:].tolist())


if __name__ == "__main__":
    main()
