"""Every record kind travels on every remote backend: a dataset holding trajectories and model records
(a real diffusion capture, replayed) pushes, clones and pulls whole, and validates clean after."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import ikdata

sys.path.insert(0, str(Path(__file__).parent.parent / "diffusion"))
sys.path.insert(0, str(Path(__file__).parent.parent / "diffusion_judge"))


@pytest.fixture(scope="module")
def diffusion_dataset(tmp_path_factory) -> Path:
    pytest.importorskip("diffusers")
    import torch
    from judge_helpers import capture

    from ikdata.core import manifest
    from ikdata.replay.runner import replay

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = capture(tmp_path_factory.mktemp("diffusion") / "ds", steps=2)
        assert replay(ikdata.open(root), reuse=False).exit_code == 0
    finally:
        torch.set_num_threads(threads)
    manifest.write(root)
    return root


def _kinds(root: Path) -> dict[str, int]:
    from ikdata.core.record_kinds import kind_of

    found: dict[str, int] = {}
    for path in root.rglob("*"):
        kind = kind_of(path.relative_to(root).as_posix()) if path.is_file() else None
        if kind is not None:
            found[kind.name] = found.get(kind.name, 0) + 1
    return found


def test_push_clone_and_pull_carry_every_record_kind(remote_url, diffusion_dataset, tmp_path):
    from ikdata.remote.pull import clone, pull
    from ikdata.remote.push import push

    kinds = _kinds(diffusion_dataset)
    assert {"diffusion trajectories", "model records", "workload rows", "replay reports"} <= set(kinds)
    push(diffusion_dataset, remote_url)
    clone(remote_url, tmp_path / "copy")
    assert _kinds(tmp_path / "copy") == kinds
    assert not ikdata.validate(ikdata.open(tmp_path / "copy"), deep=True).problems
    pull(remote_url, tmp_path / "pulled")
    pulled = _kinds(tmp_path / "pulled")
    assert pulled.get("diffusion trajectories") == kinds["diffusion trajectories"]
    assert pulled.get("model records") == kinds["model records"]
    assert not ikdata.validate(ikdata.open(tmp_path / "pulled"), deep=True).problems
