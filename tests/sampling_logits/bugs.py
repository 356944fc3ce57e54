"""The sampler bugs the judge must catch, injected inside HF's own warpers or as an extra processor."""

from __future__ import annotations

import contextlib

import torch
from transformers import LogitsProcessor
from transformers.generation import logits_process as lp
from transformers.generation.utils import GenerationMixin

from hf_runs import SETTINGS, patched


class Twice(LogitsProcessor):
    """Temperature applied a second time."""

    def __call__(self, input_ids, scores):
        return scores / SETTINGS["temperature"]


def _top_k_plus_one(self, input_ids, scores):
    top_k = min(self.top_k + 1, scores.size(-1))
    return scores.masked_fill(scores < torch.topk(scores, top_k)[0][..., -1, None], self.filter_value)


def _min_p_ignored(self, input_ids, scores):
    return scores


def _temperature_on_probabilities(self, input_ids, scores):
    return torch.softmax(scores, dim=-1) / self.temperature


def _top_p_first(original):
    def build(self, *args, **kwargs):
        found = original(self, *args, **kwargs)
        names = [type(p).__name__ for p in found]
        if "TopKLogitsWarper" in names and "TopPLogitsWarper" in names:
            k, p = names.index("TopKLogitsWarper"), names.index("TopPLogitsWarper")
            found[k], found[p] = found[p], found[k]
        return found
    return build


@contextlib.contextmanager
def injected(bug: str):
    """(extra processors, context) for one bug; the context patches HF while it is active."""
    if bug == "temperature twice":
        yield [Twice()]
    elif bug == "repetition penalty twice":
        original = lp.RepetitionPenaltyLogitsProcessor.__call__
        with patched(lp.RepetitionPenaltyLogitsProcessor, "__call__",
                     lambda self, ids, scores: original(self, ids, original(self, ids, scores))):
            yield []
    elif bug == "top-k off by one":
        with patched(lp.TopKLogitsWarper, "__call__", _top_k_plus_one):
            yield []
    elif bug == "min-p ignored":
        with patched(lp.MinPLogitsWarper, "__call__", _min_p_ignored):
            yield []
    elif bug == "temperature on probabilities":
        with patched(lp.TemperatureLogitsWarper, "__call__", _temperature_on_probabilities):
            yield []
    elif bug == "top-p before top-k":
        with patched(GenerationMixin, "_get_logits_processor", _top_p_first(GenerationMixin._get_logits_processor)):
            yield []
    else:
        raise ValueError(bug)


HF_BUGS = ("temperature twice", "repetition penalty twice", "top-k off by one", "min-p ignored",
           "temperature on probabilities", "top-p before top-k")
