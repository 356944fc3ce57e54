"""Helpers for tests: a small GEMM definition, a seed-layout dataset writer, and a tree digest.

Import them as ``from foundation_helpers import ...`` (not from ``conftest``: several
folders have their own conftest.py, so that name is ambiguous). The fixtures in
``tests/conftest.py`` are built on these.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest


GEMM_NAME = "gemm_test_n4_k8"

GEMM_REFERENCE = """import torch

def run(A, W):
    return torch.matmul(A, W.T)
"""


def gemm_definition_record(name: str = GEMM_NAME, *, dtype: str = "float32", n: int = 4, k: int = 8,
                           op_type: str = "gemm", reference: str = GEMM_REFERENCE, reference_note: str = "",
                           description: str | None = "test GEMM", **extra) -> dict:
    """The one small GEMM definition record of the tests: C[M, N] = A[M, K] @ W[N, K].T, M a var axis.

    ``reference_note`` appends a comment to ``run``'s line (another reference digest, same
    behaviour); ``extra`` adds fields (``tolerance``, ``judge``...). Every folder's helpers build on it.
    """
    if reference_note:
        reference = reference.replace("def run(A, W):", f"def run(A, W):{reference_note}", 1)
    record = {
        "name": name,
        "op_type": op_type,
        "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": n}, "K": {"type": "const", "value": k}},
        "inputs": {"A": {"shape": ["M", "K"], "dtype": dtype}, "W": {"shape": ["N", "K"], "dtype": dtype}},
        "outputs": {"C": {"shape": ["M", "N"], "dtype": dtype}},
        "reference": reference,
        **extra,
    }
    if description is not None:
        record["description"] = description
    return record


def write_definition(folder: Path, record: dict) -> Path:
    """Write a definition record as ``folder/<op_type>/<name>.json``."""
    path = Path(folder) / record["op_type"] / f"{record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 (or link target) of every file and link under a folder.

    Compare before and after a command to prove it left the folder unchanged.
    """
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = "link:" + os.readlink(path)
            elif path.is_file():
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[rel] = "dir"
    return found


def write_seed_dataset(root: Path, definitions: Path, *, rows: int = 3, seed: int = 0) -> Path:
    """Write a dataset exactly as the seed capture script's CaptureWriter does.

    Blobs are ``safetensors.torch.save_file({"tensor": t})`` at
    ``blob/workloads/<name>/<digest>.safetensors``; rows at
    ``workloads/<family>/<name>.jsonl`` (family = the definition's folder name);
    receipts at ``results/captures.jsonl`` with a bare descriptor as
    ``expected_output``; definitions live in ``definitions`` OUTSIDE the dataset.
    """
    import torch
    import uuid as uuid_mod
    from safetensors.torch import save_file

    record = gemm_definition_record(dtype="bfloat16")
    write_definition(definitions, record)
    name = record["name"]
    family = record["op_type"]

    def tensor(value):
        value = value.detach().contiguous()
        header = json.dumps([str(value.dtype), list(value.shape)]).encode()
        digest = hashlib.sha256(header)
        digest.update(memoryview(value.reshape(-1).view(torch.uint8).numpy()))
        relative = Path("blob/workloads") / name / (digest.hexdigest() + ".safetensors")
        path = root / relative
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            save_file({"tensor": value}, str(temporary))
            temporary.replace(path)
        return {"type": "safetensors", "path": relative.as_posix(), "tensor_key": "tensor"}

    generator = torch.Generator().manual_seed(seed)
    w = torch.randn(4, 8, generator=generator).to(torch.bfloat16)
    for i in range(rows):
        a = torch.randn(i + 1, 8, generator=generator).to(torch.bfloat16)
        output = (a.float() @ w.float().T).to(torch.bfloat16)
        provenance = {"engine": "sglang", "model": "tiny", "request_id": f"req-{i}", "step": i,
                      "operation": "linear", "process_id": 1234, "module_path": "model.layers.0.proj"}
        descriptors = {"A": tensor(a), "W": tensor(w)}
        axes = {"M": i + 1}
        identity = json.dumps([name, descriptors, provenance], sort_keys=True)
        workload_id = str(uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, identity))
        row = {"definition": name, "workload": {"uuid": workload_id, "axes": axes, "inputs": descriptors}}
        receipt = dict(provenance, definition=name, uuid=workload_id, axes=axes, expected_output=tensor(output))
        receipt_path = root / "results" / "captures.jsonl"
        receipt_path.parent.mkdir(parents=True, exist_ok=True)
        with receipt_path.open("a") as stream:
            stream.write(json.dumps(receipt, sort_keys=True) + "\n")
        rows_path = root / "workloads" / family / (name + ".jsonl")
        rows_path.parent.mkdir(parents=True, exist_ok=True)
        with rows_path.open("a") as stream:
            stream.write(json.dumps(row, sort_keys=True) + "\n")
    return root


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for servers the tests start)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tiny models on a shared machine: more threads only contend. A folder's conftest that imports
    this fixture runs its tests on one torch thread (restored after the session)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
