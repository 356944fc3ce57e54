"""A vLLM user's offline script (run by the vLLM tests under ``ikdata capture``): generate with mixed settings.

    python vllm_offline_prog.py MODEL_DIR OUT.json [--prompts N] [--tokens T]

Writes its pid, vLLM's version, and each request's id and generated token ids to OUT.json.
"""

import argparse
import json
import os


def settings(i, SamplingParams, tokens):
    kinds = [dict(temperature=0.6, top_k=40, seed=1000 + i),
             dict(temperature=0.8, top_p=0.9, min_p=0.02),
             dict(temperature=0.7, top_k=50, top_p=0.95, repetition_penalty=1.2, seed=2000 + i),
             dict(temperature=0.6, presence_penalty=0.4, frequency_penalty=0.2),
             dict(temperature=0.0)]
    return SamplingParams(max_tokens=tokens, ignore_eos=True, **kinds[i % len(kinds)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=24)
    args = parser.parse_args()
    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, enforce_eager=True, dtype="float32", max_model_len=256, max_num_seqs=64, seed=0)
    prompts = [f"prompt {i}: " + "abcdefgh"[: 1 + i % 8] * (1 + i % 3) for i in range(args.prompts)]
    outs = llm.generate(prompts, [settings(i, SamplingParams, args.tokens) for i in range(args.prompts)])
    with open(args.out, "w") as stream:
        json.dump({"pid": os.getpid(), "vllm": __import__("vllm").__version__,
                   "requests": [{"request_id": o.request_id, "tokens": list(o.outputs[0].token_ids)} for o in outs]},
                  stream)


if __name__ == "__main__":
    main()
