"""Finding 6 of issue 21 (and #12's ``--streams``): no record sizes an allocation or names a path ikdata follows.

A trajectory's ``model.record`` goes through the path rule (``../outside_model.json`` and ``/dev/zero`` are
refused, never read); step counts, noise shapes and seeds are checked against limits derived from the
dataset before replay allocates anything; a scheduler class is instantiated only if diffusers exports it
as a scheduler. ``ikdata noise`` checks its seed, dimensions and total bytes before drawing; an unknown
``--streams`` name is a usage error. Every hostile command runs in a child process under a memory limit
and a timeout, so the old behaviour (reading /dev/zero, allocating 74.5 GiB) fails here instead of taking
the machine down.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ikdata.cli import app

pytest.importorskip("diffusers")

ROOT = Path(__file__).resolve().parents[2]
_IKDATA = [sys.executable, "-c", "from ikdata.cli import main; main()"]
MEMORY = 6 << 30  # address space of each child: torch and diffusers fit, the allocations of the finding do not
TIMEOUT = 240

_CAPTURE = """
import sys
sys.path.insert(0, {tiny!r})
import torch
torch.set_num_threads(1)
import tiny
from ikdata.capture import boot
from ikdata.capture.config import CaptureConfig
from ikdata.core.writer import DatasetWriter
pipe, kwargs = tiny.ddim(steps=2)
boot.install(CaptureConfig(into={root!r}, strict=True, only=("rmsnorm_f32_h99991",)))
try:
    pipe(**kwargs)
finally:
    boot.uninstall()
DatasetWriter({root!r}).commit()
"""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a child process with a memory limit; a hang is a failure, never a hung suite."""
    env = dict(os.environ, IKDATA_CACHE_DIR=str(cwd / "cache"), PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    env.pop("IKDATA_DEBUG", None)
    try:
        return subprocess.run(_IKDATA + [str(a) for a in args], capture_output=True, text=True, timeout=TIMEOUT,
                              env=env, cwd=cwd, preexec_fn=_limited)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ikdata {' '.join(map(str, args))} ran for {TIMEOUT} s (reading without end?)")


def no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    """One call of the tiny DDIM pipeline (2 steps, its UNet stored), captured and committed, in a child."""
    root = tmp_path_factory.mktemp("captured") / "ds"
    code = _CAPTURE.format(tiny=str(ROOT / "tests" / "diffusion"), root=str(root))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def hostile(captured: Path, tmp_path: Path, change) -> Path:
    """A copy of the capture whose trajectory ``change(record, root)`` edited, with a matching id and
    manifest (as an attacker would write it)."""
    from ikdata.diffusion.trajectories import trajectory_id
    from ikdata.core.writer import DatasetWriter

    root = tmp_path / "ds"
    shutil.copytree(captured, root, symlinks=True)
    [path] = sorted((root / "trajectories").glob("*.jsonl"))
    record = json.loads(path.read_text().splitlines()[0])
    change(record, root)
    record = orjson.loads(json.dumps(record))  # as a reader parses it (a seed of 2**64 becomes a float)
    record["trajectory"] = trajectory_id(record)
    path.write_text(json.dumps(record) + "\n")
    DatasetWriter(root).commit()
    return root


def trajectory_case(root: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """Replay ``root`` in a child; the trajectory's case of the report."""
    done = run_cli("replay", root, "--no-reuse", "--quiet", cwd=tmp_path)
    no_traceback(done)
    report = json.loads((root / "reports" / "replay.json").read_text())
    [case] = [c for c in report["cases"] if c["definition"].startswith("trajectory:")]
    return done, case


def validate_cli(root: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    done = run_cli("validate", root, cwd=tmp_path)
    no_traceback(done)
    return done


TRAJECTORY_FILE = "trajectories/DDIMPipeline.jsonl:1"


def test_the_capture_itself_validates_and_replays_within_the_limits(captured, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(captured, root)
    assert validate_cli(root, tmp_path).returncode == 0
    done, case = trajectory_case(root, tmp_path)
    assert case["status"] == "passed", case.get("reason")
    assert done.returncode == 0


def test_a_model_record_outside_the_dataset_is_refused_not_read(captured, tmp_path):
    def outside(record, root):
        shutil.copy(root / record["model"]["record"], root.parent / "outside_model.json")  # a valid record there
        record["model"]["record"] = "../outside_model.json"

    root = hostile(captured, tmp_path, outside)
    done = validate_cli(root, tmp_path)
    assert done.returncode == 1
    assert f"{TRAJECTORY_FILE}: /model/record path '../outside_model.json' contains '..'" in done.stdout
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert case["reason"].startswith(f"{TRAJECTORY_FILE}: /model/record: path '../outside_model.json'")


def test_a_model_record_of_dev_zero_is_refused_before_any_read(captured, tmp_path):
    root = hostile(captured, tmp_path, lambda record, root: record["model"].update(record="/dev/zero"))
    done = validate_cli(root, tmp_path)
    assert done.returncode == 1
    assert f"{TRAJECTORY_FILE}: /model/record path '/dev/zero' is absolute" in done.stdout
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error" and "/model/record: path '/dev/zero' is absolute" in case["reason"]


def test_a_model_record_linked_to_dev_zero_is_refused_before_any_read(captured, tmp_path):
    root = hostile(captured, tmp_path, lambda record, root: record["model"].update(record="models/zero.json"))
    os.symlink("/dev/zero", root / "models" / "zero.json")  # after the commit: the manifest refuses links
    done = validate_cli(root, tmp_path)
    assert done.returncode == 1
    assert (f"{TRAJECTORY_FILE}: /model/record path 'models/zero.json' is a link that leaves the dataset "
            "(to /dev/zero)") in done.stdout
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error" and "is a link that leaves the dataset" in case["reason"]


def test_a_step_count_beyond_the_dataset_is_refused_before_the_schedule_is_built(captured, tmp_path):
    root = hostile(captured, tmp_path, lambda record, root: record["request"].update(num_inference_steps=10**10))
    done = validate_cli(root, tmp_path)
    assert done.returncode == 1
    assert (f"{TRAJECTORY_FILE}: /request/num_inference_steps request.num_inference_steps is 10000000000; "
            "expected at most 10,000") in done.stdout
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert case["reason"].startswith(f"{TRAJECTORY_FILE}: /request/num_inference_steps: request.num_inference_steps "
                                     "is 10000000000; expected at most 10,000")
    assert "MemoryError" not in case["error"]


def test_a_scheduler_setting_beyond_the_dataset_is_refused(captured, tmp_path):
    root = hostile(captured, tmp_path,
                   lambda record, root: record["scheduler"]["config"].update(num_train_timesteps=10**10))
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert case["reason"].startswith(f"{TRAJECTORY_FILE}: /scheduler/config/num_train_timesteps: scheduler setting "
                                     "num_train_timesteps is 10000000000; expected at most 10,000")


def test_a_noise_shape_beyond_the_largest_tensor_is_refused_before_drawing(captured, tmp_path):
    def huge(record, root):
        record["noise"]["streams"] = [{"name": record["streams"][0], "shape": [100000, 100000]}]  # 40 GB

    root = hostile(captured, tmp_path, huge)
    done = validate_cli(root, tmp_path)
    assert done.returncode == 1
    assert f"{TRAJECTORY_FILE}: /noise/streams the noise streams hold 10,000,000,000 elements; expected at most 4 " \
           "times the 768 of the largest tensor" in done.stdout
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert case["reason"].startswith(f"{TRAJECTORY_FILE}: /noise/streams: the noise streams hold 10,000,000,000 "
                                     "elements; expected at most 4 times the 768")


def test_a_noise_shape_of_200_dimensions_is_refused(captured, tmp_path):
    root = hostile(captured, tmp_path,
                   lambda record, root: record["noise"].update(streams=[{"name": "image", "shape": [1] * 200}]))
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert case["reason"] == (f"{TRAJECTORY_FILE}: /noise/streams/0/shape: noise stream shape has 200 dimensions; "
                              "expected at most 8")


def test_a_recorded_seed_of_2_64_is_refused_with_its_range(captured, tmp_path):
    root = hostile(captured, tmp_path, lambda record, root: record["noise"].update(seed=2**64))
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert case["reason"].startswith(f"{TRAJECTORY_FILE}: /noise/seed: noise seed ")
    assert "expected an integer from 0 to 2**64-1" in case["reason"]


def test_a_scheduler_class_diffusers_does_not_export_as_a_scheduler_is_never_instantiated(captured, tmp_path):
    root = hostile(captured, tmp_path, lambda record, root: record["scheduler"].update({"class": "AutoencoderKL"}))
    _, case = trajectory_case(root, tmp_path)
    assert case["status"] == "error"
    assert case["reason"].startswith(f"{TRAJECTORY_FILE}: /scheduler/class: scheduler class 'AutoencoderKL' is not "
                                     "a scheduler diffusers exports")
    assert "from_config" not in case["error"]  # refused before any class was looked up and built


def test_replay_seed_option_out_of_range_is_a_usage_error(captured, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(captured, root)
    done = run_cli("replay", root, "--seed", str(2**64), cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 2
    assert "--seed: seed 18446744073709551616 is out of range; expected an integer from 0 to 2**64-1" in done.stderr


# -- ikdata noise: every bad value a usage error before anything is drawn ----------------------------------


def test_noise_of_4e18_bytes_is_refused_before_allocating(tmp_path):
    done = run_cli("noise", "1", "--shape", "video=1000000,1000000,1000000", cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 2
    assert ("the noise of video=[1000000, 1000000, 1000000] takes 4,000,000,000,000,000,000 bytes, more than the "
            "cap of 4,294,967,296; pass --max-bytes SIZE to draw more") in done.stderr


def test_noise_over_the_default_cap_is_refused_and_max_bytes_sets_another(tmp_path):
    done = run_cli("noise", "1", "--shape", "video=1250000000", cwd=tmp_path)  # 5 GB: over 4 GiB
    no_traceback(done)
    assert done.returncode == 2 and "more than the cap of 4,294,967,296" in done.stderr
    refused = CliRunner().invoke(app, ["noise", "1", "--shape", "video=1000", "--max-bytes", "1KB"])
    assert refused.exit_code == 2 and "takes 4,000 bytes, more than the cap of 1,000" in refused.output
    allowed = CliRunner().invoke(app, ["noise", "1", "--shape", "video=1000", "--max-bytes", "4KB", "--json"])
    assert allowed.exit_code == 0, allowed.output
    bad = CliRunner().invoke(app, ["noise", "1", "--shape", "video=1", "--max-bytes", "lots"])
    assert bad.exit_code == 2 and "--max-bytes: bad size 'lots'" in bad.output


def test_noise_of_200_dimensions_is_a_usage_error():
    result = CliRunner().invoke(app, ["noise", "1", "--shape", "video=" + ",".join(["1"] * 200)])
    assert result.exit_code == 2, result.output
    assert "bad --shape video=...: 200 dimensions; expected at most 8" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("seed", [str(2**64), str(10**30)])
def test_noise_seed_out_of_range_is_a_usage_error(seed):
    result = CliRunner().invoke(app, ["noise", seed, "--shape", "video=2"])
    assert result.exit_code == 2, result.output
    assert f"SEED: seed {seed} is out of range; expected an integer from 0 to 2**64-1" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_noise_seed_at_the_top_of_the_range_is_drawn():
    result = CliRunner().invoke(app, ["noise", str(2**64 - 1), "--shape", "video=2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["seed"] == 2**64 - 1


# -- ikdata capture --streams (#12) ---------------------------------------------------------------------------


def test_an_unknown_streams_name_is_a_usage_error_before_the_program_runs(tmp_path):
    marker = tmp_path / "ran"
    result = CliRunner().invoke(app, ["capture", "--into", str(tmp_path / "ds"), "--streams", "video,vidoe", "--",
                                      sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert result.exit_code == 2, result.output
    assert "--streams: unknown stream 'vidoe'; expected names trajectories give their latent streams" in result.output
    assert not marker.exists() and not (tmp_path / "ds").exists()


def test_an_unknown_stream_in_the_capture_environment_is_refused():
    from ikdata.capture.config import CaptureConfig
    from ikdata.core.errors import UsageError

    assert CaptureConfig.from_json('{"into": "ds", "streams": ["audio", "stream2"]}').streams == ("audio", "stream2")
    with pytest.raises(UsageError, match="unknown stream 'Video'"):
        CaptureConfig.from_json('{"into": "ds", "streams": ["Video"]}')
