"""Build a tiny random Llama folder that vLLM loads: config, safetensors weights and a tokenizer, all made here.

Nothing comes from a model hub: the tokenizer is a byte-level BPE with no merges (every byte one token,
plus <s>, </s> and <unk>), built with ``tokenizers``; the weights are random (seeded). vLLM's CPU attention
needs head_dim >= 32, so the model has 2 heads of 64 (1 KV head: grouped-query attention, as real Llamas).

    .venv-vllm/bin/python tools/vllm_tiny_model.py OUT [--seed 0] [--dtype float32]

Runs in the vLLM venv (needs transformers, tokenizers, torch, safetensors).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

VOCAB = 320  # 256 bytes + 3 specials, padded (vLLM pads nothing; the embedding is simply larger)
CONFIG = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 1, "head_dim": 64, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "tie_word_embeddings": False}


def _tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate(specials + alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(str(out))


def build(out: Path, *, seed: int = 0, dtype: str = "float32") -> Path:
    """Write the model folder ``out`` (created) and return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, torch_dtype=dtype, **CONFIG)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # logits of spread about 1.5: many likely tokens, a tail that top-k/top-p/min-p cut
        model.lm_head.weight.normal_(0.0, 0.15)
    model.to(getattr(torch, dtype)).save_pretrained(str(out), safe_serialization=True)
    _tokenizer(out)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args(argv)
    print(build(args.out, seed=args.seed, dtype=args.dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
