"""What a judge family may use of the replay loop: the run it is handed, and how it loads and references.

A family's hooks (:class:`ikdata.core.features.Family`: ``settle``, ``execute``, ``finish``) receive a
:class:`Run` (one replay call's state) and, for ``execute``, a :class:`Pending` case. Through this
module, and only through it, a family loads verified tensors (:func:`load_tensor`, :func:`load_all`),
gets a definition's trusted reference (:func:`reference`), maps what a reference returned to output
names (:func:`name_outputs`) and records a case in the report (:meth:`Run.record`).

The runner (:mod:`ikdata.replay.runner`) builds on this module; this module imports neither the
runner nor :mod:`ikdata.judging.families`, so a family that imports it closes no import cycle.
"""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from ikdata.core.dataset import Dataset
from ikdata.core.definitions import Definition, load_reference
from ikdata.core.errors import DefinitionError, RecordError, UntrustedReference
from ikdata.core.records import Receipt, Scalar, TensorRef, WorkloadRow
from ikdata.core.repeats import Repeats
from ikdata.core.store import BlobStore, digest_from_path
from ikdata.core.cases import Case
from ikdata.replay.blobs import load_verified
from ikdata.replay.reuse import ReuseCache


@dataclass(frozen=True)
class Refusal:
    """A definition whose reference may not run, and how many workloads that left unreplayed."""

    definition: str
    digest: str
    source: str
    workloads: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"definition": self.definition, "digest": self.digest, "source": self.source,
                "workloads": self.workloads}


@dataclass
class Run:
    """The state of one replay call, as a family's hooks receive it.

    Attributes:
        ds: the dataset replayed (its definitions, rows, paths and root).
        device: where inputs load and references run (``cpu``, ``cuda:1``).
        device_kind: the device's type (``cpu``, ``cuda``), part of reuse keys.
        torch_version: the torch that judges, part of reuse keys.
        trusted_digests: definition digests the user trusts explicitly.
        out: the report being written (:class:`ikdata.replay.report.ReportFile`); None on a Ray worker.
        cache: the reuse cache (:mod:`ikdata.replay.reuse`).
        reuse: False: no lookups, and the cache file is neither read nor written.
        receipts: the first receipt of each workload uuid.
        references: loaded references by definition name.
        failures: definition -> why its reference cannot load.
        refused: definitions whose reference is not trusted.
        repeats: uuids whose receipts disagree (:mod:`ikdata.core.repeats`).
        conflicts: uuid -> why: two different rows share it.
    """

    ds: Dataset
    device: str
    device_kind: str
    torch_version: str
    trusted_digests: frozenset[str]
    out: Any
    cache: ReuseCache
    reuse: bool
    receipts: dict[str, Receipt]
    references: dict[str, Callable[..., Any]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    refused: dict[str, Refusal] = field(default_factory=dict)
    repeats: Repeats = field(default_factory=Repeats)
    conflicts: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.store = BlobStore(self.ds.root)

    def recorded(self, uuid: str) -> Case | None:
        """The case the report already holds for workload ``uuid`` (this run's or a resumed one), or None."""
        found = self.out.by_uuid.get(uuid)
        return None if found is None else Case.from_json(found, path=str(self.out.path))

    def record(self, case: Case) -> Case:
        """Record one case in the report (replacing an earlier one of its uuid), journaled at once; returns
        it as the report holds it."""
        return Case.from_json(self.out.add(case), path=str(self.out.path))


@dataclass
class Pending:
    """A case that passed every check that needs no tensor, and must now run (a family's ``execute`` gets it).

    Attributes:
        case: the case so far (definition, uuid, axes, device, torch, reference digest, reuse key), ``skipped``
            until its judge decides.
        definition: its definition.
        reference: the definition's trusted reference.
        receipt: the workload's receipt (its expected outputs).
        started: ``time.perf_counter()`` when the case began (its ``seconds`` count from here).
    """

    case: Case
    definition: Definition
    reference: Callable[..., Any]
    receipt: Receipt
    started: float


def reference(run: Run, definition: Definition, row: WorkloadRow | None = None) -> Callable[..., Any] | None:
    """The definition's trusted ``run``, loaded once; None when it is refused (recorded in ``run.refused``).

    Raises:
        DefinitionError: the reference cannot load (the same message for each of its workloads).
    """
    name = definition.name
    if name in run.references:
        return run.references[name]
    if name in run.refused:
        refusal = run.refused[name]
        run.refused[name] = Refusal(name, refusal.digest, refusal.source, refusal.workloads + 1, refusal.message)
        return None
    if name in run.failures:
        raise DefinitionError(run.failures[name], definition=name)
    try:
        loaded = load_reference(definition, trusted_digests=run.trusted_digests,
                                trusted_definitions=run.ds.trusted_definitions)
    except UntrustedReference as exc:
        run.refused[name] = Refusal(name, exc.digest, exc.source, 1, str(exc))
        return None
    except DefinitionError as exc:
        run.failures[name] = str(exc).removeprefix(f"{name}: ")
        raise
    # Let tracebacks of the reference show its source lines (it was compiled from a string).
    filename = f"<reference {name}>"
    linecache.cache[filename] = (len(definition.reference), None, definition.reference.splitlines(True), filename)
    run.references[name] = loaded
    return loaded


def load_tensor(run: Run, ref: TensorRef, where: str) -> tuple[torch.Tensor, str]:
    """Check the path by the path rule, then verify and load the blob onto the run's device: (tensor, digest).

    What was verified is noted (file identity taken before the read) for later reuse.

    Raises:
        BlobNotFound, BlobCorrupted, RecordError: located at ``where``.
    """
    path = run.ds.paths.resolve(ref.path, where=where)
    try:
        before = os.stat(path)
    except OSError:
        before = None  # load_verified names the missing blob
    tensor, digest = load_verified(run.store, path, ref, device=run.device)
    if before is not None and digest == digest_from_path(ref.path):
        run.cache.note_verified(before, digest)
    return tensor, digest


def load_all(run: Run, specs: Mapping[str, Any], descriptors: Mapping[str, Any],
             where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Every value ``specs`` names (a definition's inputs or outputs) from a record's descriptors, verified:
    (values by name, tensor digests by name). Scalars load as their value.

    Raises:
        RecordError: a descriptor is missing, or names a ``random`` input (no data to replay).
    """
    missing = [n for n in specs if n not in descriptors]
    if missing:
        raise RecordError(f"no descriptor for {missing}; the definition needs {list(specs)}", path=where)
    values, digests = {}, {}
    for name in specs:
        descriptor = descriptors[name]
        if isinstance(descriptor, Scalar):
            values[name] = descriptor.value
        elif isinstance(descriptor, TensorRef):
            values[name], digests[name] = load_tensor(run, descriptor, where)
        else:
            raise RecordError(f"{name!r} is a 'random' input, which has no data to replay", path=where)
    return values, digests


def name_outputs(definition: Definition, returned: Any) -> dict[str, Any]:
    """Map what a reference returned to output names: one value, a tuple/list in order, or a dict by name.

    Raises:
        DefinitionError: the count or the names disagree with the definition's outputs.
    """
    names = list(definition.outputs)
    if isinstance(returned, Mapping):
        if set(returned) != set(names):
            raise DefinitionError(f"the reference returned outputs {sorted(returned)}, the definition declares "
                                  f"{names}", definition=definition.name)
        return dict(returned)
    values = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    if len(values) != len(names):
        raise DefinitionError(f"the reference returned {len(values)} outputs, the definition declares "
                              f"{len(names)} ({', '.join(names)})", definition=definition.name)
    return dict(zip(names, values))


__all__ = ["Pending", "Refusal", "Run", "load_all", "load_tensor", "name_outputs", "reference"]
