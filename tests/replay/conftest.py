"""Fixtures of the replay tests: datasets written by DatasetWriter, definitions in a tmp --definitions folder.

Every replay in these tests uses a reuse cache under ``tmp_path`` (IKDATA_CACHE_DIR),
never the user's ``~/.cache``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from .replay_helpers import gemm_record


@dataclass
class Built:
    """A dataset written for a test: its folder, its trusted definitions folder, and what was added."""

    root: Path
    definitions: Path
    uuids: list[str]
    results: list[Any]

    def expected_path(self, index: int, output: str = "C") -> Path:
        return self.root / self.results[index].receipt.expected_output[output].path

    def input_path(self, index: int, name: str = "A") -> Path:
        return self.root / self.results[index].row.inputs[name].path


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("IKDATA_DEBUG", raising=False)


@pytest.fixture
def build(tmp_path) -> Callable[..., Built]:
    """Factory: ``build(rows, record=..., outputs=fn, name=...)`` writes an ikdata dataset.

    ``outputs(i, inputs) -> dict`` gives the expected outputs of row ``i`` (default:
    the reference's own result, so replay passes). The definition goes to a
    separate ``--definitions`` folder too, so the test decides what is trusted.
    """
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    counter = [0]

    def make(rows: int = 4, *, record: dict | None = None, outputs: Callable | None = None,
             inputs: Callable | None = None, name: str | None = None, seed: int = 0) -> Built:
        counter[0] += 1
        record = record or gemm_record()
        root = tmp_path / (name or f"ds{counter[0]}")
        folder = tmp_path / f"defs{counter[0]}"
        path = folder / record["op_type"] / f"{record['name']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2))
        definition = Definition.from_dict(record, origin=USER, source=str(path))
        writer = DatasetWriter(root)
        generator = torch.Generator().manual_seed(seed)
        dtype = getattr(torch, record["inputs"]["A"]["dtype"])
        w = torch.randn(4, 8, generator=generator).to(dtype)
        results = []
        for i in range(rows):
            if inputs is not None:
                given = inputs(i, generator)
            else:
                given = {"A": torch.randn(i % 3 + 1, 8, generator=generator).to(dtype), "W": w}
            expected = outputs(i, given) if outputs else {"C": given["A"] @ given["W"].T}
            results.append(writer.add(definition, given, expected, {"engine": "test", "request_id": f"r{i}",
                                                                   "step": i}))
        return Built(root, folder, [r.row.uuid for r in results], results)

    return make
