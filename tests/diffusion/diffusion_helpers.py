"""Helpers of the diffusion tests (a module of its own: ``conftest`` is a name every folder has)."""

from __future__ import annotations

from pathlib import Path


def trajectories(root: Path) -> list[dict]:
    """Every trajectory record of a dataset, in file order."""
    import json

    found = []
    for path in sorted((Path(root) / "trajectories").glob("*.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return found


def digest(ref: dict) -> str:
    from ikdata.core.store import digest_from_path

    return digest_from_path(ref["path"])
