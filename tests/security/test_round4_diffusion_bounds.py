"""Round four, findings 2, 3 and 8 (first half): every size a diffusion record gives is bounded before anything
is allocated, and only Diffusers model classes are built from a record.

- a model record's config is checked against its weights' shapes on the meta device before the model is
  built (a 180 KB UNet record saying ``block_out_channels [1024, 2048]`` peaked at 3.4 GB before "size
  mismatch");
- a record naming ``AutoModel`` (or any other non-ModelMixin name) is never built;
- scheduler sizes: ``solver_order`` 1e8, a recorded ``set_timesteps(num_inference_steps=3e7)``, an array
  argument of dtype ``S200000000``: each refused by its JSON pointer before a scheduler is made.

Each hostile replay runs in a child under the memory limit of ``test_record_bounds`` (reused, not copied).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("diffusers")

from test_record_bounds import TRAJECTORY_FILE, captured, hostile, trajectory_case, validate_cli  # noqa: E402,F401


def _edit_model_record(change):
    def edit(record, root: Path) -> None:
        path = root / record["model"]["record"]
        model = json.loads(path.read_text())
        change(model)
        path.write_text(json.dumps(model))  # still named by its tensors' digest: the config is not in it

    return edit


def test_a_model_config_larger_than_its_weights_is_refused_before_building(captured, tmp_path):
    root = hostile(captured, tmp_path,
                   _edit_model_record(lambda m: m["config"].update(block_out_channels=[1024, 2048])))
    done, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error", case
    assert "/config" in case["reason"] and "refused before building it" in case["reason"], case["reason"]
    assert "models/" in case["reason"]  # the record is named
    assert "size mismatch" not in case.get("error", "") + case["reason"]


def test_a_model_config_that_differs_from_the_weights_is_named_by_tensor(captured, tmp_path):
    def smaller(model):
        model["config"]["out_channels"] = model["config"]["out_channels"] - 1  # fewer weights, of other shapes

    root = hostile(captured, tmp_path, _edit_model_record(smaller))
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert "/config" in case["reason"] and "the config builds" in case["reason"], case["reason"]


@pytest.mark.parametrize("name", ["AutoModel", "ModelMixin"])
def test_only_model_classes_diffusers_exports_are_built(captured, tmp_path, name):
    root = hostile(captured, tmp_path, _edit_model_record(lambda m: m.update({"class": name})))
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert f"model class {name!r} is not a model class diffusers exports" in case["reason"], case["reason"]


def test_a_solver_order_of_1e8_is_refused_before_the_scheduler_is_made(captured, tmp_path):
    def order(record, root):
        record["scheduler"]["class"] = "DPMSolverMultistepScheduler"
        record["scheduler"]["config"]["solver_order"] = 10 ** 8

    root = hostile(captured, tmp_path, order)
    done = validate_cli(root, tmp_path)
    assert done.returncode == 1 and "/scheduler/config/solver_order" in done.stdout, done.stdout
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert case["reason"].startswith(f"{TRAJECTORY_FILE}: /scheduler/config/solver_order: scheduler setting "
                                     "solver_order is 100000000; expected at most 16"), case["reason"]


def test_a_recorded_set_timesteps_of_3e7_steps_is_refused(captured, tmp_path):
    def steps(record, root):
        stream = record["streams"][0]
        record["scheduler"]["set_timesteps"] = {stream: {"num_inference_steps": 30_000_000}}

    root = hostile(captured, tmp_path, steps)
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert "/num_inference_steps: set_timesteps argument num_inference_steps is 30000000; expected at most" \
        in case["reason"], case["reason"]


def test_a_recorded_argument_of_dtype_s200000000_is_refused(captured, tmp_path):
    def dtype(record, root):
        stream = record["streams"][0]
        record["scheduler"]["set_timesteps"] = {stream: {"timesteps": {"values": [999, 500, 1], "kind": "ndarray",
                                                                        "dtype": "S200000000"}}}

    root = hostile(captured, tmp_path, dtype)
    done = validate_cli(root, tmp_path)
    assert done.returncode == 1 and "/timesteps/dtype" in done.stdout, done.stdout
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert "has dtype 'S200000000'; expected one of" in case["reason"], case["reason"]


def test_a_recorded_array_argument_longer_than_any_schedule_is_refused():
    from ikdata.diffusion.scheduler_state import decode_arguments, limit_problems

    long = {"sigmas": {"values": [0.5] * 20_001, "kind": "ndarray", "dtype": "float32"}}
    with pytest.raises(ValueError, match="holds more than 10,000 numbers"):
        decode_arguments(long)
    deep = {"sigmas": {"values": [[[[[0.5]]]]], "kind": "list", "dtype": None}}
    assert limit_problems({"set_timesteps": {"video": deep}}, cap=10) != []
    fine = {"sigmas": {"values": [1.0, 0.5], "kind": "ndarray", "dtype": "float32"}, "num_inference_steps": 2}
    assert list(decode_arguments(fine)["sigmas"]) == [1.0, 0.5]
