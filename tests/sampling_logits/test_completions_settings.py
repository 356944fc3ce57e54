"""Completions logs from vLLM and SGLang: a declared penalty or constraint the top-K judge cannot model is refused
by name (file, line, pointer), never judged as if it were off; the modelled settings import."""

from __future__ import annotations

import json

import pytest

from ikdata.core.errors import ProblemsFound
from ikdata.sampling.completions import read_completions


def _line(**settings):
    return {"prompt": "p", "model": "tiny", "position": 0, "vocab_size": 1000,
            "settings": {"temperature": 0.7, "top_k": 5, "top_p": 1.0, "min_p": 0.0, **settings},
            "top_logprobs": [{"token": f"token_id:{i}", "logprob": -0.5 - i} for i in range(8)],
            "draws": [{"seed": 0, "token": "token_id:0"}]}


@pytest.mark.parametrize("setting, value", [("presence_penalty", 0.5), ("frequency_penalty", 0.2),
                                            ("repetition_penalty", 1.1), ("min_tokens", 4),
                                            ("logit_bias", {"7": 5.0})])
def test_a_declared_penalty_is_refused_by_name(tmp_path, setting, value):
    path = tmp_path / "draws.jsonl"
    path.write_text(json.dumps(_line(**{setting: value})) + "\n")
    with pytest.raises(ProblemsFound) as found:
        read_completions(path)
    [problem] = found.value.problems
    assert problem.line == 1 and problem.pointer == f"/settings/{setting}" and "sampling_logits_f32" in problem.message


def test_settings_at_their_off_values_import(tmp_path):
    path = tmp_path / "draws.jsonl"
    path.write_text(json.dumps(_line(presence_penalty=0.0, frequency_penalty=0, repetition_penalty=1.0,
                                     min_tokens=0, logit_bias={})) + "\n")
    [position] = read_completions(path)
    assert position.settings["top_k"] == 5
