"""A vLLM user's offline script for the seed and logits-processor tests (run under ``ikdata capture``).

    python vllm_seeded_prog.py MODEL_DIR OUT.json --mode seed42|processor [--prompts N] [--tokens T] [--compiled]

- ``seed42``: every request asks ``SamplingParams(seed=42)`` (the last four share one prompt too, so their
  logits are identical and vLLM must give them identical tokens);
- ``processor``: ``LLM(logits_processors=["vllm_user_processors:BoostToken"])`` (tests/vllm/vllm_user_processors.py), every other
  request asking for it (``extra_args={"boost": True}``); one request in four asks for a logit bias.

Writes each request's id, its tokens and whether it was boosted to OUT.json.
"""

import argparse
import json


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--mode", choices=("seed42", "processor"), required=True)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--compiled", action="store_true", help="vLLM's default mode (no enforce_eager)")
    args = parser.parse_args()
    from vllm import LLM, SamplingParams

    extra = {"logits_processors": ["vllm_user_processors:BoostToken"]} if args.mode == "processor" else {}
    llm = LLM(model=args.model, enforce_eager=not args.compiled, dtype="float32", max_model_len=256, max_num_seqs=64, seed=0,
              **extra)
    prompts = [f"prompt {i}: " + "abcdefgh"[: 1 + i % 8] * (1 + i % 3) for i in range(args.prompts)]
    if args.mode == "seed42":
        prompts[-4:] = [prompts[-4]] * 4
        params = [SamplingParams(max_tokens=args.tokens, ignore_eos=True, temperature=0.9, top_k=50, seed=42)
                  for _ in prompts]
    else:
        params = [SamplingParams(max_tokens=args.tokens, ignore_eos=True, temperature=0.8,
                                 extra_args={"boost": True} if i % 2 == 0 else None,
                                 logit_bias={66: 2.0} if i % 4 == 1 else None) for i in range(len(prompts))]
    outs = llm.generate(prompts, params)
    with open(args.out, "w") as stream:
        json.dump({"requests": [{"request_id": o.request_id, "tokens": list(o.outputs[0].token_ids),
                                 "boosted": args.mode == "processor" and int(o.request_id) % 2 == 0}
                                for o in outs]}, stream)


if __name__ == "__main__":
    main()
