"""SIGKILL during pack, unpack and gc with damaged packs present, then repair: no tensor is lost.

The dataset holds, beside good packs with garbage in them and loose blobs still to pack, the
damage of issue 21's finding 4: a second pack holding a corrupt copy of a referenced tensor, a
packed copy damaged in place whose only good copy is loose, and an index listing a digest its
pack lacks (left out for gc, which refuses to start while an index disagrees with its pack).
Each operation is killed at each of its checkpoints (deterministic) and at random
moments (``slow``, as in ``test_kill.py``: ``IKDATA_KILL_RUNS``, ``IKDATA_KILL_SEED``); after
``repair`` every row is still there and every tensor a row names loads and verifies, and the only
problems ``validate --deep`` still reports are the damaged packs themselves.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "merge"))
from merge_helpers import capture as write_rows  # noqa: E402
from test_kill import RUNS, SEED, Figures, _kill_at_random, _rows, _run_to_end  # noqa: E402

DRIVER = """
import sys
from ikdata.core.errors import ProblemsFound
from ikdata.ops.gc import collect_garbage
from ikdata.ops.pack import pack_dataset, unpack_dataset
print("ready", flush=True)
op, root = sys.argv[1:3]
try:
    if op == "pack":
        pack_dataset(root, pack_bytes=4096)
    elif op == "unpack":
        unpack_dataset(root)
    else:
        collect_garbage(root, grace_minutes=0)
except ProblemsFound as exc:  # the damage is named and left as it is; that is the expected outcome
    print(f"problems {len(exc.problems)}", flush=True)
print("done", flush=True)
"""

CHECKPOINTS = {
    "pack": ["pack-written", "pack-published", "pack-loose-removed"],
    "unpack": ["unpack-loose-written", "unpack-index-removed"],
    "gc": ["pack-written", "pack-published", "gc-pack-rewritten", "gc-pack-unpublished"],
}


def _referenced(root: Path) -> list[str]:
    from ikdata.core.dataset import Dataset

    return sorted({os.path.normpath(p) for p in Dataset.open(root).blob_references().paths})


def _flip_packed_byte(root: Path, blob) -> None:
    with open(root / blob.pack, "r+b") as stream:
        stream.seek(blob.offset)
        byte = stream.read(1)
        stream.seek(blob.offset)
        stream.write(bytes([byte[0] ^ 0xFF]))


def _damaged_dataset(root: Path, *, bad_index: bool = True) -> Path:
    """Rows, garbage, several packs, loose blobs still to pack, and the three kinds of damage (gc
    refuses to start while an index disagrees with its pack, so its runs go without that one)."""
    from ikdata.core.pack_writer import write_pack
    from ikdata.core.packs import PackItem, load_packs, read_packed
    from ikdata.core.store import BlobStore, blob_path, write_atomic
    from ikdata.core.writer import DatasetWriter
    from ikdata.ops.pack import pack_dataset

    write_rows(root, rows=40, seed=1)
    store, rng = BlobStore(root), np.random.default_rng(7)
    for _ in range(60):  # garbage that ends up inside packs: gc rewrites those packs
        store.put(rng.standard_normal((8, 8)).astype(np.float32))
    DatasetWriter(root).commit()
    pack_dataset(root, pack_bytes=4096)
    write_rows(root, rows=10, seed=2, start=40)  # loose blobs for the next pack
    for _ in range(20):  # and loose garbage for gc
        store.put(rng.standard_normal((8, 8)).astype(np.float32))
    DatasetWriter(root).commit()
    found = load_packs(root)
    referenced = [r.rsplit("/", 1)[1].split(".")[0] for r in _referenced(root)]
    packed = [d for d in referenced if d in found.blobs]
    by_pack: dict[str, list[str]] = {}
    for digest in packed:
        by_pack.setdefault(found.blobs[digest].pack, []).append(digest)
    first, second, third = sorted(by_pack)[:3]
    # 1. a second pack holding a corrupt copy of a referenced tensor, sorting before the good one
    blob = found.blobs[by_pack[first][0]]
    data = bytearray(read_packed(root, blob))
    for position in range(len(data)):
        data[position] ^= 0xFF
        bad_pack, bad_pack_index = write_pack(root, [PackItem(blob.digest, blob.dtype, blob.shape, bytes(data))])
        if bad_pack < blob.pack:
            break
        (root / bad_pack_index).unlink()
        (root / bad_pack).unlink()
        data[position] ^= 0xFF
    # 2. a packed copy damaged in place; the good copy is loose
    blob = found.blobs[by_pack[second][0]]
    write_atomic(root / blob_path(blob.digest), blob.loose_bytes(read_packed(root, blob)))
    _flip_packed_byte(root, blob)
    if not bad_index:
        return root
    # 3. an index listing a digest its pack lacks
    index = root / found.blobs[by_pack[third][0]].index
    document = json.loads(index.read_text())
    document["tensors"]["f" * 64] = {"dtype": "torch.float32", "shape": [1], "offset": 8, "length": 4}
    index.write_text(json.dumps(document))
    return root


def _loads(root: Path) -> tuple[set[str], set[str]]:
    """(referenced blobs that load and verify, paths outside blob/packs/ that validate --deep names)."""
    import ikdata
    from ikdata.core.errors import IkdataError
    from ikdata.core.records import TensorRef
    from ikdata.core.store import BLOB_KEY
    from ikdata.ops.validate import validate
    from ikdata.replay.blobs import load_verified

    ds = ikdata.open(root)
    good = set()
    for rel in _referenced(root):
        try:
            load_verified(ds.store, ds.resolve(rel), TensorRef(rel, BLOB_KEY))
            good.add(rel)
        except IkdataError:
            pass
    return good, {p.path for p in validate(ds, deep=True).problems if not p.path.startswith("blob/packs/")}


def _check(root: Path, before: dict[str, str], loadable: set[str], figures: Figures | None = None) -> list[str]:
    """Repair, then: no row lost, every tensor that loaded before still loads verified, and no problem
    outside the damaged packs."""
    from ikdata.core.layout import repair_dataset

    at_kill = _rows(root)
    if repair_dataset(root).changed and figures is not None:
        figures.repaired += 1
    failures = [f"row {u} lost" for u in sorted((set(before) | set(at_kill)) - set(_rows(root)))]
    good, problems = _loads(root)
    failures += [f"{rel} no longer loads" for rel in sorted(loadable - good)]
    failures += [f"validate --deep: {path}" for path in sorted(problems - _BASELINE_PROBLEMS)]
    if (root / ".ikdata-gc.json").exists():
        failures.append("repair left gc's marker behind")
    return failures


_BASELINE_PROBLEMS: set[str] = set()


@pytest.fixture(scope="module")
def damaged_sets(tmp_path_factory) -> dict[bool, tuple[Path, set[str]]]:
    """bad_index -> (the damaged dataset, the referenced blobs that load from it as it is)."""
    sets = {}
    for bad_index in (True, False):
        root = _damaged_dataset(tmp_path_factory.mktemp("damaged-packs") / "ds", bad_index=bad_index)
        loadable, problems = _loads(root)
        _BASELINE_PROBLEMS.update(problems)  # the row whose tensor a corrupt pack meets first is named already
        assert len(loadable) == len(_referenced(root)) - 1
        sets[bad_index] = (root, loadable)
    return sets


def _driver(folder: Path) -> Path:
    driver = folder / "driver.py"
    driver.write_text(DRIVER)
    return driver


@pytest.mark.parametrize("operation, crash_at", [(op, at) for op, points in CHECKPOINTS.items() for at in points])
def test_a_kill_at_each_checkpoint_with_damaged_packs_loses_nothing(damaged_sets, tmp_path, operation, crash_at):
    damaged, loadable = damaged_sets[operation != "gc"]
    run = tmp_path / "ds"
    shutil.copytree(damaged, run, symlinks=True)
    before = _rows(run)
    env = dict(os.environ, IKDATA_TEST_CRASH_AT=crash_at)
    result = subprocess.run([sys.executable, str(_driver(tmp_path)), operation, str(run)], capture_output=True,
                            text=True, env=env, timeout=300, check=False)
    assert result.returncode in (0, -signal.SIGKILL), result.stderr[-3000:]
    assert _check(run, before, loadable) == []
    finished = subprocess.run([sys.executable, str(_driver(tmp_path)), operation, str(run)], capture_output=True,
                              text=True, timeout=300, check=False)  # and the operation run again to its end
    assert finished.returncode == 0 and "done" in finished.stdout, finished.stderr[-3000:]
    assert _check(run, before, loadable) == []


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("operation", ["pack", "unpack", "gc"])
def test_sigkill_at_a_random_moment_with_damaged_packs_then_repair_loses_nothing(damaged_sets, tmp_path, operation):
    rng = random.Random(f"{SEED}-damaged-{operation}")
    damaged, loadable = damaged_sets[operation != "gc"]
    driver = _driver(tmp_path)
    reference = tmp_path / "reference"
    shutil.copytree(damaged, reference, symlinks=True)
    before = _rows(reference)
    length = _run_to_end([sys.executable, str(driver), operation, str(reference)], tmp_path)
    assert _check(reference, before, loadable) == []
    figures = Figures(f"{operation} (damaged packs)")
    for number in range(1, RUNS + 1):
        run = tmp_path / f"run-{number}"
        shutil.copytree(damaged, run, symlinks=True)
        returncode = _kill_at_random([sys.executable, str(driver), operation, str(run)], tmp_path, length, rng)
        figures.runs += 1
        if returncode == -signal.SIGKILL:
            figures.killed += 1
        else:
            assert returncode == 0, f"run {number} failed by itself (exit {returncode})"
            figures.finished += 1
        failures = _check(run, before, loadable, figures)
        if failures:
            figures.invalid.append(f"run {number}: " + "; ".join(failures[:5]))
        shutil.rmtree(run, ignore_errors=True)
    print("\n" + figures.line())
    assert figures.invalid == [], "\n".join(figures.invalid)
