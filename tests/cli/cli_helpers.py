"""Helpers for the CLI tests: the installed ``ikdata`` script, a trusted definitions folder,
and a replayable dataset with one failing case."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from foundation_helpers import gemm_definition_record, write_definition

IKDATA = str(Path(sys.executable).with_name("ikdata"))


def run_cli(*args: str, env: dict[str, str] | None = None, umask: int | None = None,
            stderr_file: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``ikdata ARGS`` in a real process, stdout and stderr captured (neither is a terminal);
    with ``stderr_file``, stderr goes to that file instead."""
    full_env = {**os.environ, **(env or {})}
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    if stderr_file is None:
        return subprocess.run([IKDATA, *args], capture_output=True, text=True, env=full_env, preexec_fn=preexec,
                              timeout=600)
    with open(stderr_file, "w") as stream:
        return subprocess.run([IKDATA, *args], stdout=subprocess.PIPE, stderr=stream, text=True, env=full_env,
                              preexec_fn=preexec, timeout=600)


def trusted_definitions(folder: Path) -> Path:
    """A definitions folder holding the small GEMM, named with --definitions so its reference runs."""
    write_definition(folder, gemm_definition_record())
    return folder


def write_replayable(root: Path, *, rows: int = 3, failing: int | None = None, request: object = None,
                     axes_extra: int = 0) -> Path:
    """A dataset of ``rows`` GEMM workloads; row ``failing`` has a wrong expected output.

    ``request`` is recorded as the receipts' request payload.
    """
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    definition = Definition.from_dict(gemm_definition_record(), origin=USER, source="test")
    writer = DatasetWriter(root)
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    for i in range(rows):
        a = rng.standard_normal((i + 1 + axes_extra, 8)).astype(np.float32)
        c = a @ w.T
        if i == failing:
            c = c + 1.0
        provenance = {"engine": "test", "model": "tiny", "request_id": f"r{i}", "step": i}
        if request is not None:
            provenance["request"] = request
        writer.add(definition, {"A": a, "W": w}, {"C": c}, provenance)
    writer.commit()
    return root
