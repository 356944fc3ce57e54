"""Plan an import without writing anything: the validation gate, conflicts, and blob verification.

The plan says which rows, receipts, definitions and blobs an import brings into
DST, which it skips (DST already holds them), which it leaves out (``--only-passed``,
``random`` inputs) and what refuses it. Every blob DST lacks is rehashed here, so a
corrupt SRC is found before the first byte is written.

The gate: a workload with expected outputs is admitted only with a trustworthy
passing validation, taken from SRC's replay report (or, if the report has no case
for it, from the ``validation`` its receipt already carries from an earlier import).
"Trustworthy" is recomputed, never read off a status field:
:func:`ikdata.core.verdicts.recheck` re-judges the recorded metrics against the
tolerance, and the case's ``input_digests``/``expected_digests`` must name exactly the
tensors of this row and receipt. A seed report has no metrics or digests; its cases
are accepted only as described in :func:`_seed_reasons`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ikdata.core import jsonl
from ikdata.core.dataset import IKDATA, RECEIPTS, SEED, Dataset, blob_paths, find_layout
from ikdata.core.definitions import (DATASET, Definition, definition_bytes, definition_relpath, read_folder,
                                     workloads_relpath)
from ikdata.core.errors import MergeConflict, ProblemsFound, RecordError
from ikdata.core.paths import PathResolver
from ikdata.core.trust import is_trusted
from ikdata.importing.foreign import LeftOut, Source, TensorSource, read_source
from ikdata.core.problems import Problem
from ikdata.core.records import WorkloadRow
from ikdata.core.tolerances import DEFAULT_TOLERANCES
from ikdata.core.verdicts import REPORT_FORMAT, expand_validation, recheck, share_validation
from ikdata.importing.checks import check_against_blobs
from ikdata.core.safetensors_format import canonical_problem
from ikdata.core.progress import Progress, ProgressCallback
from ikdata.core.store import BlobStore, digest_from_path, rehash_files
from ikdata.core.safetensors_format import BLOB_KEY
from ikdata.importing.carried import Carried, plan_carried
from ikdata.core.cases import Case, Report, case_fields

CANNOT_REJUDGE = "cannot-rejudge"  # a verdict SRC claims that import cannot re-judge here
# The seed replay's table (seeds/002), which ikdata's defaults keep: a seed report may not be looser.
SEED_TOLERANCES = {k: DEFAULT_TOLERANCES[k] for k in ("bfloat16", "float32")}


@dataclass
class ImportPlan:
    """Everything an import would do, computed read-only."""

    source: Source
    dst: Path
    rows: dict[str, list[dict]] = field(default_factory=dict)          # DST workloads file -> new rows
    receipts: list[dict] = field(default_factory=list)                 # new receipts (validation attached)
    definitions: dict[str, bytes] = field(default_factory=dict)        # DST path -> file bytes
    shared: dict[str, bytes] = field(default_factory=dict)             # DST reports/shared/<d>.json -> bytes
    blobs: dict[str, TensorSource] = field(default_factory=dict)       # digest -> bytes to bring in
    blobs_present: int = 0
    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    refused: list[LeftOut] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    conflict_paths: list[str] = field(default_factory=list)
    dst_parents: list[str] = field(default_factory=list)
    carried: Carried = field(default_factory=Carried)                 # trajectories and model records
    claims: list[str] = field(default_factory=list)                   # admitted on SRC's report: re-judge
    trust_reports: bool = False                                        # --trust-reports: claims not re-judged

    @property
    def bytes_in(self) -> int:
        return sum(_nbytes(t) for t in self.blobs.values())

    @property
    def is_noop(self) -> bool:
        """Nothing to write: DST keeps its id (and records no parent), whether SRC is already a parent of DST or
        only holds the same workloads under another id (a FlashInfer .pt copy of calls already imported)."""
        return not (self.rows or self.receipts or self.definitions or self.blobs or self.carried.appends
                    or self.carried.files)


def _nbytes(tensor: TensorSource) -> int:
    if tensor.entry is not None:
        return tensor.entry.nbytes
    return tensor.path.stat().st_size


def _trusted(source: Source, name: str) -> Definition | None:
    """The definition whose tolerance override may loosen the defaults: trusted ones only."""
    defn = source.definitions[name]
    return defn if is_trusted(defn, trusted=source.trusted) else None


def _seed_reasons(case: Case, report: Report, row: dict, receipt: dict) -> list[str]:
    """Why a seed-report case cannot be trusted. Seed cases carry ``max_absolute_errors`` only.

    Accepted when: the status is passed; there is one finite error per expected output;
    the case's axes are the row's; and the report's tolerance table is no looser than the
    seed's defaults. The bytes are not proven (no digests): the blobs themselves are
    rehashed, and the user vouches for the definitions by naming them with --definitions.
    """
    reasons = []
    if not case.passed:
        reasons.append(f"status is {case.status!r}")
    errors = case.max_absolute_errors
    if not isinstance(errors, list) or len(errors) != len(receipt["expected_output"]):
        reasons.append(f"expected one max_absolute_errors entry per output "
                       f"({len(receipt['expected_output'])}), got {errors!r}")
    elif not all(isinstance(e, (int, float)) and math.isfinite(e) for e in errors):
        reasons.append(f"max_absolute_errors {errors} are not all finite")
    if "axes" in case.order and case.axes is not None and case.axes != row["workload"]["axes"]:
        reasons.append(f"the case's axes {case.axes} are not the row's {row['workload']['axes']}")
    table = report.get("tolerances") or {}
    for dtype, default in SEED_TOLERANCES.items():
        used = table.get(dtype)
        if not isinstance(used, dict) or any(float(used.get(k, math.inf)) > v for k, v in default.items()):
            reasons.append(f"the report's {dtype} tolerance {used} is looser than the seed default {default}")
    return reasons


def _digest_reasons(case: Case, row: dict, receipt: dict) -> list[str]:
    """The case must be about exactly these bytes: its digests name this row's and receipt's tensors."""
    reasons = []
    for key, descriptors in (("input_digests", row["workload"]["inputs"]),
                             ("expected_digests", receipt["expected_output"])):
        wanted = {n: digest_from_path(d["path"]) for n, d in descriptors.items() if d["type"] == "safetensors"}
        if getattr(case, key) != wanted:
            reasons.append(f"the case's {key} {getattr(case, key)} do not name this workload's tensors {wanted}")
    return reasons


# The validation's own fields; a case's family records (a trajectory's measurements ...) travel beside them.
_VALIDATION_FIELDS = ("status", "metrics", "tolerance", "tolerances", "device", "device_name", "torch",
                      "ikdata_version", "input_digests", "expected_digests", "reference_digest", "finished_at",
                      "report", "basis", "shared")


def validation_record(case: Case, report: Report, *, report_name: str | None, report_digest: str | None,
                      seed: bool = False) -> dict:
    """The ``validation`` an import attaches to a receipt (``schemas/validation.schema.json``).

    It keeps what a later import needs to recheck it: metrics, per-output tolerance,
    the default table, the digests judged, and the family records the report schema defines for a case
    (:func:`ikdata.core.cases.case_fields`: a denoiser step judged by its trajectory keeps its measurements).
    A field of the case the schema does not define is not copied: SRC's report cannot write into DST's receipts.
    """
    record: dict[str, Any] = {
        "status": str(case.status),
        "metrics": case.metrics,
        "tolerance": case.tolerance,
        "tolerances": report.get("tolerances"),
        "device": case.device or report.get("device"),
        "device_name": report.get("device_name"),
        "torch": case.torch or report.get("torch"),
        "ikdata_version": report.get("ikdata_version"),
        "input_digests": case.input_digests,
        "expected_digests": case.expected_digests,
        "reference_digest": case.reference_digest,
        **{k: v for k, v in case.records.items() if k not in _VALIDATION_FIELDS and k in case_fields()},
        "finished_at": report.get("finished_at"),
        "report": f"{report_name}@{report_digest}" if report_name else None,
    }
    if seed:
        record["metrics"] = {"max_absolute_errors": case.max_absolute_errors}
        record["basis"] = "seed report: max_absolute_errors only, no digests of the judged bytes"
    return {k: v for k, v in record.items() if v is not None}


def _defined(validation: dict) -> dict:
    """An inherited validation with only the fields a validation or a report case defines: what an earlier
    import's receipt carries beyond them is not copied into DST."""
    allowed = set(_VALIDATION_FIELDS) | case_fields()
    return {k: v for k, v in validation.items() if k in allowed}


def _reference_reasons(case: Case, definition: Definition, where: str) -> list[str]:
    """A case is about this definition only if it was judged by its current reference (by digest).

    A case that names no reference digest (written by hand, or by an older ikdata) has nothing to
    compare; requiring one would stop no forger, who can write the current digest as easily: the
    re-judging (:mod:`ikdata.importing.rejudge`) is what checks a claim.
    """
    claimed, current = case.reference_digest, definition.reference_digest
    if claimed is None or claimed == current:
        return []
    return [f"{where}: case {case.uuid} was judged with reference {claimed}, but the reference of "
            f"{definition.name!r} is now {current}; replay it again"]


def _inherited(source: Source, uuid: str, row: dict, validation: dict) -> tuple[Case, Report, dict]:
    """A receipt's validation from an earlier import, as the case and report it was made from (its shared
    context merged back, :func:`ikdata.core.verdicts.expand_validation`), and as the dict it stays.

    Raises:
        RecordError: its shared context is missing or altered, or it is not a validation.
    """
    expanded = expand_validation(source.root, validation)
    case = Case.from_json({**expanded, "definition": row["definition"], "uuid": uuid},
                          path=source.where.get(uuid, str(source.named)), pointer="/validation")
    report = Report({"tolerances": expanded.get("tolerances") or {}, "device": expanded.get("device", ""),
                     "torch": expanded.get("torch", "")})
    return case, report, expanded


def _validation_for(source: Source, uuid: str, row: dict,
                    receipt: dict) -> tuple[dict | None, list[str], tuple[str, str | None] | None]:
    """The validation to attach, the reasons it cannot be trusted (empty: admitted), and the report
    case the reasons are about (file, pointer) when one is to blame rather than the row."""
    cases = source.cases.get(uuid)
    report = source.report
    inherited = None
    if not cases:
        if receipt.get("validation") is None:
            return None, ["the replay report has no case for it" if report else "SRC has no replay report"], None
        try:  # a validation that names its shared context (core.verdicts): read as if written whole
            case, report, inherited = _inherited(source, uuid, row, receipt["validation"])
        except RecordError as exc:
            return None, [f"{exc.path}: {str(exc).split(': ', 1)[-1]}"], None
        cases = [case]
        if str(inherited.get("basis", "")).startswith("seed report"):
            return None, ["its only validation is a seed report's, which a later import cannot recompute"], None
    reasons: list[str] = []
    at = None
    own = inherited is None  # else: the validation the seed's own import merged into its receipt
    seed = source.layout == SEED and all("metrics" not in c.order for c in cases)
    if own and not seed and report.get("format") != REPORT_FORMAT:
        return None, [f"the report {source.report_name or ''} has format {report.get('format')!r}; "
                      f"ikdata reads {REPORT_FORMAT!r} reports only"], None
    definition = source.definitions[row["definition"]]
    for number, case in enumerate(cases):
        if case.definition != row["definition"]:
            reasons.append(f"the case is for definition {case.definition!r}, not {row['definition']!r}")
        if seed:
            reasons += _seed_reasons(case, report, row, receipt)
            continue
        pointer = f"/cases/{source.case_numbers[uuid][number]}" if own and uuid in source.case_numbers else None
        where = f"{source.report_name}#{pointer}" if pointer else \
            f"its receipt's validation (from {inherited.get('report') or 'an earlier import'})"
        stale = _reference_reasons(case, definition, where)
        if stale:  # judged by another reference: the verdict is not about this definition at all
            reasons += stale
            at = at or ((source.report_name, pointer) if pointer else None)
            continue
        reasons += (recheck(case, report, definition=_trusted(source, row["definition"]))
                    or _digest_reasons(case, row, receipt))
    if reasons:
        return None, reasons, at
    record = _defined(inherited) if not own and not seed else validation_record(  # seed verdicts keep their "basis" marker
        cases[-1], report, report_name=source.report_name if own else None,
        report_digest=source.report_digest if own else None, seed=seed)
    return record, [], None


def _claim_reasons(source: Source, definition: Definition, validation: dict, *, trust: Sequence[str]) -> list[str]:
    """Why a verdict SRC's report claims cannot be re-judged here (empty: it can, and will be).

    Re-judging runs the definition's reference, which only a trusted definition may do (contract 6);
    a case a family judges over a whole run (a denoiser step judged by its trajectory, whose record travels
    in the validation) is re-judged by replaying that run (:mod:`ikdata.importing.rejudge`), which runs the
    same trusted references.
    """
    from ikdata.judging.families import vouched

    if not is_trusted(definition, digests=frozenset(trust), trusted=source.trusted) and not vouched(definition):
        return [f"SRC's report claims a pass that cannot be re-judged here: the reference of "
                f"{definition.name!r} (definition digest {definition.digest}) is not trusted, so it does not "
                f"run; name its folder with --definitions DIR, trust it with --trust {definition.digest}, or "
                "accept SRC's reports with --trust-reports"]
    return []


def plan_import(src: str | os.PathLike, dst: str | os.PathLike, *, only_passed: bool = False,
                definitions: Sequence[str | os.PathLike] = (), keep_random: bool = False,
                hop: dict | None = None, progress: ProgressCallback | None = None, trust_reports: bool = False,
                trust: Sequence[str] = ()) -> ImportPlan:
    """Decide everything an import does, reading SRC and DST only.

    ``hop`` (``how``, ``source``, ``at``) is recorded, with SRC's id as ``from``, in each new
    receipt's ``imports``. ``progress`` is called as the blobs DST lacks are rehashed ("rehash").
    A verdict admitted on SRC's word is listed in ``plan.claims`` for re-judging
    (:mod:`ikdata.importing.rejudge`); one that cannot be re-judged (an untrusted reference, a
    trajectory) is refused unless ``trust_reports``. ``trust``: definition digests the user trusts.

    Raises:
        ProblemsFound: SRC is unreadable or inconsistent (bad records, a stale manifest,
            a corrupt blob).
        MergeConflict: never; conflicts are collected in ``plan.conflicts`` so a dry run
            can show them. :func:`ikdata.importing.apply.import_dataset` raises them.
    """
    dst = Path(dst)
    dst_rows, dst_receipts, dst_defs, dst_uuids = _read_dst(dst, wanted=_uuids_named(src))
    source = read_source(src, definitions=definitions, keep_random=keep_random,
                         known={uuid: raw for uuid, (raw, _) in dst_rows.items()}, known_receipts=dst_receipts)
    if source.layout == "ikdata":
        if _stale_outside_reports(source.root, source.built):
            source.problems.append(Problem(f"{source.root}/ikdata.json" if source.staged_from is None
                                           else str(source.named), "the manifest disagrees with the files; run "
                                           f"'ikdata validate {source.named}' to see how", code="manifest"))
    for uuid, receipt in source.receipts.items():
        if uuid not in source.rows and uuid not in source.held and not any(x.uuid == uuid for x in source.left_out):
            source.problems.append(Problem(str(source.named), f"receipt {uuid} names no workload row", code="receipt"))
    if source.problems:
        raise ProblemsFound(source.problems, f"{source.named}: cannot import, SRC has {len(source.problems)} "
                            f"problem(s); fix them, then run 'ikdata validate {source.named}'")
    plan = ImportPlan(source, dst, left_out=list(source.left_out), trust_reports=trust_reports)
    plan.dst_parents = [p["id"] for p in (_manifest_or_empty(dst).get("parents") or [])]
    import_hop = {"source": str(source.root), "how": "import", "at": 0.0, **(hop or {}), "from": source.dataset_id}

    plan.skipped.extend(source.held)
    for name in sorted(source.held_definitions & set(source.definitions)):
        _definition_target(source.definitions[name], dst_defs, plan)  # a changed definition is a conflict
    for uuid in source.held:
        receipt = source.receipts.get(uuid)
        if receipt is not None and uuid in dst_receipts and _normal(dst_receipts[uuid]) != receipt["expected_output"]:
            plan.conflicts.append(f"uuid {uuid}: SRC and DST receipts name different expected outputs")
            plan.conflict_paths.append(RECEIPTS)
    for uuid, row in source.rows.items():
        receipt = source.receipts.get(uuid)
        if uuid in dst_rows:
            held, where = dst_rows[uuid]
            if held != row and WorkloadRow.from_dict(held).to_dict() != row:
                plan.conflicts.append(f"uuid {uuid}: SRC {source.where[uuid]} and DST {where} hold different rows")
                plan.conflict_paths.append(where.rsplit(":", 1)[0])
                continue
            old = dst_receipts.get(uuid)
            if receipt is not None and old is not None and _normal(old) != receipt.get("expected_output"):
                plan.conflicts.append(f"uuid {uuid}: SRC and DST receipts name different expected outputs")
                plan.conflict_paths.append(RECEIPTS)
                continue
            plan.skipped.append(uuid)
            continue
        new_receipt = None
        claimed = False
        if receipt is not None:
            new_receipt = {k: v for k, v in receipt.items() if k not in ("validation", "imports")}
            if receipt.get("unverified"):  # capture could not vouch for its inputs (docs/capture.md)
                why = receipt["unverified"]
                (plan.left_out if only_passed else plan.refused).append(LeftOut(
                    uuid, row["definition"], "its capture is unverified: "
                    f"{why.get('reason') if isinstance(why, dict) else why}; capture it again"))
                continue
            if receipt["expected_output"]:
                validation, reasons, at = _validation_for(source, uuid, row, receipt)
                code = "unvalidated"
                if not reasons and not trust_reports:
                    reasons = _claim_reasons(source, source.definitions[row["definition"]], validation,
                                             trust=trust)
                    code = CANNOT_REJUDGE
                if reasons:
                    (plan.left_out if only_passed else plan.refused).append(
                        LeftOut(uuid, row["definition"], "; ".join(reasons), *(at or (None, None)), code=code))
                    continue
                claimed = True
                # what it shares with the others of its report is stored once (core.verdicts)
                new_receipt["validation"], shared, data = share_validation(validation)
                if not (dst / shared).is_file():
                    plan.shared.setdefault(shared, data)
            new_receipt["imports"] = list(receipt.get("imports") or []) + [dict(import_hop)]
        defn = source.definitions[row["definition"]]
        target = _definition_target(defn, dst_defs, plan)
        if target is None:
            continue
        plan.rows.setdefault(workloads_relpath(defn.name, target), []).append(row)
        if new_receipt is not None:
            plan.receipts.append(new_receipt)
        if claimed:
            plan.claims.append(uuid)
        plan.added.append(uuid)
    for name in sorted(getattr(source, "definitions_alone", ())):  # a FlashInfer definitions folder: its definitions
        _definition_target(source.definitions[name], dst_defs, plan)
    if source.layout == "ikdata":  # trajectories and models ride with the workloads they tie together
        plan.carried = plan_carried(Path(source.root), dst, set(plan.added) | set(plan.skipped) | dst_uuids)
        if plan.carried.problems:
            raise ProblemsFound(plan.carried.problems, f"{source.named}: cannot import, SRC has "
                                f"{len(plan.carried.problems)} problem(s) in the records it carries")
        plan.conflicts += plan.carried.conflicts
        plan.left_out += [LeftOut(*entry) for entry in plan.carried.left_out]
    _plan_blobs(plan, dst, progress)
    check_against_blobs(plan, dst)  # what validate checks: shapes by axes, metrics by the bytes
    return plan


def _definition_target(defn: Definition, dst_defs: dict[str, Definition], plan: ImportPlan) -> str | None:
    """The op_type folder DST keeps this definition in; records a conflict or a new file."""
    held = dst_defs.get(defn.name)
    if held is None:
        path = definition_relpath(defn)
        if path not in plan.definitions:
            plan.definitions[path] = definition_bytes(defn.record)  # declared order, as flashinfer-bench reads it
        return defn.op_type
    if held.digest != defn.digest:
        message = (f"definition {defn.name!r}: SRC {defn.source or 'definitions'} differs from DST {held.source}; "
                   "rename one of them or reconcile them")
        if message not in plan.conflicts:
            plan.conflicts.append(message)
            plan.conflict_paths.append(held.source)
        return None
    return held.op_type


def _plan_blobs(plan: ImportPlan, dst: Path, progress: ProgressCallback | None = None) -> None:
    """Every blob the new rows and receipts need: present in DST, or rehashed and brought in."""
    store = BlobStore(dst)
    records = [row for rows in plan.rows.values() for row in rows] + plan.receipts
    needed = {digest_from_path(path) for record in records for path in blob_paths(record)}
    for path in sorted(plan.carried.blob_paths):  # a trajectory's or model's own tensors (final latents, weights)
        digest = digest_from_path(path)
        needed.add(digest)
        if digest not in plan.source.tensors:
            plan.source.tensors[digest] = TensorSource(Path(plan.source.root) / path, BLOB_KEY, True, None)
    unread = []
    for digest in sorted(needed):
        if store.has(digest):
            plan.blobs_present += 1  # neither copied nor rehashed
            continue
        tensor = plan.source.tensors[digest]
        plan.blobs[digest] = tensor
        if tensor.entry is None:
            unread.append(digest)
    problems = []
    paths = plan.source.paths or PathResolver(plan.source.root)
    if unread and (Path(plan.source.root) / "blob" / "packs").is_dir():  # SRC keeps some in packs
        unread = _plan_packed(plan, unread, paths, problems)
    for digest in list(unread):  # the path rule first: nothing outside SRC is read
        rel = os.path.relpath(plan.source.tensors[digest].path, plan.source.root).replace(os.sep, "/")
        refusal = paths.refusal(rel)
        if refusal is not None:
            problems.append(refusal.problem())
            unread.remove(digest)
    checks = rehash_files([plan.source.tensors[d].path for d in unread])
    for done, (digest, check) in enumerate(zip(unread, checks), 1):
        if progress:
            progress(Progress("rehash", done, len(unread)))
        rel = os.path.relpath(check.path, plan.source.root)
        if check.error:
            problems.append(Problem(rel, f"unreadable blob: {check.error}", code="bad-blob"))
        elif len(check.digests) != 1 or check.digests[0] != digest:
            problems.append(Problem(rel, f"content digest is {list(check.digests)}, but the file is named by "
                                    f"{digest}: the blob is corrupt; restore it from its source", code="digest-mismatch"))
        elif check.entries[0].key != plan.source.tensors[digest].tensor_key:
            problems.append(Problem(rel, f"holds tensor {check.entries[0].key!r}, but the workload names "
                                    f"{plan.source.tensors[digest].tensor_key!r}", code="missing-key"))
        else:
            tensor = plan.source.tensors[digest]
            canonical = tensor.canonical and canonical_problem(check.entries) is None  # else re-encoded
            plan.blobs[digest] = TensorSource(tensor.path, tensor.tensor_key, canonical, check.entries[0])
    if problems:
        raise ProblemsFound(problems, f"{plan.source.named}: {len(problems)} corrupt blob(s); nothing was imported")


def _plan_packed(plan: ImportPlan, unread: list[str], paths: PathResolver, problems: list[Problem]) -> list[str]:
    """Blobs SRC holds in packs (:mod:`ikdata.core.packs`), not loose: each packed tensor's slice is
    verified against its digest and copied out as a canonical loose blob; returns the digests left
    for the loose rehash."""
    from ikdata.core.errors import StoreError
    from ikdata.core.packs import cached_packs, read_packed
    from ikdata.core.safetensors_format import TensorEntry

    found = cached_packs(plan.source.root)
    problems += found.problems
    rest = []
    for digest in unread:
        tensor = plan.source.tensors[digest]
        blob = found.find(digest) if tensor.canonical and not tensor.path.is_file() else None
        if blob is None:
            rest.append(digest)
            continue
        refusal = paths.refusal(blob.pack)
        if refusal is not None:
            problems.append(refusal.problem())
            continue
        try:
            read_packed(plan.source.root, blob)
        except StoreError as exc:
            problems.append(Problem(blob.pack, str(exc).split(": ", 1)[-1], code="digest-mismatch"))
            continue
        entry = TensorEntry(blob.digest, blob.dtype, blob.shape, blob.offset, blob.offset + blob.length)
        plan.blobs[digest] = TensorSource(Path(plan.source.root) / blob.pack, blob.digest, False, entry)
    return rest


def _manifest_or_empty(dst: Path) -> dict:
    from ikdata.core.manifest import read

    return (read(dst) or {}) if dst.is_dir() else {}


def _normal(expected: dict) -> dict:
    """Expected outputs as ikdata writes descriptors (for comparing with a converted SRC receipt)."""
    return {k: {"type": "safetensors", "path": v["path"], "tensor_key": v["tensor_key"]}
            if v.get("type") == "safetensors" else v for k, v in expected.items()}


def _stale_outside_reports(root: Path, built: dict) -> bool:
    """SRC's manifest disagrees with its files other than reports (replay writes a report, not the manifest)."""
    from ikdata.core.manifest import read

    held = read(root)
    if held is None:
        return False
    held, built = dict(held), dict(built)
    for manifest in (held, built):
        manifest["files"] = {k: v for k, v in manifest["files"].items() if not k.startswith("reports/")}
    return held != built


def _uuids_named(src: str | os.PathLike) -> set[str] | None:
    """The uuids SRC's rows and receipts name, when SRC is an ikdata dataset (one cheap pass, nothing
    kept but the uuids); None for any other layout, whose uuids are known only once it is converted."""
    root = Path(src)
    if not root.is_dir() or find_layout(root) != IKDATA:
        return None
    ds = Dataset(root, IKDATA)
    uuids: set[str] = set()
    unreadable: list[Problem] = []  # read_source reports them, with the rest of SRC's problems
    for path in ds.workload_files() + ds.receipt_files():
        for _, record in jsonl.iter_records(path, unreadable):
            inner = record.get("workload") if isinstance(record, dict) else None
            uuid = (inner if isinstance(inner, dict) else record if isinstance(record, dict) else {}).get("uuid")
            if isinstance(uuid, str):
                uuids.add(uuid)
    return uuids


def _read_dst(dst: Path, *, wanted: set[str] | None = None) -> tuple[
        dict[str, tuple[dict, str]], dict[str, dict], dict[str, Definition], set[str]]:
    """DST's rows (uuid -> (row as written, file:line)), receipts' expected outputs, definitions, and every
    uuid it holds. Rows and receipts are streamed, and only those whose uuid is in ``wanted`` (SRC's, when
    known) are kept: importing 10,000 workloads into 10 million holds 10,000 rows, not 10 million."""
    rows: dict[str, tuple[dict, str]] = {}
    receipts: dict[str, dict] = {}
    uuids: set[str] = set()
    if not dst.is_dir():
        return rows, receipts, {}, uuids
    defs, _ = read_folder(dst / "definitions", origin=DATASET, display_root=dst) \
        if (dst / "definitions").is_dir() else ({}, [])
    ds = Dataset(dst, "ikdata")
    unreadable: list[Problem] = []  # DST's own torn lines are validate's and repair's to report
    for path in ds.workload_files():
        display = ds.rel(path)
        for line, record in jsonl.iter_records(path, unreadable, display=display):
            uuid = record["workload"]["uuid"]
            uuids.add(uuid)
            if (wanted is None or uuid in wanted) and uuid not in rows:
                rows[uuid] = (record, f"{display}:{line}")
    if (dst / RECEIPTS).is_file():
        for _, record in jsonl.iter_records(dst / RECEIPTS, unreadable):
            uuid = record["uuid"]
            if (wanted is None or uuid in wanted) and uuid not in receipts:
                receipts[uuid] = record.get("expected_output") or {}
    return rows, receipts, defs, uuids


def raise_refusals(plan: ImportPlan) -> None:
    """Raise what refuses the import: conflicts first (MergeConflict), then unvalidated workloads."""
    if plan.conflicts:
        shown = plan.conflicts[:20] + ([f"... and {len(plan.conflicts) - 20} more"] if len(plan.conflicts) > 20 else [])
        raise MergeConflict(f"{plan.source.named} -> {plan.dst}: {len(plan.conflicts)} conflict(s); nothing was "
                            "written:\n  " + "\n  ".join(shown), paths=plan.conflict_paths)
    if plan.refused:
        problems = [Problem(r.where or plan.source.where.get(r.uuid, str(plan.source.named)),
                            f"workload {r.uuid} ({r.definition}) is not validated: {r.reason}", code="unvalidated",
                            pointer=r.pointer)
                    for r in plan.refused if r.code != CANNOT_REJUDGE]
        claims: dict[tuple[str, str], list[str]] = {}  # one problem per definition: the reason is its own
        for r in plan.refused:
            if r.code == CANNOT_REJUDGE:
                claims.setdefault((r.definition, r.reason), []).append(r.uuid)
        for (name, reason), uuids in claims.items():
            defn = plan.source.definitions.get(name)
            shown = ", ".join(uuids[:3]) + (f" and {len(uuids) - 3} more" if len(uuids) > 3 else "")
            problems.append(Problem(defn.source if defn is not None and defn.source else str(plan.source.named),
                                    f"{len(uuids)} workload(s) of {name!r} ({shown}) are not validated: {reason}",
                                    code=CANNOT_REJUDGE))
        advice = ("; a report from elsewhere is a claim: name the definitions' folder with --definitions, "
                  "trust them with --trust DIGEST, or vouch for SRC's reports with --trust-reports") if claims else ""
        replay = ("its calls were replayed with their trusted references as it was read" if plan.source.staged_from
                  else "replay them ('ikdata replay SRC')")
        raise ProblemsFound(problems, f"{plan.source.named}: {len(plan.refused)} workload(s) are not validated, so "
                            f"nothing was imported; {replay}, or pass --only-passed "
                            f"to import the passing subset{advice}")
