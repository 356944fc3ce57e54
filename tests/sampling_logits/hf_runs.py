"""Run HF generate on the tiny Llama under capture, with a bug injected or not, and replay what it captured."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "examples"))
from generate_with_sampling import build_model  # noqa: E402

SETTINGS = dict(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.3)
ROWS, NEW_TOKENS = 128, 8  # 1,024 positions per run


def prompts(rows: int = ROWS, length: int = 6, seed: int = 7) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 128, (rows, length), generator=g)


def capture_run(model, into: Path, *, seed: int = 0, processors=(), request: str = "run", rows: int = ROWS,
                new_tokens: int = NEW_TOKENS, **settings) -> None:
    """One batched generate under capture (strict: a failing hook raises here)."""
    import ikdata.capture
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from transformers import LogitsProcessorList

    boot.install(CaptureConfig(into=str(into), only=("sampling",), strict=True))
    try:
        prompt = prompts(rows)
        torch.manual_seed(seed)
        with torch.inference_mode(), ikdata.capture.request(request):
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, pad_token_id=0, eos_token_id=2,
                           logits_processor=LogitsProcessorList(list(processors)), **{**SETTINGS, **settings})
        boot.flush()
    finally:
        boot.uninstall()


def replay_dir(into: Path, definitions: Path | None = None):
    import ikdata
    from ikdata.replay.runner import replay

    ds = ikdata.open(into, definitions=(str(definitions),) if definitions else ())
    return replay(ds, reuse=False)


@contextlib.contextmanager
def patched(owner, name, value):
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def typical_on_logits(self, input_ids, scores):
    """A typical-p bug injected into HF's TypicalLogitsWarper.__call__: the entropy taken over the logits,
    not the log-probabilities (issue 36, finding 4; the test and tools/sampling_power.py share it)."""
    normalized = scores.masked_fill(torch.isinf(scores), -1e4)  # the bug: logits, not log-probabilities
    p = torch.exp(normalized)
    ent = -(normalized * p).nansum(-1, keepdim=True)
    shifted = torch.abs((-normalized) - ent)
    sorted_scores, sorted_indices = torch.sort(shifted, descending=False)
    cumulative = scores.gather(-1, sorted_indices).softmax(dim=-1).cumsum(dim=-1)
    last = (cumulative < self.mass).sum(dim=1).clamp_(max=sorted_scores.shape[-1] - 1)
    remove = sorted_scores > sorted_scores.gather(1, last.view(-1, 1))
    remove[..., : self.min_tokens_to_keep] = 0
    return scores.masked_fill(remove.scatter(1, sorted_indices, remove), self.filter_value)
