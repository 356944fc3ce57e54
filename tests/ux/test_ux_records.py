"""Issue 27 finding 7: show and lineage print readable records; the no-ops are refusals."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

import ikdata
from ikdata.cli import app

runner = CliRunner()
ISO = re.compile(r"captured_at: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z")


def test_show_prints_iso_times_and_tensors_not_dict_reprs(small_dataset):
    uuid = next(ikdata.open(small_dataset).workloads()).uuid
    text = runner.invoke(app, ["show", str(small_dataset), uuid]).output
    assert ISO.search(text), text
    assert "A: float32 1x8 blob " in text and "W: float32 4x8 blob " in text
    assert "{'" not in text and "'type':" not in text


def test_lineage_prints_iso_times(small_dataset):
    uuid = next(ikdata.open(small_dataset).workloads()).uuid
    text = runner.invoke(app, ["lineage", str(small_dataset), uuid]).output
    assert ISO.search(text) and "{'" not in text, text


def test_ls_with_an_unknown_definition_is_refused(small_dataset):
    result = runner.invoke(app, ["ls", str(small_dataset), "--definition", "nosuch"])
    assert result.exit_code == 1 and "no such definition; it has gemm_test_n4_k8" in result.output


def test_init_on_a_dataset_refuses_and_keeps_its_id(small_dataset):
    before = (small_dataset / "ikdata.json").read_bytes()
    result = runner.invoke(app, ["init", str(small_dataset)])
    assert result.exit_code == 2 and "already a dataset" in result.output
    assert (small_dataset / "ikdata.json").read_bytes() == before


def test_replay_combine_without_its_output_says_so(tmp_path):
    shards = []
    for i in (1, 2):
        shard = tmp_path / f"replay-shard-{i}-of-2.json"
        shard.write_text(json.dumps({"shard": f"{i}-of-2", "cases": []}))
        shards.append(str(shard))
    result = runner.invoke(app, ["replay-combine", *shards])
    assert result.exit_code == 2 and "is a shard report, so it cannot be OUTPUT" in result.output
    assert json.loads((tmp_path / "replay-shard-1-of-2.json").read_text())["shard"] == "1-of-2"
