"""Capture at Hugging Face generate's sampler: raw logits, settings, seed and draws; then replay judges them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "examples"))
from generate_with_sampling import build_model  # noqa: E402

PROMPT = [[1, 5, 7, 9, 3]]


@pytest.fixture
def capture_into(tmp_path):
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    def make(**options):
        options.setdefault("into", str(tmp_path / "ds"))
        options.setdefault("only", ("sampling",))
        return boot.install(CaptureConfig(**options))

    yield make
    boot.uninstall()


def _rows(root: Path) -> tuple[list[dict], dict[str, dict]]:
    rows = [json.loads(line) for f in (root / "workloads").rglob("*.jsonl") for line in f.read_text().splitlines()]
    receipts = {r["uuid"]: r for r in map(json.loads, (root / "receipts.jsonl").read_text().splitlines())}
    return rows, receipts


def _tensor(root: Path, descriptor: dict):
    from safetensors.torch import load_file

    return load_file(str(root / descriptor["path"]))[descriptor["tensor_key"]]


def test_sampling_and_greedy_are_captured_with_raw_logits(tmp_path, capture_into):
    import ikdata.capture
    from ikdata.capture import boot

    capture_into(strict=True)
    model = build_model()
    prompt = torch.tensor(PROMPT)
    with torch.inference_mode():
        raw = model(prompt).logits[:, -1].float()
        torch.manual_seed(123)
        with ikdata.capture.request("sampled"):
            sampled = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=True,
                                     temperature=0.7, top_k=10, top_p=0.9, pad_token_id=0)
        with ikdata.capture.request("greedy"):
            greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=2,
                                    do_sample=False, pad_token_id=0)
    boot.flush()
    root = tmp_path / "ds"
    rows, receipts = _rows(root)
    assert {r["definition"] for r in rows} == {"sampling_logits_f32_v128"} and len(rows) == 5
    by_request = {}
    for row in rows:
        receipt = receipts[row["workload"]["uuid"]]
        by_request.setdefault(receipt["request_id"], {})[receipt["step"]] = (row, receipt)
    row, receipt = by_request["sampled"][0]
    inputs = row["workload"]["inputs"]
    logits = _tensor(root, inputs["logits"])
    assert logits.dtype == torch.float32 and torch.allclose(logits, raw, atol=1e-5)  # before temperature and cuts
    assert _tensor(root, inputs["temperature"]).tolist() == pytest.approx([0.7])
    assert _tensor(root, inputs["top_k"]).tolist() == [10]
    assert _tensor(root, inputs["top_p"]).tolist() == pytest.approx([0.9])
    assert _tensor(root, inputs["seed"]).tolist() == [123]
    drawn = [int(_tensor(root, by_request["sampled"][s][1]["expected_output"]["samples"])[0]) for s in range(3)]
    assert drawn == sampled[0, 5:].tolist()
    import transformers

    # HF's sampler draws them: its rows name transformers (issue 51: they said "torch", recorded outside a module)
    assert {(r["engine"], r["engine_version"]) for r in receipts.values()} == {("transformers",
                                                                                  transformers.__version__)}
    g_row, g_receipt = by_request["greedy"][0]
    assert _tensor(root, g_row["workload"]["inputs"]["temperature"]).tolist() == [0.0]
    assert int(_tensor(root, g_receipt["expected_output"]["samples"])[0]) == greedy[0, 5] == int(raw.argmax())


def test_a_repetition_penalty_is_captured_with_its_setting(tmp_path, capture_into):
    """A standard HF processor never stops capture: its setting is recorded and the judge models it."""
    import ikdata.capture
    from ikdata.capture import boot

    cap = capture_into(strict=False)
    model = build_model()
    prompt = torch.tensor(PROMPT)
    with torch.inference_mode(), ikdata.capture.request("penalty"):
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=2, do_sample=True,
                       temperature=0.7, repetition_penalty=1.3, pad_token_id=0)
    boot.flush()
    rows, receipts = _rows(tmp_path / "ds")
    assert len(rows) == 2 and not cap.failures
    row = rows[0]
    assert _tensor(tmp_path / "ds", row["workload"]["inputs"]["repetition_penalty"]).tolist() == pytest.approx([1.3])
    sampler = receipts[row["workload"]["uuid"]]["sampler"]
    assert sampler["order"] == "hf" and not sampler["unknown"]
    assert {p["name"] for p in sampler["processors"] if p["declared"]} >= {"RepetitionPenaltyLogitsProcessor",
                                                                           "TemperatureLogitsWarper"}


def test_captured_draws_get_a_sampling_verdict(tmp_path, capture_into):
    import ikdata
    import ikdata.capture
    from ikdata.capture import boot
    from ikdata.replay.runner import replay

    capture_into(strict=True)
    model = build_model()
    prompt = torch.tensor(PROMPT)
    with torch.inference_mode():
        for seed in range(60):
            torch.manual_seed(seed)
            with ikdata.capture.request(f"seed-{seed}"):
                model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=2, do_sample=True,
                               temperature=0.8, top_p=0.9, top_k=0, pad_token_id=0)
    boot.flush()
    report = replay(ikdata.open(tmp_path / "ds"), reuse=False).report
    assert not [c for c in report["cases"] if c["status"] in ("failed", "error")]
    group = report["sampling"][0]
    assert group["alpha"] == 1e-3 and group["tests"]
    assert all("p_value" in t and ("detectable_tv" in t or "detectable_temperature_error" in t
                                   or "detectable_relative_shift" in t) for t in group["tests"])


def test_a_capture_uninstalled_before_transformers_loads_is_not_the_one_patched_in(tmp_path):
    """The sampler is patched when transformers loads, for the capturer installed then (not a stale one)."""
    import subprocess
    import textwrap

    script = textwrap.dedent(f"""
        import sys, torch
        assert "transformers" not in sys.modules
        from ikdata.capture import boot
        from ikdata.capture.config import CaptureConfig
        boot.install(CaptureConfig(into={str(tmp_path / 'first')!r}, only=("sampling",)))
        boot.uninstall()
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / 'tools' / 'examples')!r})
        from generate_with_sampling import build_model   # imports transformers now
        import ikdata.capture
        boot.install(CaptureConfig(into={str(tmp_path / 'second')!r}, only=("sampling",)))
        model, prompt = build_model(), torch.tensor({PROMPT!r})
        with torch.inference_mode(), ikdata.capture.request("late"):
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=2, do_sample=True,
                           temperature=0.7, pad_token_id=0)
        boot.uninstall()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows, _ = _rows(tmp_path / "second")
    assert len(rows) == 2 and not (tmp_path / "first" / "receipts.jsonl").exists()
