"""Capture of real (tiny, random-weight) Diffusers pipelines: LTX-2 (video and audio), LTX (video), DDIM (images).

For each: the trajectory's step count, continuity by digest, the noise check (true with a CPU generator,
false when the program draws its noise another way), the step workloads, and a dataset that passes
``validate --deep``.
"""

from __future__ import annotations

import pytest

import tiny
from diffusion_helpers import digest, trajectories

CASES = {  # builder, streams, steps
    "ltx2": (tiny.ltx2, ["video", "audio"], 3),
    "ltx": (tiny.ltx, ["video"], 3),
    "ddim": (tiny.ddim, ["image"], 4),
}


def _commit_and_validate(root):
    from ikdata.core.dataset import Dataset
    from ikdata.core.writer import DatasetWriter
    from ikdata.ops.validate import validate

    DatasetWriter(root).commit()
    return validate(Dataset.open(root), deep=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_step_of_every_stream_is_captured(name, capture_into, tmp_path):
    build, streams, steps = CASES[name]
    capture_into()
    pipe, kwargs = build(steps=steps)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    assert record["status"] == "complete" and record["reason"] is None
    assert record["streams"] == streams
    assert record["pipeline"]["class"] == type(pipe).__name__
    assert record["request"]["steps"] == steps and record["request"]["num_inference_steps"] == steps
    for stream in streams:
        mine = [s for s in record["steps"] if s["stream"] == stream]
        assert [s["index"] for s in mine] == list(range(steps))
        for a, b in zip(mine, mine[1:]):  # continuity: x_next of step i IS x of step i+1 (one blob)
            assert digest(a["x_next"]) == digest(b["x"])
        assert digest(record["final"][stream]) == digest(mine[-1]["x_next"])
        assert len({digest(s["out"]) for s in mine}) == steps
    assert record["noise"]["check"] == {s: True for s in streams}
    assert record["noise"]["seed"] == kwargs["generator"].initial_seed()
    assert [s["name"] for s in record["noise"]["streams"]] == streams
    from ikdata.diffusion import noise

    expected = noise.recipe_digest(record["noise"]["seed"], [noise.Stream(s["name"], tuple(s["shape"]))
                                                             for s in record["noise"]["streams"]])
    assert record["noise"]["digest"] == expected
    assert record["decoded"] and record["model"]["stored"] is True
    report = _commit_and_validate(tmp_path / "ds")
    assert report.ok, [str(p) for p in report.problems]
    assert report.trajectories == 1


def test_storage_is_about_n_plus_one_latents_per_stream(capture_into, tmp_path):
    """x_next of step i and x of step i+1 are one blob: the x/x_next chain stores N+1 latents, not 2N."""
    capture_into()
    pipe, kwargs = tiny.ltx(steps=5)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    chain = {digest(s[k]) for s in record["steps"] for k in ("x", "x_next")}
    assert len(chain) == 5 + 1
    assert all((tmp_path / "ds" / s[k]["path"]).is_file() for s in record["steps"] for k in ("x", "out", "x_next"))


def test_scheduler_step_workloads_replay_exactly(capture_into, tmp_path):
    """Each flow-matching step is a workload of a shipped definition whose reference needs no weights."""
    import torch

    from ikdata.core.dataset import Dataset
    from ikdata.core.definitions import load_reference

    capture_into()
    pipe, kwargs = tiny.ltx2(steps=2)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    rows = {r.uuid: r for r in ds.workloads()}
    receipts = {r.uuid: r for r in ds.receipts()}
    checked = 0
    for step in record["steps"]:
        [uuid] = step["workloads"]["scheduler_step"]
        row = rows[uuid]
        definition = ds.trusted_definitions[row.definition]
        run = load_reference(definition)
        got = run(**ds.load_inputs(row))
        assert torch.equal(got, ds.load_expected(receipts[uuid])["x_next"])
        checked += 1
    assert checked == 4
    denoisers = [u for s in record["steps"] for u in s["workloads"].get("denoiser", [])]
    assert len(denoisers) == 2 and all(rows[u].definition == "ltx2_av_transformer_f32" for u in denoisers)
    # a lone process is rank 0 of 1, as in operator receipts (a distributed program keeps every rank's steps)
    assert {(r.provenance.get("rank"), r.provenance.get("world_size")) for r in receipts.values()} == {(0, 1)}


def test_ddim_step_workloads_replay_exactly(capture_into, tmp_path):
    """The image pipeline's DDIM steps are workloads too (eta = 0): recomputed bit for bit without weights."""
    import torch

    from ikdata.core.dataset import Dataset
    from ikdata.core.definitions import load_reference

    capture_into()
    pipe, kwargs = tiny.ddim(steps=3)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    rows = {r.uuid: r for r in ds.workloads()}
    receipts = {r.uuid: r for r in ds.receipts()}
    for step in record["steps"]:
        [uuid] = step["workloads"]["scheduler_step"]
        run = load_reference(ds.trusted_definitions[rows[uuid].definition])
        assert rows[uuid].definition == "ddim_step_r4_f32"
        assert torch.equal(run(**ds.load_inputs(rows[uuid])), ds.load_expected(receipts[uuid])["x_next"])


def test_denoiser_reference_reproduces_the_output_with_the_stored_model(capture_into, tmp_path):
    """The denoiser workload's reference, given the model rebuilt from the dataset (record + weight blobs)."""
    import orjson
    import torch

    from ikdata.core.dataset import Dataset
    from ikdata.core.definitions import load_reference
    from ikdata.diffusion.models import read_record

    capture_into()
    pipe, kwargs = tiny.ltx(steps=2)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    model = read_record(ds.root, record["model"]["record"])
    state = {name: ds.store.get(_ref(path)) for name, path in model.blob_paths().items()}
    [uuid] = record["steps"][1]["workloads"]["denoiser"]
    row = next(r for r in ds.workloads() if r.uuid == uuid)
    receipt = next(r for r in ds.receipts() if r.uuid == uuid)
    run = load_reference(ds.trusted_definitions[row.definition])
    out = run(**ds.load_inputs(row), model={"record": orjson.loads((ds.root / model.source).read_bytes()),
                                            "state_dict": state})
    assert torch.allclose(out, ds.load_expected(receipt)["out"], atol=1e-5, rtol=1e-5)


def _ref(path):
    from ikdata.core.records import TensorRef

    return TensorRef(path, "tensor")


@pytest.mark.parametrize("name", ["ltx", "ddim"])
def test_noise_check_is_false_when_the_program_draws_its_noise_another_way(name, capture_into, tmp_path):
    import torch

    capture_into()
    pipe, kwargs = CASES[name][0]()
    if name == "ltx":  # latents passed in, drawn from the global generator: not the recipe
        torch.manual_seed(5)
        kwargs["latents"] = pipe._pack_latents(torch.randn(1, 8, 3, 8, 8), 1, 1)
    else:  # the right generator, but something drawn from it first: another state, other numbers
        torch.randn(3, generator=kwargs["generator"])
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    stream = CASES[name][1][0]
    assert record["noise"]["check"] == {stream: False}
    assert record["noise"]["reason"]


def test_steps_and_streams_selection(capture_into, tmp_path):
    capture_into(steps=(0, 2), streams=("audio",))
    pipe, kwargs = tiny.ltx2(steps=3)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    assert [(s["index"], s["stream"]) for s in record["steps"]] == [(0, "audio"), (2, "audio")]
    assert record["selection"] == {"steps": [0, 2], "streams": ["audio"]}
    assert record["noise"]["check"] == {"video": True, "audio": True}  # checked whatever is selected
    report = _commit_and_validate(tmp_path / "ds")
    assert report.ok, [str(p) for p in report.problems]


def test_max_bytes_stops_the_trajectory_and_marks_it(capture_into, tmp_path):
    capture_into(max_bytes=130_000)
    pipe, kwargs = tiny.ltx2(steps=3)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    assert record["status"] == "incomplete"
    assert record["reason"].startswith("--max-bytes reached at step")
    assert 0 < len(record["steps"]) < 6
    report = _commit_and_validate(tmp_path / "ds")
    assert report.ok, [str(p) for p in report.problems]


def test_the_same_model_is_stored_once_across_trajectories(capture_into, tmp_path):
    capture_into()
    pipe, kwargs = tiny.ddim(steps=2)
    pipe(**kwargs)
    kwargs["generator"].manual_seed(11)
    pipe(**kwargs)
    first, second = trajectories(tmp_path / "ds")
    assert first["model"] == second["model"]
    assert first["trajectory"] != second["trajectory"]
    assert len(list((tmp_path / "ds" / "models").glob("*.json"))) == 1


def test_max_per_definition_does_not_cut_a_trajectory(capture_into, tmp_path):
    capture_into(max_per_definition=1)
    pipe, kwargs = tiny.ltx(steps=3)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    assert record["status"] == "complete" and [s["index"] for s in record["steps"]] == [0, 1, 2]
