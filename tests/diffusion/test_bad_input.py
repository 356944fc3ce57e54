"""Bad input: a scheduler without step(), a program that raises or is killed mid-trajectory, and
trajectory records that name a missing blob, list steps out of order or disagree with the request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tiny
from diffusion_helpers import trajectories

ROOT = Path(__file__).resolve().parents[2]


def _validate(root):
    from ikdata.core.dataset import Dataset
    from ikdata.core.writer import DatasetWriter
    from ikdata.ops.validate import validate

    DatasetWriter(root).commit()
    return validate(Dataset.open(root), deep=True)


def test_a_scheduler_without_step_captures_nothing_and_says_why(capture_into, tmp_path):
    import torch
    from diffusers import DiffusionPipeline

    capturer = capture_into(strict=False)
    pipe0, _ = tiny.ddim()

    class Stepless:
        """A scheduler of the program's own, with another update method than step()."""

        timesteps = [3, 2, 1]

        def update(self, out, t, x):
            return x - 0.1 * out

    class HandRolledPipeline(DiffusionPipeline):  # defined after capture started: patched as created
        def __init__(self, unet):
            super().__init__()
            self.register_modules(unet=unet)
            self.stepless = Stepless()

        @property
        def scheduler(self):
            return self.stepless

        def __call__(self, generator):
            x = torch.randn(1, 3, 16, 16, generator=generator)
            for t in self.scheduler.timesteps:
                x = self.scheduler.update(self.unet(x, t).sample, t, x)
            return x

    HandRolledPipeline(pipe0.unet)(torch.Generator("cpu").manual_seed(0))
    assert trajectories(tmp_path / "ds") == []
    assert {"definition": "trajectory", "message": "HandRolledPipeline: its scheduler Stepless has no step(); no "
            "trajectory captured (ikdata records the steps a scheduler's step() takes)"} in capturer.failures


def test_a_program_raising_mid_trajectory_leaves_a_valid_incomplete_trajectory(capture_into, tmp_path):
    capture_into()
    pipe, kwargs = tiny.ltx(steps=4)

    def stop(pipe, i, t, callback_kwargs):
        if i == 1:
            raise RuntimeError("out of memory (simulated)")
        return callback_kwargs

    with pytest.raises(RuntimeError, match="simulated"):
        pipe(**kwargs, callback_on_step_end=stop)
    [record] = trajectories(tmp_path / "ds")
    assert record["status"] == "incomplete"
    assert record["reason"] == "the program raised RuntimeError: out of memory (simulated)"
    assert [s["index"] for s in record["steps"]] == [0, 1]
    assert record["final"] == {} and record["decoded"] == {}
    report = _validate(tmp_path / "ds")
    assert report.ok, [str(p) for p in report.problems]


KILLED = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import torch
torch.set_num_threads(1)
import tiny
pipe, kwargs = tiny.ltx(steps=4)
def stop(pipe, i, t, callback_kwargs):
    if i == 1:
        os.kill(os.getpid(), signal.{signal})
    return callback_kwargs
pipe(**kwargs, callback_on_step_end=stop)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_killed_program_leaves_an_incomplete_trajectory_or_nothing(sig, tmp_path):
    script = tmp_path / "gen.py"
    script.write_text(KILLED.format(tests=str(Path(__file__).parent), signal=sig))
    into = tmp_path / "clip"
    result = subprocess.run([sys.executable, "-m", "ikdata", "capture", "--into", str(into), "--only",
                             "rmsnorm_f32_h99991", "--", sys.executable, str(script)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 128 + getattr(signal, sig), result.stderr
    found = trajectories(into)
    if sig == "SIGKILL":  # no chance to write: blobs only, no record
        assert found == []
    else:  # the SIGTERM handler writes what was captured, marked incomplete
        [record] = found
        assert record["status"] == "incomplete"
        assert record["reason"] == "the process ended during the pipeline call"
        assert [s["index"] for s in record["steps"]] == [0, 1]
    report = _validate(into)
    assert report.ok, [str(p) for p in report.problems]


@pytest.fixture
def captured(capture_into, tmp_path):
    """A dataset with one complete 3-step DDIM trajectory, capture off again."""
    from ikdata.capture import boot

    capture_into()
    pipe, kwargs = tiny.ddim(steps=3)
    pipe(**kwargs)
    boot.uninstall()
    return tmp_path / "ds"


def _rewrite(root, change):
    from ikdata.diffusion.trajectories import trajectory_id

    path = root / "trajectories" / "DDIMPipeline.jsonl"
    record = json.loads(path.read_text())
    change(record)
    record["trajectory"] = trajectory_id(record)
    path.write_text(json.dumps(record) + "\n")


def _problems(root):
    return [str(p) for p in _validate(root).problems]


def test_a_missing_step_blob_is_named_with_file_line_and_step(captured):
    record = trajectories(captured)[0]
    (captured / record["steps"][1]["out"]["path"]).unlink()
    path = record["steps"][1]["out"]["path"]
    assert (f"trajectories/DDIMPipeline.jsonl:1: /steps/1/out/path blob {path} does not exist; out of step 1 "
            f"(image) of trajectory {record['trajectory'][:12]} needs it") in _problems(captured)


def test_steps_out_of_order_are_named(captured):
    _rewrite(captured, lambda r: r["steps"].insert(0, r["steps"].pop(1)))
    assert _problems(captured) == [
        "trajectories/DDIMPipeline.jsonl:1: /steps/1/index step 0 of stream 'image' comes after step 1; steps must "
        "be listed in increasing order"]


def test_a_step_count_that_disagrees_with_the_request_is_named(captured):
    _rewrite(captured, lambda r: r["steps"].pop())
    assert _problems(captured) == [
        "trajectories/DDIMPipeline.jsonl:1: /steps stream 'image' has 2 steps, but the request took 3 (a complete "
        "trajectory lists every step)"]


def test_an_edited_record_and_a_broken_chain_are_named(captured):
    def edit(record):
        record["steps"][2]["x"] = dict(record["steps"][0]["x"])

    _rewrite(captured, edit)
    assert _problems(captured) == [
        "trajectories/DDIMPipeline.jsonl:1: /steps/2/x step 2 of stream 'image': x is not the x_next of step 1 "
        "(continuity broken)"]
    path = captured / "trajectories" / "DDIMPipeline.jsonl"
    record = json.loads(path.read_text())
    record["request"]["seed"] = 999  # edited without recomputing the id
    path.write_text(json.dumps(record) + "\n")
    assert any("/trajectory trajectory id" in p and "does not match its content" in p for p in _problems(captured))


def test_a_record_that_breaks_its_schema_is_named(captured):
    path = captured / "trajectories" / "DDIMPipeline.jsonl"
    record = json.loads(path.read_text())
    del record["steps"][0]["x_next"]
    path.write_text(path.read_text() + json.dumps(record) + "\n")
    problems = _problems(captured)
    assert problems == ["trajectories/DDIMPipeline.jsonl:2: /steps/0 'x_next' is a required property "
                        "(trajectory.schema.json)"]
