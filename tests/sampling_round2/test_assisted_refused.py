"""Assisted generation and prompt-lookup decoding draw outside ``_sample`` (issue 36, finding 1).

Capture must not record the draft model's logits as if they were the target's draws: the call is
refused by name, marked lost (so ``ikdata capture`` exits 1), and nothing is written for it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_runs import build_model  # noqa: E402


def _capture(tmp_path, **generate):
    import ikdata.capture
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.capture.runner import CaptureResult

    model = build_model()
    cap = boot.install(CaptureConfig(into=str(tmp_path / "ds"), only=("sampling",)))
    try:
        prompt = torch.tensor([[1, 5, 7, 9, 3, 5, 7, 9]])
        torch.manual_seed(0)
        with torch.inference_mode(), ikdata.capture.request("assisted"):
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16, pad_token_id=0,
                           **generate)
        boot.flush()
        failures = list(cap.failures)
        captured = dict(cap.captured)
    finally:
        boot.uninstall()
    return CaptureResult(0, {}, failures=failures).lost_calls(), captured


@pytest.mark.parametrize("mode, kwargs", [
    ("assisted generation", {"assistant_model": "draft"}),
    ("prompt-lookup decoding", {"prompt_lookup_num_tokens": 3}),
])
@pytest.mark.parametrize("do_sample", [True, False])
def test_assisted_decoding_is_refused_by_name_and_nothing_is_recorded(tmp_path, mode, kwargs, do_sample):
    if kwargs.get("assistant_model") == "draft":
        kwargs = {"assistant_model": build_model(seed=1)}
    lost, captured = _capture(tmp_path, do_sample=do_sample, **kwargs)
    assert lost and mode in lost[0] and lost[0].startswith("sampling_logits_f32"), lost
    assert not captured, f"the draft's logits were recorded as workloads: {captured}"


def test_plain_sampling_after_an_assisted_call_is_recorded_again(tmp_path):
    """The refusal is per call: the draft's calls are skipped only inside the assisted call."""
    import ikdata.capture
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    model, draft = build_model(), build_model(seed=1)
    cap = boot.install(CaptureConfig(into=str(tmp_path / "ds"), only=("sampling",)))
    try:
        prompt = torch.tensor([[1, 5, 7, 9, 3]])
        with torch.inference_mode():
            with ikdata.capture.request("a"):
                model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, pad_token_id=0,
                               do_sample=True, assistant_model=draft)
            with ikdata.capture.request("b"):
                model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, pad_token_id=0,
                               do_sample=True)
        boot.flush()
        captured = sum(cap.captured.values())
    finally:
        boot.uninstall()
    assert captured == 4
