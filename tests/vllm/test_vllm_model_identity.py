"""The model's identity in vLLM receipts is cheap on the engine's hot path: each file's size, mtime and first and
last MiB, never a whole-folder hash (a real model folder holds tens of gigabytes; the identity is computed on
the first recorded sampler row, inside the engine's step)."""

from __future__ import annotations

import builtins
import os
from pathlib import Path

from ikdata.engines import vllm as engine

GIB = 1 << 30


def _sparse_model(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    weights = folder / "model.safetensors"
    with open(weights, "wb") as stream:  # 64 GiB that take no disk: only the first and last bytes are written
        stream.write(b"head")
        stream.seek(64 * GIB - 4)
        stream.write(b"tail")
    return folder


def test_a_64_gib_sparse_weight_is_identified_by_reading_two_mib(tmp_path: Path, monkeypatch) -> None:
    folder = _sparse_model(tmp_path / "model")
    read = []

    class Counting:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.stream.close()

        def read(self, n=-1):
            data = self.stream.read(n)
            read.append(len(data))
            return data

        def seek(self, *args):
            return self.stream.seek(*args)

    monkeypatch.setattr(engine, "open", lambda *a, **k: Counting(builtins.open(*a, **k)), raising=False)
    engine._folder_facts.cache_clear()
    facts = dict(engine._folder_facts(str(folder)))
    assert facts["model"] == str(folder) and len(facts["model_digest"]) == 64
    assert sum(read) <= 2 * (1 << 20) + 1024  # two MiB of the 64 GiB file, and the small config


def test_the_identity_changes_with_the_last_mib_the_size_or_the_mtime(tmp_path: Path) -> None:
    folder = _sparse_model(tmp_path / "model")
    weights = folder / "model.safetensors"

    def identity() -> str:
        engine._folder_facts.cache_clear()
        return dict(engine._folder_facts(str(folder)))["model_digest"]

    first = identity()
    assert identity() == first
    stat = weights.stat()
    with open(weights, "r+b") as stream:
        stream.seek(64 * GIB - 4)
        stream.write(b"TAIL")
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same mtime: the last MiB tells
    changed_tail = identity()
    assert changed_tail != first
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert identity() != changed_tail
    with open(weights, "r+b") as stream:
        stream.truncate(32 * GIB)
    assert identity() not in (first, changed_tail)
