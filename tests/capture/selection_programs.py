"""Programs the selection tests run under ``ikdata capture``: tiny transformers models built from a config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TINY_LLAMA = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
torch.manual_seed(0)
model = LlamaForCausalLM(config).eval()
"""

TWO_GENERATES = TINY_LLAMA + """
import sys
from transformers.generation.logits_process import TopKLogitsWarper

if "--bug" in sys.argv:  # a top-k that keeps three times the tokens asked for: only the sampled call shows it
    original = TopKLogitsWarper.__call__

    def wrong(self, input_ids, scores):
        k, self.top_k = self.top_k, self.top_k * 3
        try:
            return original(self, input_ids, scores)
        finally:
            self.top_k = k

    TopKLogitsWarper.__call__ = wrong
prompt = torch.randint(3, 128, (16, 5), generator=torch.Generator().manual_seed(1))
with torch.inference_mode():  # no request id: the second call differs only by its settings
    model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False,
                   pad_token_id=0)
    model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=True,
                   temperature=0.8, top_k=20, top_p=0.95, pad_token_id=0)
"""

FORWARD_LOOP = TINY_LLAMA + """
import sys

ids = torch.randint(3, 128, (1, 12), generator=torch.Generator().manual_seed(1))
with torch.inference_mode():
    for _ in range(int(sys.argv[1])):
        model(ids)
"""


def ikdata_capture(tmp_path: Path, name: str, source: str, *options: str, args: tuple[str, ...] = (),
                   into: str = "ds") -> tuple[subprocess.CompletedProcess, Path]:
    """Run ``ikdata capture --into TMP/into OPTIONS -- python PROGRAM ARGS`` as a user would (a real subprocess)."""
    script = tmp_path / name
    script.write_text(source)
    dataset = tmp_path / into
    done = subprocess.run([sys.executable, "-m", "ikdata", "capture", "--into", str(dataset), *options, "--",
                           sys.executable, str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
    return done, dataset


def ikdata(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ikdata", *argv], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
