"""FlashInfer's flight recorder dumps and trace definitions, written by FlashInfer's own code on CPU, import as
one validated, replayable dataset; the 1%-off rmsnorm fails FlashInfer's own threshold; a crafted pickle never runs."""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:
    pytest.skip("flashinfer-python is not installed (make setup installs it)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import flashinfer_corpus  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return flashinfer_corpus.generate(tmp_path_factory.mktemp("fi"), "both")


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in root.rglob("*")}


@pytest.fixture(scope="module")
def imported(corpus, tmp_path_factory):
    """The safetensors corpus, with one broken file among its definitions, imported (--only-passed)."""
    import shutil

    from ikdata.importing.apply import import_dataset

    src = tmp_path_factory.mktemp("src") / "corpus"
    shutil.copytree(corpus["safetensors"], src)
    (src / "definitions" / "zz_broken.json").write_text("{")
    before = _tree(src)
    dst = tmp_path_factory.mktemp("dst") / "ds"
    result = import_dataset(str(src), str(dst), only_passed=True)
    assert _tree(src) == before  # import never writes into its source
    return result, dst


def test_recorder_folder_imports_one_workload_per_distinct_call(imported):
    import ikdata

    result, dst = imported
    rows = list(ikdata.open(dst).workloads())
    # rmsnorm 1,2,2,3 / silu 1,3,3 / gelu 2,5 / gemm 1,4,4 / softmax 2,3: identical calls are one workload
    assert len(rows) == len(result.added) == 3 + 2 + 2 + 2 + 2
    assert {r.definition for r in rows} == {"rmsnorm_h64", "silu_and_mul_h64", "gelu_tanh_and_mul_h32",
                                            "gemm_bf16_N16_K32", "softmax_v64"}
    assert any("zz_broken.json" in str(item.to_dict()) for item in result.left_out)  # reported, the rest kept
    receipts = (dst / "receipts.jsonl").read_text()
    assert '"origin":"flashinfer-recorder"' in receipts.replace(" ", "") and "graph_capture" in receipts
    assert "call_sequence" in receipts and "process_id" in receipts
    out = subprocess.run([sys.executable, "-m", "ikdata", "validate", "--deep", str(dst)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    replayed = subprocess.run([sys.executable, "-m", "ikdata", "replay", str(dst)], capture_output=True, text=True)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr  # trusted after import, all pass


def test_wrong_engine_fails_flashinfer_threshold(imported):
    result, _ = imported
    failed = [item.to_dict() for item in result.left_out if item.definition == "rmsnorm_h48"]
    assert len(failed) == 2 and all("failed" in f["reason"] for f in failed), failed


def test_check_thresholds_become_tolerance():
    from ikdata.flashinfer.convert import check_tolerance

    norm = ("def _norm_check(r, a, *, rtol=None, atol=None, max_mismatch_pct=0.0, min_cos_sim=None):\n"
            "    rtol = 1e-3 if rtol is None else rtol\n    atol = 1e-3 if atol is None else atol\n")
    assert check_tolerance(norm, ["bfloat16"]) == {"bfloat16": {"rtol": 1e-3, "atol": 1e-3}}
    assert check_tolerance("def standard_check(r, a, *, rtol=None):\n    pass\n", ["bfloat16"]) == \
        {"bfloat16": {"rtol": 1e-2, "atol": 1e-2}}
    assert check_tolerance("def c(r, a, *, residual_rtol=1e-5):\n    pass\n", ["float32"]) is None


class _Boom:
    """Unpickling it creates ``marker`` (the test's own file, so parallel runs never share it)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path(self.marker).touch, ())


def test_crafted_pt_pickle_never_executes(corpus, tmp_path):
    import shutil

    from ikdata.importing.apply import import_dataset

    src = tmp_path / "dumps"
    shutil.copytree(corpus["torch"] / "dumps", src)
    victim = sorted(src.glob("*_rmsnorm_call0001"))[0]
    marker = tmp_path / "ikdata-fi-pwned"
    (victim / "inputs.pt").write_bytes(pickle.dumps({"arg_0": _Boom(marker)}))
    result = import_dataset(str(src), str(tmp_path / "ds"), only_passed=True)
    assert not marker.exists()
    reasons = [item.reason for item in result.left_out if item.where and victim.name in item.where]
    assert reasons and "weights_only=True" in reasons[0]
    assert len(result.added) == 2 + 2 + 2 + 2 + 2  # rmsnorm's size-1 call is left out; 2, 2, 3 remain


@pytest.mark.parametrize("command", [["replay"], ["validate", "--deep"], ["ls"], ["manifest"]])
@pytest.mark.parametrize("where", [".", "dumps"])
def test_other_commands_refuse_the_recorder_output_and_write_nothing(corpus, command, where):
    from typer.testing import CliRunner

    from ikdata.cli import app

    root = corpus["safetensors"] / where
    before = _tree(corpus["safetensors"])
    result = CliRunner().invoke(app, [*command, str(root)])
    assert result.exit_code == 1, result.output
    assert "FlashInfer's flight-recorder output, not a dataset: import it first" in result.output
    assert _tree(corpus["safetensors"]) == before


def test_the_wrong_engine_refuses_a_whole_import_naming_the_folder_given(corpus, tmp_path):
    from typer.testing import CliRunner

    from ikdata.cli import app

    dst = tmp_path / "ds"
    result = CliRunner().invoke(app, ["import", str(corpus["safetensors"]), str(dst)])
    assert result.exit_code == 1, result.output
    assert f"{corpus['safetensors']}: 2 workload(s) are not validated" in result.output
    assert "ikdata-flashinfer-" not in result.output  # never the temporary staging folder
    assert "ikdata replay SRC" not in result.output  # the calls were replayed as they were read
    assert "--only-passed" in result.output
    assert not dst.exists()  # the refused import leaves no empty dataset behind
