"""The replay loop: for each workload, run the trusted reference on the captured inputs and judge it.

Per case: verify and load the inputs and expected outputs (memory-mapped, on the
device; each blob's digest is recomputed from its bytes and must match its
name), run the reference under ``torch.inference_mode``, judge every output,
and write the report. A reference that raises, a missing or corrupt blob, or a
reference that returns the wrong outputs gives the case ``error`` with the
traceback and replay goes on; a workload without expected outputs is
``skipped`` with the reason; a definition that is not trusted is refused (its
workloads get no case, the report lists it under ``refused``).
"""

from __future__ import annotations

import hashlib
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from ikdata.core.dataset import Dataset
from ikdata.core.definitions import Definition
from ikdata.core.errors import DefinitionError, IkdataError, RecordError, UsageError
from ikdata.core.problems import Problem
from ikdata.core.records import Receipt, TensorRef, WorkloadRow
from ikdata.core import tolerances
from ikdata.core.repeats import first_receipts
from ikdata.judging import families
from ikdata.core.cases import Case
from ikdata.replay import judges, report as report_mod, summary as summary_mod
from ikdata.replay import api
from ikdata.replay.api import Pending, Refusal, Run
from ikdata.replay.reuse import ReuseCache, case_reuse_key, default_cache_path, reused_case
from ikdata.core.store import digest_from_path
from ikdata.core.status import Status

PASSED, FAILED, ERROR, SKIPPED = Status.PASSED, Status.FAILED, Status.ERROR, Status.SKIPPED


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based): the workloads whose uuid hashes to it."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """Parse ``"I/N"`` with 1 <= I <= N.

        Raises:
            UsageError: naming the expected form.
        """
        try:
            index, count = (int(part) for part in text.split("/"))
        except ValueError:
            raise UsageError(f"--shard {text!r}: expected I/N, e.g. 1/4 (shards are numbered 1 to N)") from None
        if not 1 <= index <= count:
            raise UsageError(f"--shard {text!r}: I must be between 1 and N (shards are numbered 1 to N)")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def contains(self, uuid: str) -> bool:
        bucket = int.from_bytes(hashlib.sha256(uuid.encode()).digest()[:8], "big") % self.count
        return bucket == self.index - 1


@dataclass(frozen=True)
class Progress:
    """One step of a replay, passed to the progress callback."""

    done: int
    total: int
    case: Mapping[str, Any] | None = None  # the case just recorded; None for the start event


@dataclass(frozen=True)
class ReplayResult:
    """What a replay did: the report (as written), where, and the exit code it earns."""

    report_path: Path
    report: dict[str, Any]
    refused: tuple[Refusal, ...] = ()
    resumed: int = 0
    problems: tuple[Problem, ...] = ()  # rows, receipts or definitions that could not be read

    @property
    def counts(self) -> dict[str, int]:
        """Cases by status, and how many were reused (the whole report, resumed cases included)."""
        return summary_mod.counts(self.report)

    @property
    def exit_code(self) -> int:
        """0 when every replayed case passed, nothing was refused and every record could be read; else 1."""
        return 1 if self.problems else summary_mod.exit_code(self.report)

    def summary(self) -> dict[str, Any]:
        """The ``--json`` summary of the run."""
        found = summary_mod.summarize(self.report, report_path=self.report_path)
        found.update(resumed=self.resumed, problems=[str(p) for p in self.problems], exit_code=self.exit_code)
        return found


def replay(ds: Dataset, *, device: str = "cpu", definitions: Iterable[str] | None = None,
           shard: Shard | str | None = None, resume: bool = False, report_path: str | Path | None = None,
           trust: Iterable[str] = (), reuse: bool = True, cache_path: str | Path | None = None,
           progress: Callable[[Progress], None] | None = None, uuids: Iterable[str] | None = None,
           settings: Mapping[str, Any] | None = None, **family_settings: Any) -> ReplayResult:
    """Replay every workload with expected outputs and write the report after each case.

    Args:
        ds: the dataset (opened with any extra ``definitions`` folders, which are trusted).
        device: where inputs load and references run: ``cpu``, ``cuda``, ``cuda:1``, ...
        definitions: only these definition names (default: all).
        shard: replay only shard ``I/N`` of the workloads (by hash of the uuid).
        resume: keep the cases already in the report and replay only the others.
        report_path: default ``ds.report_path``; for a shard ``reports/replay-shard-I-of-N.json``.
        trust: definition digests the user trusts explicitly.
        reuse: take the verdict of an identical case judged before (see :mod:`ikdata.replay.reuse`).
        cache_path: the reuse cache file (default :func:`default_cache_path`).
        progress: called after every case (library code never prints).
        uuids: only these workloads (import re-judges a source's claims so); like ``definitions``, a narrowed
            run leaves out the families that need the whole run (trajectories).
        settings: each family's settings by its name, as its ``settings`` hook makes them from the command's
            options (a family not named judges with its defaults).
        family_settings: one family's settings as a keyword named as the family, the same as in ``settings``
            (``diffusion=Settings(k=3.0)``).

    Returns:
        The result; ``result.exit_code`` is 0 only when every replayed case passed.

    Raises:
        UsageError: an unknown device or definition name, a bad shard, or a report that cannot be resumed.
        TypeError: a keyword that names no family.

    Example:
        >>> result = replay(ikdata.open("runs/gemm", definitions=["my-defs"]), device="cuda")
        >>> result.counts["failed"]
        0
    """
    settings = _settings_by_family(settings, family_settings)
    shard = Shard.parse(shard) if isinstance(shard, str) else shard
    run, rows, seen_problems = _start(ds, device=device, definitions=definitions, shard=shard, resume=resume,
                                      report_path=report_path, trust=trust, reuse=reuse, cache_path=cache_path)
    if uuids is not None:
        wanted = set(uuids)
        rows = [row for row in rows if row.uuid in wanted]
    out = run.out
    resumed = sum(1 for row in rows if row.uuid in out.by_uuid)
    done = resumed
    if progress:
        progress(Progress(done, len(rows)))
    try:
        for row in rows:
            if row.uuid in out.by_uuid:
                continue
            case = _replay_one(run, row)
            recorded = None
            if case is not None:  # None: refused, the definition is not trusted
                recorded = out.add(case)
                run.cache.remember(recorded)
            done += 1
            if progress:
                progress(Progress(done, len(rows), recorded))
    finally:
        run.cache.flush()
    # every family decides what spans cases (pooled sampling tests, trajectories), resumed cases included
    families.finish_all(run, shard=shard, narrowed=bool(definitions) or uuids is not None, settings=settings)
    return _finish(run, seen_problems, resumed)


def _settings_by_family(settings: Mapping[str, Any] | None, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` and the keywords named as families, merged; a keyword that names no family is refused."""
    names = {family.name for family in families.FAMILIES}
    unknown = sorted(set(keywords) - names)
    if unknown:
        raise TypeError(f"replay() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; a family's "
                        f"settings are named as the family: {', '.join(sorted(names))}")
    return {**(settings or {}), **{k: v for k, v in keywords.items() if v is not None}}


def _start(ds: Dataset, *, device: str, definitions: Iterable[str] | None, shard: Shard | None, resume: bool,
           report_path: str | Path | None, trust: Iterable[str], reuse: bool,
           cache_path: str | Path | None) -> tuple[Run, list[WorkloadRow], int]:
    """Check the device, select the workloads, open (or resume) the report and the reuse cache."""
    seen_problems = len(ds.problems)
    device_kind, device_name = _check_device(device)
    conflicts: dict[str, str] = {}
    rows = _select(ds, definitions, shard, conflicts)
    if report_path is None:  # beside a foreign report, never over it (report_mod.default_path)
        report_path = report_mod.default_path(ds, None if shard is None else f"{shard.index}-of-{shard.count}")
    fresh = report_mod.header(device=device, device_name=device_name, torch_version=str(torch.__version__),
                              tolerances=tolerances.table(), shard=str(shard) if shard else None)
    out = (report_mod.ReportFile.resume if resume else report_mod.ReportFile.start)(report_path, fresh)
    receipts, seen = first_receipts(ds.receipts())
    run = Run(ds, device, device_kind, str(torch.__version__),
               frozenset(trust), out,  # exact template instances are in ds.trusted_definitions
               ReuseCache.open(cache_path or default_cache_path()) if reuse else ReuseCache(None), reuse,
               receipts, repeats=seen, conflicts=conflicts)
    return run, rows, seen_problems


def _finish(run: Run, seen_problems: int, resumed: int) -> ReplayResult:
    """Close the report (refusals listed) and say what could not be read."""
    ds = run.ds
    report = run.out.finish(r.to_dict() for r in run.refused.values())
    _record_report(ds, Path(run.out.path))
    # Rows and receipts that do not fit their schema are not replayed: say so instead of passing silently.
    problems = tuple(dict.fromkeys([*ds.problems[seen_problems:], *ds.definition_problems]))
    return ReplayResult(run.out.path, report, tuple(run.refused.values()), resumed, problems)


def _record_report(ds: Dataset, path: Path) -> None:
    """List the finished report in the dataset's manifest, so a replayed dataset still validates."""
    from ikdata.core import manifest

    try:
        relative = path.resolve().relative_to(ds.root.resolve()).as_posix()
    except ValueError:
        return  # a report written outside the dataset (--report elsewhere)
    manifest.record_file(ds.root, relative)


def _check_device(device: str) -> tuple[str, str | None]:
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"--device {device!r} is not a torch device ({exc}); use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: CUDA is not available here (torch {torch.__version__}); "
                             "use --device cpu")
        index = parsed.index if parsed.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: only {torch.cuda.device_count()} CUDA devices here")
        return parsed.type, torch.cuda.get_device_name(index)
    return parsed.type, None


def _select(ds: Dataset, names: Iterable[str] | None, shard: Shard | None,
            conflicts: dict[str, str] | None = None) -> list[WorkloadRow]:
    """The workloads to replay, deduplicated by uuid, in (definition, uuid) order. Two different rows
    sharing a uuid are a problem of ``ds`` (located, as validate says it) and land in ``conflicts``."""
    wanted = set(names) if names else None
    if wanted:
        known = set(ds.definitions) | {row.definition for row in ds.workloads()}
        unknown = sorted(wanted - known)
        if unknown:
            raise UsageError(f"--definition {', '.join(unknown)}: no such definition in {ds.root}; "
                             f"known: {', '.join(sorted(known)) or 'none'}")
    rows: dict[str, WorkloadRow] = {}
    for row in ds.workloads():
        if wanted is not None and row.definition not in wanted:
            continue
        if shard is not None and not shard.contains(row.uuid):
            continue
        first = rows.setdefault(row.uuid, row)
        if first is not row and conflicts is not None and first.content() != row.content():
            ds.problems.append(Problem(row.source, f"uuid {row.uuid} is also used by a different row at "
                                       f"{first.source}:{first.line}; expected one content per uuid",
                                       row.line, "/workload/uuid", "duplicate-uuid"))
            conflicts.setdefault(row.uuid, f"two different rows share uuid {row.uuid} ({first.source}:{first.line} "
                                 f"and {row.source}:{row.line}): never judged as if there were one")
    return sorted(rows.values(), key=lambda r: (r.definition, r.uuid))


def _replay_one(run: Run, row: WorkloadRow) -> Case | None:
    """Judge one workload: its case, or None when its reference is refused."""
    settled = _settle(run, row)
    return _execute(run, row, settled) if isinstance(settled, Pending) else settled


def _settle(run: Run, row: WorkloadRow) -> Case | Pending | None:
    """Everything decided without loading a tensor: skipped, refused (None), an error of the
    definition, a reused verdict, or what must run (:class:`Pending`). A Ray driver settles
    here and sends only the pending cases to workers."""
    started = time.perf_counter()
    case = Case(row.definition, row.uuid, SKIPPED, axes=dict(row.axes))  # not judged until decided below
    receipt = run.receipts.get(row.uuid)
    repeat = run.repeats.found.get(row.uuid)
    if repeat is not None:  # two answers to one input: never judged as if there were one
        return case.with_(status=FAILED, seconds=time.perf_counter() - started, reason=repeat.message)
    if row.uuid in run.conflicts:  # two rows for one uuid: which one would the verdict be about?
        return case.with_(status=FAILED, seconds=time.perf_counter() - started, reason=run.conflicts[row.uuid])
    if receipt is None or not receipt.expected_output:
        why = "no receipt" if receipt is None else "its receipt has no expected_output"
        return case.with_(seconds=time.perf_counter() - started,
                          reason=f"no expected outputs to judge against ({why}; e.g. an imported workload)")
    definition = run.ds.definitions.get(row.definition)
    settle = families.owner(definition).hook("settle")
    settled = settle(run, row, case) if settle is not None else None
    if settled is not None:  # its family decided without a tensor (a denoiser step waits for its trajectory)
        return settled.with_(seconds=time.perf_counter() - started)
    unverified = receipt.provenance.get("unverified")
    if unverified:  # capture could not vouch for the bytes its inputs name (docs/capture.md): never judged
        reason = unverified.get("reason") if isinstance(unverified, dict) else str(unverified)
        return case.with_(seconds=time.perf_counter() - started, reason=f"unverified capture, not judged: {reason}")
    try:
        if definition is None:
            raise DefinitionError(f"no definition named {row.definition!r} in {run.ds.root}/definitions or the "
                                  "--definitions folders; add it, or name its folder with --definitions")
        reference = api.reference(run, definition, row)
        if reference is None:
            return None
        case = case.with_(device=run.device, torch=run.torch_version, reference_digest=definition.reference_digest)
        if definition.call_problem:  # flashinfer-bench would call run with the inputs in another order
            raise DefinitionError(definition.call_problem, definition=definition.name)
        key = _reuse_key(run, definition, row, receipt)
        case = case.with_(reuse_key=key)
        earlier = _lookup_reuse(run, row, receipt, key)
        if earlier is not None:
            return reused_case(earlier, definition=row.definition, uuid=row.uuid, axes=row.axes,
                               seconds=time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - any failure of one case is recorded, replay goes on
        return _errored(case, exc, started)
    return Pending(case, definition, reference, receipt, started)


def _errored(case: Case, exc: BaseException, started: float) -> Case:
    """The case of a failure while judging it: ``error`` with the traceback (call inside ``except``)."""
    return case.with_(status=ERROR, error=traceback.format_exc(), reason=_short(exc),
                      seconds=time.perf_counter() - started)


def _execute(run: Run, row: WorkloadRow, pending: Pending) -> Case:
    """Load the verified inputs and expected outputs, run the reference, judge every output."""
    case, definition, reference, receipt, started = (pending.case, pending.definition, pending.reference,
                                                     pending.receipt, pending.started)
    execute = families.owner(definition).hook("execute")
    if execute is not None:  # its family judges it (sampling: draws against the distribution, not closeness)
        try:
            return execute(run, row, pending)
        except Exception as exc:  # noqa: BLE001 - any failure of one case is recorded, replay goes on
            return _errored(case, exc, started)
    chosen_by: dict[str, str] = {}
    try:
        inputs, digests = api.load_all(run, definition.inputs, row.inputs, f"{row.source}:{row.line}")
        case = case.with_(input_digests=digests)
        expected, digests = api.load_all(run, definition.outputs, receipt.expected_output,
                                         f"{receipt.source}:{receipt.line}")
        case = case.with_(expected_digests=digests)
        _check_shapes(definition, row, receipt, inputs, expected)
        with torch.inference_mode():  # positionally, in the definition's order, as flashinfer-bench calls it
            returned = reference(*[inputs[n] for n in definition.inputs])
        outputs = api.name_outputs(definition, returned)
        verdicts = {}
        for name, spec in definition.outputs.items():
            actual, wanted = outputs[name], expected[name]
            if spec.shape is None:  # a Python scalar output: judged as a 0-d tensor of its declared dtype
                dtype = getattr(torch, spec.dtype)
                wanted = torch.tensor(wanted, dtype=dtype, device=run.device)
                if not isinstance(actual, torch.Tensor):
                    actual = torch.tensor(actual, dtype=dtype, device=run.device)
            chosen = judges.select_rule(definition, name, layout=run.ds.layout)
            verdicts[name] = judges.judge_output(name, actual, wanted, chosen.rule)
            chosen_by[name] = chosen.chosen_by
    except Exception as exc:  # noqa: BLE001 - any failure of one case is recorded, replay goes on
        return _errored(case.with_(chosen_by=chosen_by or None), exc, started)
    failing = [v.reason for v in verdicts.values() if not v.passed]
    return case.with_(chosen_by=chosen_by or None, status=FAILED if failing else PASSED,
                      metrics={n: v.metrics for n, v in verdicts.items()},
                      tolerance={n: v.rule for n, v in verdicts.items()}, seconds=time.perf_counter() - started,
                      reason="; ".join(failing) if failing else None)


def _check_shapes(definition: Definition, row: WorkloadRow, receipt: Receipt, inputs: Mapping[str, Any],
                  expected: Mapping[str, Any]) -> None:
    """Each loaded tensor has the dtype and shape the definition gives it at the row's axes, as validate
    checks: a row whose axes disagree with its blobs is refused, never judged.

    Raises:
        RecordError: located at the row (an input) or the receipt (an output).
    """
    for values, specs, path, line, pointer in (
            (inputs, definition.inputs, row.source, row.line, "/workload/inputs"),
            (expected, definition.outputs, receipt.source, receipt.line, "/expected_output")):
        for name, value in values.items():
            spec = specs.get(name)
            if spec is None or spec.shape is None or not isinstance(value, torch.Tensor):
                continue
            if str(value.dtype) != spec.torch_dtype:
                raise RecordError(f"the blob holds {value.dtype}, expected {spec.torch_dtype} ({name!r} of "
                                  f"{definition.name!r}); 'ikdata validate' reports it too",
                                  path=path, line=line, pointer=f"{pointer}/{name}")
            shape = definition.shape_of(name, row.axes)
            if shape is not None and tuple(value.shape) != tuple(shape):
                raise RecordError(f"the blob has shape {list(value.shape)}, but the row's axes {dict(row.axes)} give "
                                  f"{list(shape)} ({name!r} of {definition.name!r}); 'ikdata validate' reports it "
                                  "too", path=path, line=line, pointer=f"{pointer}/{name}")


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, IkdataError) else text


def _reuse_key(run: Run, definition: Definition, row: WorkloadRow, receipt: Receipt) -> str | None:
    """The case's reuse key (:func:`ikdata.replay.reuse.case_reuse_key`: everything that decides the verdict)."""
    return case_reuse_key(run, definition, row, receipt)


def _lookup_reuse(run: Run, row: WorkloadRow, receipt: Receipt, key: str | None) -> dict[str, Any] | None:
    """The verdict judged before under ``key``, when reuse may vouch for every blob it names; else None."""
    if key is None or not run.reuse:
        return None
    earlier = run.cache.lookup(key)
    if earlier is None:
        return None
    # Reuse vouches for the content the digests name: each path passes the path rule, and each file
    # holds its digest by recorded evidence or by a rehash now. Otherwise the case runs (and says why).
    for descriptor in [*row.inputs.values(), *receipt.expected_output.values()]:
        if isinstance(descriptor, TensorRef):
            if run.ds.paths.refusal(descriptor.path) is not None:
                return None
            if not run.cache.confirm(run.ds.root / descriptor.path, digest_from_path(descriptor.path)):
                return None
    return earlier


# the names tools and older callers used before the family interface moved to ikdata.replay.api
_Run, _Pending, _load_tensor, _reference, _name_outputs = Run, Pending, api.load_tensor, api.reference, api.name_outputs


__all__ = ["ERROR", "FAILED", "PASSED", "Progress", "Refusal", "ReplayResult", "SKIPPED", "Shard", "replay"]
