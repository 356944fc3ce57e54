"""Issue 39 finding 10: a clone notes where it came from, locally (``.ikdata-origin.json``: the id stays the id
of what was copied), and ``ikdata lineage`` shows it, for the dataset and for each workload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import run_cli, write_replayable


@pytest.fixture(scope="module")
def cloned(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("origin")
    src = write_replayable(base / "src", rows=2)
    done = run_cli("clone", str(src), str(base / "copy"))
    assert done.returncode == 0, done.stdout + done.stderr
    return src, base / "copy"


def test_the_clone_keeps_the_id_and_notes_its_source(cloned):
    from ikdata.core import manifest
    from ikdata.core.origin import ORIGIN_FILE, read_origin

    src, copy = cloned
    assert manifest.current_id(copy) == manifest.current_id(src)
    origin, problems = read_origin(copy)
    assert problems == [] and origin is not None
    assert (origin.how, origin.source, origin.id) == ("clone", str(src.resolve()), manifest.current_id(src))
    assert ORIGIN_FILE not in manifest.read(copy)["files"]
    assert run_cli("validate", "--deep", str(copy)).returncode == 0


def test_lineage_says_where_the_copy_came_from(cloned):
    import ikdata
    from ikdata.core import manifest

    src, copy = cloned
    dataset_id = manifest.current_id(src)
    graph = run_cli("lineage", str(copy))
    assert graph.returncode == 0, graph.stderr
    assert f"  cloned from {src.resolve()} (id {dataset_id[:12]}, at 20" in graph.stdout
    document = json.loads(run_cli("lineage", str(copy), "--json").stdout)
    assert document["nodes"][dataset_id]["cloned"]["source"] == str(src.resolve())
    uuid = next(ikdata.open(copy).workloads()).uuid
    chain = run_cli("lineage", str(copy), uuid)
    assert f"  cloned from {src.resolve()} (id {dataset_id[:12]}" in chain.stdout
    assert json.loads(run_cli("lineage", str(copy), uuid, "--json").stdout)[0]["cloned"]["id"] == dataset_id
    dot = run_cli("lineage", str(copy), "--dot").stdout
    assert f'"{dataset_id[:12]}" -> "{src.resolve()}" [style=dashed' in dot
    original = run_cli("lineage", str(src))  # the source itself is no clone
    assert "cloned from" not in original.stdout and original.returncode == 0


def test_the_note_stays_local(cloned, tmp_path):
    src, copy = cloned
    remote = tmp_path / "remote"
    assert run_cli("push", str(copy), str(remote)).returncode == 0
    assert not list(remote.rglob("*origin*"))  # push never sends it
    url = remote.resolve().as_uri()
    again = tmp_path / "again"
    assert run_cli("clone", url, str(again)).returncode == 0
    assert f"cloned from {url} (id" in run_cli("lineage", str(again)).stdout


def test_a_broken_note_is_named(cloned, tmp_path):
    import shutil

    from ikdata.core.origin import ORIGIN_FILE

    _, copy = cloned
    broken = tmp_path / "broken"
    shutil.copytree(copy, broken)
    (broken / ORIGIN_FILE).write_text('{"format": "ikdata-origin/1", "how": "clone", "source": "x"}')
    done = run_cli("lineage", str(broken))
    assert done.returncode == 1 and f"{broken / ORIGIN_FILE}: / 'id' is a required property" in done.stderr
