"""A user's own vLLM v1 logits processor (``LLM(logits_processors=["vllm_user_processors:BoostToken"])``):
adds 5 to token 65 for requests that ask for it with ``SamplingParams(extra_args={"boost": True})``."""

from __future__ import annotations

from vllm.v1.sample.logits_processor import LogitsProcessor
from vllm.v1.sample.logits_processor.interface import MoveDirectionality

TOKEN = 65


class BoostToken(LogitsProcessor):
    def __init__(self, vllm_config, device, is_pin_memory):
        self.boosted: set[int] = set()

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.boosted.discard(index)
        for index, params, _, _ in batch_update.added:
            if (params.extra_args or {}).get("boost"):
                self.boosted.add(index)
            else:
                self.boosted.discard(index)
        for a, b, direction in batch_update.moved:
            had_a, had_b = a in self.boosted, b in self.boosted
            self.boosted.discard(a)
            self.boosted.discard(b)
            if had_a:
                self.boosted.add(b)
            if direction == MoveDirectionality.SWAP and had_b:
                self.boosted.add(a)

    def apply(self, logits):
        for index in self.boosted:
            logits[index, TOKEN] += 5.0
        return logits
