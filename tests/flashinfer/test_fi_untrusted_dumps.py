"""FlashInfer's recorder output read as untrusted input (issue 31 finding 4, issue 37 item 1, issue 39 item 1): every
malformed call record is left out with its folder, file, line and field named while the other calls import; a
``metadata.jsonl`` linking out of the dump is never read; an optional scalar left at None imports, replays and
stays trusted; no call record ever gives a traceback."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import random
import shutil
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
import flashinfer_engines  # noqa: E402


def _ikdata(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-m", "ikdata", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"}, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    """The corpus's safetensors dumps without the wrong engine: every call honest."""
    made = flashinfer_corpus.generate(tmp_path_factory.mktemp("fi-untrusted"), "safetensors")["safetensors"]
    for folder in (made / "dumps").glob("*_wrong_rmsnorm_*"):
        shutil.rmtree(folder)
    return made / "dumps"


def _edit(folder: Path, change) -> None:
    """Apply ``change`` to the last record of a call folder's metadata.jsonl."""
    path = folder / "metadata.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[-1])
    change(record)
    lines[-1] = json.dumps(record, ensure_ascii=False)
    path.write_text("\n".join(lines) + "\n")


def _first(root: Path, function: str) -> Path:
    return sorted(root.glob(f"*_pid*_{function}_call0001"))[0]


SHAPES = {  # issue 31 finding 4: the four malformed shapes, and what the message must point at
    "rmsnorm": (lambda r: r.pop("tensor_info"), "/ 'tensor_info' is a required property"),
    "silu_and_mul": (lambda r: r.update(tensor_info=[r["tensor_info"]]), "/tensor_info"),
    "gelu_tanh_and_mul": (lambda r: r["input_metadata"].update({"arg_\u00b2": 1}), "/input_metadata"),
    "mm_bf16": (lambda r: r.update(input_metadata=[1, 2]), "/input_metadata"),
}


@pytest.fixture(scope="module")
def hostile(dumps, tmp_path_factory) -> Path:
    """The dumps with each malformed shape in one call folder and softmax's metadata.jsonl a link out of the dump."""
    root = tmp_path_factory.mktemp("hostile") / "dumps"
    shutil.copytree(dumps, root)
    for function, (change, _) in SHAPES.items():
        _edit(_first(root, function), change)
    outside = root.parent / "outside.jsonl"
    shutil.copy(_first(root, "softmax") / "metadata.jsonl", outside)
    (_first(root, "softmax") / "metadata.jsonl").unlink()
    (_first(root, "softmax") / "metadata.jsonl").symlink_to(outside)
    return root


def test_each_malformed_call_is_left_out_named_and_the_rest_import(hostile, tmp_path):
    dst = tmp_path / "ds"
    out = _ikdata("import", str(hostile), str(dst))
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    assert out.returncode == 0, text
    for function, (_, pointer) in SHAPES.items():
        folder = _first(hostile, function)
        line = next(l for l in text.splitlines() if folder.name in l)
        assert f"left out {folder.name} ({hostile}): metadata.jsonl:2: {pointer}" in line, line
    link = next(l for l in text.splitlines() if _first(hostile, "softmax").name in l)
    assert "is a link that leaves the dataset" in link, link
    # rmsnorm 1,2,2,3 / silu 1,3,3 / gelu 2,5 / gemm 1,4,4 / softmax 2,3, each first call left out
    assert "added 6 workload(s)" in text and "left out 5" in text, text
    assert _ikdata("validate", "--deep", str(dst)).returncode == 0


def test_a_link_out_of_the_dump_is_never_read(hostile, tmp_path):
    from ikdata.flashinfer.dumps import read_calls

    secret = tmp_path / "secret.jsonl"
    record = json.loads((_first(hostile, "rmsnorm").parent / _first(hostile, "silu_and_mul").name / "metadata.jsonl")
                        .read_text().splitlines()[-1])
    record.update(tensor_info={"input_tensor_keys": []}, function_name="SECRET-FIELD", input_metadata={})
    secret.write_text(json.dumps(record) + "\n")
    root = tmp_path / "dumps"
    call = root / "20260101_000000_000_pid1_f_call0001"
    call.mkdir(parents=True)
    (call / "metadata.jsonl").symlink_to(secret)
    calls, skipped = read_calls(root)
    assert calls == [] and len(skipped) == 1
    assert "leaves the dataset" in skipped[0].reason and "SECRET-FIELD" not in skipped[0].reason
    linked_call = root / "20260101_000000_000_pid1_f_call0002"
    linked_call.symlink_to(_first(hostile, "rmsnorm").parent / sorted(
        p.name for p in hostile.glob("*_rmsnorm_call0002"))[0])
    calls, skipped = read_calls(root)
    assert calls == [] and any("is a link" in s.reason and s.folder == str(linked_call) for s in skipped)


REPLACEMENTS = [None, True, 0, -1, 2.5, "", "x", "arg_\u00b2", [], [1], {}, {"type": "torch.Tensor"},
                {"type": "list", "items": [{"type": "torch.Tensor", "tensor_key": "nope"}], "truncated": False},
                {"type": "torch.dtype", "value": 3}, "(", "(a, b=<X: 0>, *, c=<function f at 0x1>)"]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def test_no_mutation_of_a_call_record_raises_anything_but_a_located_refusal(dumps, tmp_path):
    """400 random mutations of a real record: each call is read or left out with a reason; nothing else raises."""
    from ikdata.flashinfer.convert import Refused
    from ikdata.flashinfer.dumps import read_call
    from ikdata.flashinfer.staging import Match, match, workload

    source = sorted(dumps.glob("*_pid*_gelu_tanh_and_mul_call0001"))[0]
    original = json.loads((source / "metadata.jsonl").read_text().splitlines()[-1])
    rng = random.Random(31)
    read = refused = 0
    for attempt in range(400):
        record = copy.deepcopy(original)
        for _ in range(rng.randint(1, 3)):
            paths = [p for p in _paths(record) if p]
            path = rng.choice(paths)
            parent = record
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict) and rng.random() < 0.3:
                parent.pop(path[-1])
            elif isinstance(parent, dict) and rng.random() < 0.3:
                parent[rng.choice(["kwarg_extra", "arg_7", "arg_\u00b2", "result_3"])] = rng.choice(REPLACEMENTS)
            else:
                parent[path[-1]] = copy.deepcopy(rng.choice(REPLACEMENTS))
        folder = tmp_path / f"call{attempt}"
        shutil.copytree(source, folder)
        (folder / "metadata.jsonl").write_text(json.dumps(record, ensure_ascii=False) + "\n")
        try:
            call = read_call(folder)
        except Refused as exc:
            assert exc.reason and "metadata.jsonl" in exc.reason or ".safetensors" in exc.reason, exc.reason
            refused += 1
        else:
            read += 1
            try:
                found = match(call, None)
                workload(Match(found.template, found.key, found.record), found.record, call.arguments,
                         call.results, source="test")
            except Refused:
                pass
        shutil.rmtree(folder)
    assert read and refused  # both paths were exercised


def test_an_optional_scalar_left_at_none_imports_replays_and_stays_trusted(tmp_path):
    """gated_delta_rule_decode(scale=None): the definition without scale, trusted after import (issue 37 item 1)."""
    dumps = flashinfer_engines.record(tmp_path / "rec", [
        flashinfer_engines.EngineCall("gdn", "gated_delta_rule_decode_trace", {"batch_size": 1}, {"scale": None})])
    dst = tmp_path / "ds"
    out = _ikdata("import", str(dumps), str(dst))
    assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert "added 1 workload(s)" in out.stdout
    names = [p.stem for p in (dst / "definitions").rglob("*.json")]
    assert names == ["gdn_decode_qk4_v8_d128__without_scale"]
    replayed = _ikdata("replay", "--no-reuse", str(dst))
    assert replayed.returncode == 0 and "1 passed" in replayed.stdout, replayed.stdout + replayed.stderr


def test_variant_names_are_read_against_the_inputs_that_may_be_absent():
    from ikdata.flashinfer.convert import absent_inputs

    optional = ["dt_bias", "state", "scale", "dt"]
    assert absent_inputs("gdn__without_dt_bias", optional) == ["dt_bias"]
    assert absent_inputs("gdn__without_state_dt_bias", optional) == ["state", "dt_bias"]
    assert absent_inputs("gdn__without_dt_scale", optional) == ["dt", "scale"]
    assert absent_inputs("gdn", optional) == []
    assert absent_inputs("gdn__without_bias", optional) is None


def test_signatures_with_defaults_that_are_not_python_are_read():
    from ikdata.flashinfer.dumps import signature_params

    recorded = ("(input: torch.Tensor, global_scale: Optional[torch.Tensor] = None, sf_layout: "
                "flashinfer.fp4_quantization.SfLayout = <SfLayout.layout_128x4: 0>, do_shuffle: bool = False, "
                "*, backend: str = 'cuda', enable_pdl=<function f at 0x7f>)")
    assert signature_params(recorded) == ["input", "global_scale", "sf_layout", "do_shuffle", "backend", "enable_pdl"]
    assert signature_params("(x, y") is None and signature_params("(x); import os") is None


def test_nothing_readable_lists_the_layouts_as_words_and_the_corpus_root_points_at_its_folders(dumps, tmp_path):
    """Issue 39 item 1 and issue 37 item 8: no "i, k, d, a, t, a"; OUT of the corpus tool is not told to init."""
    empty = tmp_path / "empty" / "20260101_000000_000_pid1_f_call0001"
    empty.mkdir(parents=True)
    (empty / "metadata.jsonl").write_text('{"x": 1}\n')
    out = _ikdata("import", str(empty.parent), str(tmp_path / "dst"))
    assert out.returncode == 1
    assert "i, k, d, a" not in out.stderr and "looked for ikdata.json, receipts.jsonl" in out.stderr, out.stderr
    assert "FlashInfer flight-recorder call folders (<call>/metadata.jsonl)" in out.stderr
    assert "metadata.jsonl:1: / 'function_name' is a required property" in out.stderr
    assert not (tmp_path / "dst").exists()
    corpus_out = dumps.parents[1]  # OUT, holding OUT/safetensors
    refused = _ikdata("import", str(corpus_out), str(tmp_path / "dst"))
    assert refused.returncode == 1 and "ikdata init" not in refused.stderr, refused.stderr
    assert f"ikdata import {corpus_out / 'safetensors'} DEST" in refused.stderr
    assert not (tmp_path / "dst").exists()
