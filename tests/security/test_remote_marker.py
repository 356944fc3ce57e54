"""Issue 21, finding 2: a folder remote is not a dataset to local commands.

``ikdata gc REMOTE`` used to delete every blob of a folder remote (exit 0, and clone then gave an
empty dataset), ``replay`` and ``manifest`` rewrote its ``ikdata.json``, ``pack`` moved its blobs,
``import SRC REMOTE`` wrote dataset files into it, ``replay --ray local REMOTE`` ran 0 tasks with exit 0.
Push now writes a marker (``.ikdata-remote``) into a folder, file:// or memory:// remote before
anything else, and every writer refuses a folder holding it (or laid out as a remote pushed before
markers existed) with advice, exit 2 (a usage error: the folder named is the wrong kind), leaving
it byte for byte as it was; read-only commands still read it, as the remote it is.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ikdata
from merge_helpers import capture, replay_by_hand
from ikdata.cli import app
from ikdata.ops.validate import validate
from ikdata.remote.pull import clone, pull
from ikdata.remote.push import push

REMOTE_MARKER = ".ikdata-remote"  # the marker push writes (ikdata.core.locking.REMOTE_MARKER)
runner = CliRunner()


def make_validated(root: Path, rows: int = 2, seed: int = 0) -> Path:
    """A captured dataset with a passing replay report, committed."""
    from ikdata.core.writer import DatasetWriter

    capture(root, rows=rows, seed=seed)
    replay_by_hand(root)
    DatasetWriter(root).commit()
    return root


def _tree(root: Path) -> dict[str, str]:
    """Every entry under root (files by sha256, folders as such), to prove nothing was written."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        found[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
    return found


@pytest.fixture
def folder_remote(tmp_path) -> tuple[Path, Path]:
    root = make_validated(tmp_path / "ds", rows=2)
    remote = tmp_path / "remote"
    done = runner.invoke(app, ["push", str(root), str(remote)])
    assert done.exit_code == 0, done.output
    return root, remote


WRITERS = [
    ["gc", "{remote}"],
    ["gc", "--grace", "0", "{remote}"],
    ["replay", "{remote}"],
    ["replay", "--ray", "local", "{remote}"],
    ["manifest", "{remote}"],
    ["pack", "{remote}"],
    ["unpack", "{remote}"],
    ["import", "{other}", "{remote}"],
    ["repair", "{remote}"],
    ["init", "{remote}"],
    ["capture", "--into", "{remote}", "--", "true"],
]


@pytest.mark.parametrize("command", WRITERS, ids=lambda c: " ".join(c[:3]))
def test_every_writing_command_refuses_a_folder_remote_and_leaves_it_as_it_was(command, folder_remote, tmp_path):
    root, remote = folder_remote
    other = make_validated(tmp_path / "other", rows=2, seed=7)
    before = _tree(remote)
    done = runner.invoke(app, [a.format(remote=remote, other=other) for a in command])
    assert done.exit_code == 2, done.output
    assert "this is a remote (pushed to by ikdata push" in done.output
    assert f"clone it first: ikdata clone {remote} DIR" in done.output
    assert "Traceback" not in done.output
    assert _tree(remote) == before
    copy = clone(str(remote), tmp_path / "copy")  # the remote still clones, whole
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok
    assert sum(1 for _ in ikdata.open(tmp_path / "copy").workloads()) == 2 and copy.blobs_fetched > 0


@pytest.mark.parametrize("command", [["validate"], ["validate", "--deep"], ["ls"], ["stats"], ["lineage"]])
def test_read_only_commands_still_read_a_folder_remote(command, folder_remote):
    _, remote = folder_remote
    before = _tree(remote)
    done = runner.invoke(app, [*command, str(remote), "--json"])
    assert done.exit_code == 0, done.output
    assert _tree(remote) == before


def test_the_marker_is_written_first_and_is_state_not_a_record(folder_remote, tmp_path):
    root, remote = folder_remote
    marker = json.loads((remote / REMOTE_MARKER).read_text())
    assert marker["format"] == "ikdata-remote/1"
    assert REMOTE_MARKER not in json.loads((remote / "ikdata.json").read_text())["files"]
    copy = tmp_path / "copy"
    clone(str(remote), copy)
    assert not (copy / REMOTE_MARKER).exists()  # a clone is a dataset: writers work on it
    assert runner.invoke(app, ["gc", str(copy)]).exit_code == 0
    # pull into the clone, and push again, both work through the marker
    push(root, str(remote))
    pull(str(remote), copy)


def test_a_killed_first_push_already_left_the_marker(tmp_path):
    """The marker goes before any object, so even a remote whose first push never finished is refused."""
    from ikdata.core import faults

    class Killed(Exception):
        pass

    def kill(name: str) -> None:
        if name == "blobs-sent":
            raise Killed(name)

    root = make_validated(tmp_path / "ds", rows=1)
    remote = tmp_path / "remote"
    with pytest.raises(Killed), faults.observe(kill):
        push(root, str(remote))
    assert (remote / REMOTE_MARKER).is_file() and not (remote / "ikdata.json").exists()
    done = runner.invoke(app, ["gc", str(remote)])
    assert done.exit_code == 2 and "this is a remote" in done.output, done.output


def test_a_remote_pushed_before_markers_existed_is_refused_too(folder_remote, tmp_path):
    _, remote = folder_remote
    (remote / REMOTE_MARKER).unlink()  # as an older ikdata left it
    before = _tree(remote)
    done = runner.invoke(app, ["gc", str(remote)])
    assert done.exit_code == 2 and "layout of a remote" in done.output, done.output
    assert _tree(remote) == before


@pytest.mark.parametrize("backend", ["file", "memory"])
def test_file_and_memory_remotes_get_the_marker(backend, request, make_ikdata_dataset, tmp_path):
    from remote_helpers import url_for

    from ikdata.remote.connect import open_backend

    url = url_for(backend, request, tmp_path)
    push(make_ikdata_dataset(1), url)
    with open_backend(url) as remote:
        assert json.loads(remote.read(REMOTE_MARKER))["format"] == "ikdata-remote/1"


def test_push_into_a_dataset_folder_is_refused(tmp_path):
    root = make_validated(tmp_path / "ds", rows=1)
    target = make_validated(tmp_path / "target", rows=1, seed=3)
    before = _tree(target)
    done = runner.invoke(app, ["push", str(root), str(target)])
    assert done.exit_code == 2 and "holds a dataset" in done.output, done.output
    assert _tree(target) == before
