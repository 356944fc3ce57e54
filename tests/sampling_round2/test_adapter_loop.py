"""An engine sampler hooked by an adapter in a decode loop keeps every call (issue 36, findings 2 and 8).

The adapter written as docs/sampling.md shows (``record_sampler``) numbers each call of a request as a
step of its own, so 16 decode steps give 16 workloads (the plain ``api.record`` keyed every call by the
same step and kept 1); each row carries its own request id and decode step; calls that are still not
kept (here: ``--max-per-definition 3``) are counted and named per request when capture ends.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

V, ROWS, STEPS = 32, 4, 16


class Sampler(torch.nn.Module):
    """A serving engine's sampler module: logits [B, V] and per-row metadata in, token ids out."""

    def forward(self, logits, meta):
        return torch.multinomial(torch.softmax(logits / meta["temperature"][:, None], dim=-1), 1)[:, 0]


def _on_sampler(api, module, args, kwargs, out):
    from ikdata.sampling.capture import record_sampler

    logits, meta = args
    b = logits.shape[0]
    inputs = {"logits": logits.float(), "context": meta["context"], "pad": torch.zeros(b, dtype=torch.int64),
              "generated": meta["steps"], "temperature": meta["temperature"],
              "top_k": torch.zeros(b, dtype=torch.int64),
              "top_p": torch.ones(b), "min_p": torch.zeros(b), "typical_p": torch.ones(b), "epsilon": torch.zeros(b),
              "eta": torch.zeros(b), "repetition_penalty": torch.ones(b), "presence_penalty": torch.zeros(b),
              "frequency_penalty": torch.zeros(b), "no_repeat_ngram": torch.zeros(b, dtype=torch.int64),
              "min_new_tokens": torch.zeros(b, dtype=torch.int64), "min_length": torch.zeros(b, dtype=torch.int64),
              "eos": torch.tensor([-1]), "bad_words": torch.tensor([-1]), "seed": torch.full((b,), -1)}
    record_sampler(api, inputs, out.long(), operation="my_engine.Sampler.forward", vocab=V, order="vllm",
                   request_ids=meta["requests"], decode_steps=meta["steps"].tolist())


def _decode_loop(tmp_path, budget=None):
    import ikdata.capture
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    # every step asked for (--per-step): by default only a spread of a loop's steps is looked at (issue 44)
    cap = boot.install(CaptureConfig(into=str(tmp_path / "ds"), only=("sampling",), strict=True,
                                     max_per_definition=budget, per_step=True))
    try:
        cap.on_module("Sampler", _on_sampler)
        sampler = Sampler()
        g = torch.Generator().manual_seed(0)
        context = torch.randint(0, V, (ROWS, 4), generator=g)
        with torch.inference_mode(), ikdata.capture.request("batch-1"):
            for step in range(STEPS):
                meta = {"temperature": torch.full((ROWS,), 0.9), "context": context, "steps": torch.full((ROWS,), step),
                        "requests": [f"req-{r}" for r in range(ROWS)]}
                drawn = sampler(torch.randn(ROWS, V, generator=g) * 2, meta)
                context = torch.cat([context, drawn[:, None]], dim=1)
        boot.flush()
        cap.shutdown()
    finally:
        boot.uninstall()
    receipts = [json.loads(line) for path in (tmp_path / "ds").rglob("*.jsonl") if "receipt" in str(path)
                for line in path.read_text().splitlines() if line.strip()]
    return receipts


def test_every_call_of_a_decode_loop_is_kept_with_rows_request_ids_and_steps(tmp_path):
    receipts = _decode_loop(tmp_path)
    sampling = [r for r in receipts if r.get("operation") == "my_engine.Sampler.forward"]
    assert len(sampling) == STEPS, f"{len(sampling)} of {STEPS} decode steps kept"
    assert sorted(r["step"] for r in sampling) == list(range(STEPS))
    rows = sampling[0]["rows"]
    assert rows["request_id"] == [f"req-{r}" for r in range(ROWS)] and len(rows["decode_step"]) == ROWS


def test_calls_left_out_are_counted_and_named_when_capture_ends(tmp_path, capfd):
    receipts = _decode_loop(tmp_path, budget=3)
    assert len([r for r in receipts if r.get("operation") == "my_engine.Sampler.forward"]) == 3
    err = capfd.readouterr().err
    assert "kept 3 of 16 call(s) of sampling_logits_f32 in request 'batch-1'" in err, err
