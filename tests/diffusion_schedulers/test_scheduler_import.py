"""Import re-judges what a diffusion dataset's report claims by replaying its trajectories here: an honest
dataset imports without --trust-reports, a perturbed one whose report was edited to claim a pass is refused."""

from __future__ import annotations

import json

import pytest

import scheduler_sweep as sw


def _dataset(root, variant, perturbation):
    """Capture one call of the sweep pipeline and replay it into its own report (the claim import reads)."""
    sw.capture(root, [variant], perturbations=(perturbation,) if perturbation else (), honest=not perturbation)
    import ikdata
    from ikdata.replay.runner import replay

    return replay(ikdata.open(root), reuse=False).report


def _forge(root):
    """Edit the dataset's report so every case claims a pass with a zero chain error (what a forger writes)."""
    import ikdata

    path = ikdata.open(root).report_path
    report = json.loads(path.read_text())
    for case in report["cases"]:
        case["status"] = "passed"
        case.pop("reason", None)
        for step in (case.get("trajectory") or {}).get("steps") or []:
            step.update(chain=0.0, passed=True)
            step.pop("chain_reason", None)
            step.pop("failed", None)
    path.write_text(json.dumps(report))


DDIM = next(v for v in sw.variants() if v.label == "DDIMScheduler")


def test_an_honest_diffusion_dataset_imports_with_its_claims_rejudged(tmp_path):
    from ikdata.core.layout import init_dataset
    from ikdata.importing.apply import import_dataset

    report = _dataset(tmp_path / "src", DDIM, None)
    assert all(c["status"] == "passed" for c in report["cases"])
    init_dataset(tmp_path / "dst", name="dst")
    result = import_dataset(tmp_path / "src", tmp_path / "dst")  # no --trust-reports
    statement = result.rejudged.statement()
    assert statement.startswith("re-judged 6 of 6 cases") and "all agree" in statement  # 3 denoiser, 3 DDIM steps
    assert (tmp_path / "dst" / "trajectories").is_dir()


def test_a_perturbed_dataset_claiming_a_pass_is_refused(tmp_path):
    from ikdata.core.errors import IkdataError
    from ikdata.core.layout import init_dataset
    from ikdata.importing.apply import import_dataset

    report = _dataset(tmp_path / "src", DDIM, "update")
    assert any(c["status"] == "failed" for c in report["cases"])
    _forge(tmp_path / "src")
    init_dataset(tmp_path / "dst", name="dst")
    with pytest.raises(IkdataError) as refused:
        import_dataset(tmp_path / "src", tmp_path / "dst")
    message = str(refused.value) + " ".join(str(p) for p in getattr(refused.value, "problems", []))
    assert "re-judged here, it fails" in message and f"step {sw.at(DDIM)} of trajectory" in message, message
    assert not (tmp_path / "dst" / "trajectories").exists()
