"""Any Diffusers pipeline is judged step by step, its streams, denoiser calls and guidance discovered.

For each pipeline family (tiny random weights from config, CPU): the honest run passes ``validate --deep``
and replay (its noise check included: Flux's packed latents, Euler's init_noise_sigma); an engine with
attention x1.01 at step 1, guidance dropped at step 2, a wrong sigma at step 3 and a wrong update at
step 4 fails exactly at those steps, the first two on e (the denoiser workloads of those steps
blamed), the last two on the chain check (the denoiser workloads stay passed).
"""

from __future__ import annotations

import json

import pytest

import pipeline_judging as pj

PIPELINES = ["flux", "flux-true-cfg", "sd3", "wan", "sd", "cogvideox", "pixart-sigma", "ltx", "ltx2", "ddim", "ddpm"]
UNGUIDED = {"flux", "ddim", "ddpm"}  # no classifier-free guidance to drop (Flux-dev distils it into an input)
STEPS = 5
DENOISERS = {"flux": "FluxTransformer2DModel", "sd3": "SD3Transformer2DModel", "wan": "WanTransformer3DModel",
             "sd": "UNet2DConditionModel", "cogvideox": "CogVideoXTransformer3DModel",
             "pixart-sigma": "PixArtTransformer2DModel"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (honest report, perturbed report, honest dataset), each pipeline captured and replayed once."""
    found: dict = {}

    def get(name: str):
        if name not in found:
            tmp = tmp_path_factory.mktemp(name)
            honest = pj.capture(tmp / "honest", name, steps=STEPS)
            wrong = pj.capture(tmp / "wrong", name, steps=STEPS,
                               perturb=lambda pipe: pj.all_wrong(pipe, guided=name not in UNGUIDED))
            found[name] = (pj.replay(honest, tmp / "honest.json"), pj.replay(wrong, tmp / "wrong.json"), honest)
        return found[name]

    return get


@pytest.mark.parametrize("name", PIPELINES)
def test_an_honest_run_passes_validate_deep_and_replay(name, runs):
    from ikdata.core.dataset import Dataset
    from ikdata.ops.validate import validate

    report, _, root = runs(name)
    checked = validate(Dataset.open(root), deep=True)
    assert checked.ok, [str(p) for p in checked.problems]
    case = pj.trajectory_case(report)
    assert case["status"] == "passed", case.get("reason")
    m = case["trajectory"]
    assert m["steps_passed"] == m["steps_total"] == STEPS * len(m["streams"])
    assert m["level"] == "step output"  # the guidance was discovered: e compares what the scheduler consumed
    assert all(n["equal"] for n in m["noise"].values()), m["noise"]  # packing and init_noise_sigma understood
    [line] = [json.loads(p.read_text()) for p in (root / "trajectories").glob("*.jsonl")]
    assert all(line["noise"]["check"].values()), line["noise"]["reason"]
    statuses = pj.step_statuses(report, "denoiser")
    assert sorted(statuses) == list(range(STEPS)) and all(s == {"passed"} for s in statuses.values())


@pytest.mark.parametrize("name", PIPELINES)
def test_each_perturbation_fails_at_its_step_with_the_right_workload_blamed(name, runs):
    _, report, _ = runs(name)
    case = pj.trajectory_case(report)
    assert case["status"] == "failed"
    rows = case["trajectory"]["steps"]
    streams = case["trajectory"]["streams"]
    e_fails = {1} | (set() if name in UNGUIDED else {2})
    for row in rows:  # the guidance and scheduler errors are the main stream's (LTX-2's audio has its own scheduler)
        main = row["stream"] == streams[0]
        wrong_e = row["e"] > row["bound"]
        wrong_chain = row["chain"] > row["chain_bound"]
        assert wrong_e == (row["index"] in (e_fails if main else {1})), (row["index"], row["stream"], row["e"])
        assert wrong_chain == (main and row["index"] in (3, 4)), (row["index"], row["stream"], row["chain"])
    first = case["trajectory"]["first_failure"]
    assert first["step"] == 1 and first["check"] == "e"
    denoisers = pj.step_statuses(report, "denoiser")
    assert {i for i, s in denoisers.items() if "failed" in s} == e_fails
    schedulers = pj.step_statuses(report, "scheduler_step")
    if schedulers:  # a scheduler with a step definition: its workloads at the wrong steps are blamed
        assert {i for i, s in schedulers.items() if "failed" in s} == {3, 4}


@pytest.mark.parametrize("name", sorted(DENOISERS))
def test_the_denoiser_definition_is_discovered_from_the_call(name, runs):
    from ikdata.core.dataset import Dataset
    from ikdata.diffusion import discovery

    _, _, root = runs(name)
    ds = Dataset.open(root)
    found = [d for d in ds.definitions.values() if d.op_type == "denoiser"]
    assert len(found) == 1 and discovery.is_generic(found[0]) and discovery.check_generic(found[0]) is None
    assert found[0].name.startswith(f"denoiser_{DENOISERS[name]}_f32_")
    assert "ikdata:needs-model" in found[0].record["tags"]
