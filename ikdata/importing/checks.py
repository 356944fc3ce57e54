"""What validate checks, checked by import too, once the blobs an import brings in are verified.

:func:`ikdata.importing.plan.plan_import` calls :func:`check_against_blobs` after every blob
it needs is rehashed (or found in DST): each new row's and receipt's tensors must have the
dtype and shape its definition and the row's axes call for, the axes must be exactly the
definition's var axes, and every admitted verdict's metrics must agree with each other and
with the expected output's bytes (:func:`ikdata.core.verdicts.cross_check`), so a report
edited after the replay is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ikdata.core.errors import DefinitionError, ProblemsFound
from ikdata.core.problems import Problem
from ikdata.core.safetensors_format import TensorEntry
from ikdata.core.store import BlobStore, blob_path, digest_from_path, read_entries
from ikdata.core.verdicts import cross_check, tensor_stats


def check_against_blobs(plan: Any, dst: Path) -> None:
    """Refuse the import when a new row or receipt disagrees with its blobs or its verdict's metrics
    cannot all be true.

    ``plan`` is the :class:`ikdata.importing.plan.ImportPlan` being built (not imported here:
    plan imports this module).

    Raises:
        ProblemsFound: naming each workload (file:line) and what disagrees; nothing was imported.
    """
    located: dict[str, tuple[Path, TensorEntry]] = {}

    def locate(digest: str) -> tuple[Path, TensorEntry]:
        if digest not in located:
            tensor = plan.blobs.get(digest)
            if tensor is not None and tensor.entry is not None:
                located[digest] = (Path(tensor.path), tensor.entry)
            else:  # DST holds it: its header says what it is
                path = dst / blob_path(digest)
                packed = None if path.is_file() else BlobStore(dst).packed(digest)
                if packed is not None:  # in one of DST's packs (ikdata.core.packs)
                    located[digest] = (dst / packed.pack, TensorEntry(digest, packed.dtype, packed.shape, packed.offset,
                                                                      packed.offset + packed.length))
                else:
                    located[digest] = (path, read_entries(path)[0])
        return located[digest]

    receipts = {r["uuid"]: r for r in plan.receipts}
    problems: list[Problem] = []
    for rows in plan.rows.values():
        for row in rows:
            uuid = row["workload"]["uuid"]
            where = plan.source.where.get(uuid, str(plan.source.named))
            definition = plan.source.definitions[row["definition"]]
            receipt = receipts.get(uuid)
            descriptors = dict(row["workload"]["inputs"])
            if receipt is not None:
                descriptors.update(receipt["expected_output"])
            shapes: dict[str, tuple[int, ...] | None] = {}
            dtypes: dict[str, str] = {}
            for name, descriptor in descriptors.items():
                if descriptor.get("type") == "safetensors":
                    _, entry = locate(digest_from_path(descriptor["path"]))
                    shapes[name], dtypes[name] = entry.shape, entry.dtype
                elif descriptor.get("type") == "scalar":
                    shapes[name] = None
            axes = row["workload"]["axes"]
            if set(axes) != set(definition.var_axes):
                problems.append(Problem(where, f"workload {uuid}: axes {sorted(axes)} are not the var axes "
                                        f"{definition.var_axes} of {definition.name!r}", code="unknown-axis"))
                continue
            try:
                definition.bind(shapes, dtypes, tensors=list(shapes), axes=axes)
            except DefinitionError as exc:
                problems.append(Problem(where, f"workload {uuid}: {exc}; the row's axes {axes} and its blobs "
                                        "disagree", code="shape-mismatch"))
                continue
            if receipt is not None:
                problems += _metric_problems(where, uuid, receipt, locate)
    if problems:
        raise ProblemsFound(problems, f"{plan.source.named}: {len(problems)} workload(s) disagree with their blobs "
                            "or their report; nothing was imported. Run 'ikdata validate' on it, and replay it "
                            "again if its report was edited")


def _metric_problems(where: str, uuid: str, receipt: dict, locate) -> list[Problem]:
    validation = receipt.get("validation") or {}
    metrics, tolerance = validation.get("metrics"), validation.get("tolerance")
    if not isinstance(metrics, dict) or not isinstance(tolerance, dict) or validation.get("basis"):
        return []  # a seed verdict has no metrics to cross-check (its basis says so)
    problems = []
    for name, descriptor in receipt["expected_output"].items():
        spec, found = tolerance.get(name), metrics.get(name)
        if descriptor.get("type") != "safetensors" or not isinstance(spec, dict) or "judge" in spec \
                or not isinstance(found, dict):
            continue
        path, entry = locate(digest_from_path(descriptor["path"]))
        with open(path, "rb") as stream:
            stream.seek(entry.start)
            data = stream.read(entry.nbytes)
        reasons = cross_check(found, rtol=float(spec.get("rtol", 0)), atol=float(spec.get("atol", 0)),
                              stats=tensor_stats(entry.dtype, data))
        problems += [Problem(where, f"workload {uuid}: output {name!r}: the report's metrics cannot all be "
                             f"true: {reason}", code="report-metrics") for reason in reasons]
    return problems


__all__ = ["check_against_blobs"]
