"""A tensor-parallel program keeps every rank's shard: two real processes on gloo, one dataset."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ikdata.capture.context import Ranks, ranks_from_env

REPO = Path(__file__).resolve().parents[2]

# Each rank holds its half of one Linear(8 -> 8) weight (rows 0-3 on rank 0, rows 4-7 on rank 1),
# runs two forward steps on the same activations, and all-gathers the halves, as Megatron-style
# column parallelism does.
PROGRAM = """
import sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def work(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    full = torch.arange(64, dtype=torch.float32).reshape(8, 8) / 64
    shard = torch.nn.Linear(8, 4, bias=False)
    with torch.no_grad():
        shard.weight.copy_(full[4 * rank: 4 * rank + 4])
    x = torch.ones(2, 8)
    for _ in range(2):
        with torch.no_grad():
            y = shard(x)
        parts = [torch.empty_like(y) for _ in range(2)]
        dist.all_gather(parts, y)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(int(sys.argv[1]),), nprocs=2, join=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ikdata(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ikdata", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def tp_dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tp")
    script = folder / "tp.py"
    script.write_text(textwrap.dedent(PROGRAM))
    ds = folder / "ds"
    # --per-step: both steps of each rank are kept, not once per run (issue 44's default)
    result = _ikdata("capture", "--into", str(ds), "--only", "gemm", "--per-step", "--", sys.executable, str(script),
                     str(_free_port()))
    assert result.returncode == 0, result.stdout + result.stderr
    return ds


def _receipts(ds: Path) -> list[dict]:
    return [json.loads(line) for line in (ds / "receipts.jsonl").read_text().splitlines() if line.strip()]


def test_both_shards_of_the_weight_are_kept_with_their_ranks(tp_dataset):
    from safetensors.torch import load_file

    receipts = _receipts(tp_dataset)
    by_rank = {}
    for r in receipts:
        by_rank.setdefault(r["rank"], []).append(r)
    assert sorted(by_rank) == [0, 1], receipts
    assert {r["world_size"] for r in receipts} == {2}
    assert all(r["process_group"]["source"] == "torch.distributed" and r["process_group"]["backend"] == "gloo"
               for r in receipts)
    assert all(len(rs) == 2 for rs in by_rank.values())  # two steps per rank, none dropped
    rows = {}
    for path in (tp_dataset / "workloads").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rows[row["workload"]["uuid"]] = row["workload"]
    firsts = {}
    for rank, rs in by_rank.items():
        desc = rows[rs[0]["uuid"]]["inputs"]["W"]
        tensors = load_file(str(tp_dataset / desc["path"]))
        firsts[rank] = tensors[desc["tensor_key"]]
    full = __import__("torch").arange(64, dtype=__import__("torch").float32).reshape(8, 8) / 64
    assert firsts[0].equal(full[:4]) and firsts[1].equal(full[4:])


def test_the_dataset_validates_and_lineage_shows_the_rank(tp_dataset):
    assert _ikdata("validate", str(tp_dataset)).returncode == 0
    receipt = next(r for r in _receipts(tp_dataset) if r["rank"] == 1)
    result = _ikdata("lineage", str(tp_dataset), receipt["uuid"], "--json")
    assert result.returncode == 0, result.stderr
    capture = json.loads(result.stdout)[0]["capture"]
    assert (capture["rank"], capture["world_size"]) == (1, 2)
    assert capture["process_group"]["backend"] == "gloo"
    human = _ikdata("lineage", str(tp_dataset), receipt["uuid"])
    assert "rank" in human.stdout and "world_size" in human.stdout, human.stdout


def test_the_launchers_environment_names_the_rank_before_torch_distributed_starts():
    ranks = ranks_from_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1",
                            "MASTER_PORT": "29500"})
    assert ranks.distributed
    assert ranks.facts() == {"rank": 3, "world_size": 8, "local_rank": 1,
                             "process_group": {"source": "env", "master_addr": "10.0.0.1", "master_port": "29500"}}
    assert ranks_from_env({}).facts() == {"rank": 0, "world_size": 1}
    assert not Ranks().distributed
