"""Issue 11 item 4: the earlier capture script's verdicts (seeds/002) are kept, read and reproduced.

- replaying its layout writes ikdata's report beside ``results/replay.json``, never over it;
- its judge selection applies to its layout: a ``gated_delta_rule_prefill_*`` definition's
  float32 outputs are judged by the GDN chunk-state metrics, and the report says which rule chose;
- its receipts without ``expected_output`` (workloads it imported) are inputs-only rows;
- an import from its merged layout (root ``captures.jsonl`` with ``validation``) keeps the
  marker that the verdict came from that script's report.
"""

from __future__ import annotations

import hashlib
import json
import uuid as uuid_mod
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.replay import judges

runner = CliRunner()
GDN = "gated_delta_rule_prefill_toy_h2_d4"
GDN_REFERENCE = "import torch\n\n\ndef run(S, beta):\n    return S * beta\n"
SEED_TABLE = {"bfloat16": {"rtol": 0.016, "atol": 0.005}, "float32": {"rtol": 1e-4, "atol": 2e-5},
              "integer": "exact",
              "gdn_prefill_state": {"relative_rms": 0.01, "relative_max": 0.015, "max_head_relative_rms": 0.02,
                                    "reason": "chunk algorithm rounds operands to BF16"}}


def _blob(root: Path, name: str, value: torch.Tensor) -> dict:
    """A tensor stored as the seed script stores it: named by its digest under blob/workloads/<name>/."""
    from safetensors.torch import save_file

    value = value.contiguous()
    digest = hashlib.sha256(json.dumps([str(value.dtype), list(value.shape)]).encode())
    digest.update(memoryview(value.reshape(-1).view(torch.uint8).numpy()))
    rel = f"blob/workloads/{name}/{digest.hexdigest()}.safetensors"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    if not (root / rel).exists():
        save_file({"tensor": value}, str(root / rel))
    return {"type": "safetensors", "path": rel, "tensor_key": "tensor"}


def gdn_seed_dataset(root: Path, definitions: Path, *, rows: int = 2, imported: int = 1,
                     merged: bool = False) -> list[str]:
    """A seed-layout GDN capture whose engine state is 0.3% off the reference everywhere: outside the
    float32 elementwise tolerance, inside the chunk-state bounds; plus ``imported`` rows without output.

    With ``merged``, the layout the seed's own import writes: receipts in a root ``captures.jsonl``
    carrying each case as ``validation``, no results folder. Returns the uuids of the captured rows.
    """
    record = {"name": GDN, "op_type": "gdn", "axes": {"B": {"type": "var"}, "H": {"type": "const", "value": 2},
                                                      "D": {"type": "const", "value": 4}},
              "inputs": {"S": {"shape": ["B", "H", "D", "D"], "dtype": "float32"},
                         "beta": {"shape": None, "dtype": "float32"}},
              "outputs": {"state": {"shape": ["B", "H", "D", "D"], "dtype": "float32"}},
              "reference": GDN_REFERENCE}
    (definitions / "gdn").mkdir(parents=True, exist_ok=True)
    (definitions / "gdn" / f"{GDN}.json").write_text(json.dumps(record, indent=2))
    generator = torch.Generator().manual_seed(0)
    rows_out, receipts, cases, captured = [], [], [], []
    for i in range(rows + imported):
        s = torch.randn(i + 1, 2, 4, 4, generator=generator)
        inputs = {"S": _blob(root, GDN, s), "beta": {"type": "scalar", "value": 0.5}}
        provenance = {"engine": "sglang", "model": "qwen-next", "request_id": f"r{i}", "step": i}
        uid = str(uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, json.dumps([GDN, inputs, provenance], sort_keys=True)))
        rows_out.append({"definition": GDN, "workload": {"uuid": uid, "axes": {"B": i + 1}, "inputs": inputs}})
        receipt = dict(provenance, definition=GDN, uuid=uid, axes={"B": i + 1})
        if i < rows:
            sign = torch.where(torch.arange(s.numel()).reshape(s.shape) % 2 == 0, 1.0, -1.0)
            receipt["expected_output"] = _blob(root, GDN, s * 0.5 * (1 + 0.003 * sign))
            case = {"definition": GDN, "uuid": uid, "axes": {"B": i + 1}, "max_absolute_errors": [0.01],
                    "state_comparison": {"relative_rms": 0.003, "relative_max": 0.003,
                                         "max_head_relative_rms": 0.003}, "status": "passed", "seconds": 0.1}
            cases.append(case)
            captured.append(uid)
            if merged:
                receipt["validation"] = dict(case, device="cuda", torch="2.9.0", tolerances=SEED_TABLE)
        receipts.append(receipt)
    (root / "workloads/gdn").mkdir(parents=True, exist_ok=True)
    (root / f"workloads/gdn/{GDN}.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows_out))
    receipt_file = root / ("captures.jsonl" if merged else "results/captures.jsonl")
    receipt_file.parent.mkdir(parents=True, exist_ok=True)
    receipt_file.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in receipts))
    if not merged:
        report = {"torch": "2.9.0", "device": "cuda", "comparison": "all output elements", "tolerances": SEED_TABLE,
                  "cases": cases}
        (root / "results/replay.json").write_text(json.dumps(report, indent=2) + "\n")
    return captured


@pytest.fixture
def gdn(tmp_path) -> tuple[Path, Path, list[str]]:
    root, definitions = tmp_path / "seed-gdn", tmp_path / "seed-definitions"
    captured = gdn_seed_dataset(root, definitions)
    return root, definitions, captured


class TestReportBeside:
    def test_replay_writes_beside_the_seed_report_and_leaves_it_byte_identical(self, gdn):
        root, definitions, _ = gdn
        before = (root / "results/replay.json").read_bytes()
        result = runner.invoke(app, ["replay", str(root), "--definitions", str(definitions), "--json"])
        assert (root / "results/replay.json").read_bytes() == before
        ours = json.loads((root / "results/ikdata-replay.json").read_text())
        assert ours["format"] == "ikdata-replay/1" and len(ours["cases"]) == 3
        assert json.loads(result.stdout)["report"] == str(root / "results/ikdata-replay.json")

    def test_a_report_path_naming_the_seed_report_is_refused(self, gdn):
        root, definitions, _ = gdn
        before = (root / "results/replay.json").read_bytes()
        result = runner.invoke(app, ["replay", str(root), "--definitions", str(definitions),
                                     "--report", str(root / "results/replay.json")])
        assert result.exit_code == 2
        assert "results/replay.json was not written by ikdata" in result.output
        assert "ikdata never replaces a file it did not write" in result.output
        assert (root / "results/replay.json").read_bytes() == before

    def test_resume_refuses_it_too(self, gdn):
        from ikdata.core.errors import UsageError
        from ikdata.replay.runner import replay

        root, definitions, _ = gdn
        with pytest.raises(UsageError, match="was not written by ikdata"):
            replay(ikdata.open(root, definitions=[definitions]), resume=True, report_path=root / "results/replay.json")


class TestSeedJudgeRule:
    def test_the_seed_verdict_is_reproduced_and_the_rule_is_shown(self, gdn):
        root, definitions, captured = gdn
        result = runner.invoke(app, ["replay", str(root), "--definitions", str(definitions), "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads((root / "results/ikdata-replay.json").read_text())
        seed = json.loads((root / "results/replay.json").read_text())
        ours = {c["uuid"]: c for c in report["cases"] if c["status"] != "skipped"}
        assert {c["uuid"]: c["status"] for c in seed["cases"]} == {u: c["status"] for u, c in ours.items()}
        for uid in captured:
            case = ours[uid]
            assert case["chosen_by"] == {"state": judges.SEED_RULE}
            assert case["tolerance"]["state"]["judge"] == "gdn_chunk_state"
            assert case["tolerance"]["state"]["bounds"] == {"relative_rms": 0.01, "relative_max": 0.015,
                                                            "max_head_relative_rms": 0.02}
            assert case["metrics"]["state"]["relative_rms"] == pytest.approx(0.003, rel=1e-2)
            assert case["metrics"]["state"]["mismatched_fraction"] > 0.9  # the float32 tolerance would fail it

    def test_the_rule_applies_to_the_seed_layout_only(self, gdn):
        root, definitions, _ = gdn
        definition = ikdata.open(root, definitions=[definitions]).definitions[GDN]
        assert judges.select_rule(definition, "state", layout="seed").chosen_by == judges.SEED_RULE
        elsewhere = judges.select_rule(definition, "state", layout="ikdata")
        assert elsewhere.chosen_by == judges.DEFAULT_TOLERANCE and elsewhere.rule.rtol == 1e-4


class TestInputsOnlyReceipts:
    def test_validate_accepts_receipts_without_expected_output(self, gdn):
        root, definitions, _ = gdn
        result = runner.invoke(app, ["validate", str(root), "--definitions", str(definitions), "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["receipts"] == 3

    def test_replay_skips_them_and_import_keeps_them_as_inputs_only(self, gdn, tmp_path):
        root, definitions, captured = gdn
        runner.invoke(app, ["replay", str(root), "--definitions", str(definitions)])
        report = json.loads((root / "results/ikdata-replay.json").read_text())
        [skipped] = [c for c in report["cases"] if c["status"] == "skipped"]
        assert "its receipt has no expected_output" in skipped["reason"]
        dst = tmp_path / "dst"
        done = runner.invoke(app, ["import", str(root), str(dst), "--definitions", str(definitions)])
        assert done.exit_code == 0, done.output
        receipts = {r["uuid"]: r for r in map(json.loads, (dst / "receipts.jsonl").read_text().splitlines())}
        assert receipts[skipped["uuid"]]["expected_output"] == {} and "validation" not in receipts[skipped["uuid"]]
        assert all(receipts[u]["validation"]["basis"].startswith("seed report") for u in captured)
        assert ikdata.validate(ikdata.open(dst, definitions=[definitions])).problems == []


class TestMergedLayout:
    def test_import_from_the_merged_layout_keeps_the_seed_marker(self, tmp_path):
        root, definitions = tmp_path / "merged", tmp_path / "defs"
        captured = gdn_seed_dataset(root, definitions, merged=True)
        dst = tmp_path / "dst"
        done = runner.invoke(app, ["import", str(root), str(dst), "--definitions", str(definitions)])
        assert done.exit_code == 0, done.output
        receipts = {r["uuid"]: r for r in map(json.loads, (dst / "receipts.jsonl").read_text().splitlines())}
        for uid in captured:
            from ikdata.core.verdicts import expand_validation  # the report's context, stored once (issue 15)

            validation = expand_validation(dst, receipts[uid]["validation"])
            assert validation["basis"].startswith("seed report")
            assert validation["metrics"] == {"max_absolute_errors": [0.01]}
            assert validation["device"] == "cuda" and validation["status"] == "passed"

    def test_a_direct_and_a_merged_import_mark_alike(self, tmp_path):
        direct_src, merged_src = tmp_path / "direct", tmp_path / "merged"
        gdn_seed_dataset(direct_src, tmp_path / "d1")
        gdn_seed_dataset(merged_src, tmp_path / "d2", merged=True)
        marks = []
        for src, defs in ((direct_src, "d1"), (merged_src, "d2")):
            dst = tmp_path / f"dst-{src.name}"
            assert runner.invoke(app, ["import", str(src), str(dst), "--definitions", str(tmp_path / defs)]).exit_code == 0
            receipts = [json.loads(line) for line in (dst / "receipts.jsonl").read_text().splitlines()]
            marks.append(sorted(r["validation"]["basis"] for r in receipts if "validation" in r))
        assert marks[0] == marks[1] and len(marks[0]) == 2
