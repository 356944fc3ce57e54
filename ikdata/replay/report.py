"""The replay report: schema-checked, each case committed atomically as it is judged, resumable, combinable.

The report is one JSON document (``schemas/report.schema.json``, the contract in ``docs/replay.md``); this
module is where it is read and written as JSON. Everything else takes the typed report
(:mod:`ikdata.core.cases`): a case is recorded as a :class:`Case` (:meth:`ReportFile.add`), a family decides
over the report so far as a :class:`Report` (:meth:`ReportFile.typed`, :meth:`ReportFile.set_groups`), and
shards are joined as Reports (:func:`combine_reports`). While a replay runs, cases are journaled beside the
report (:class:`ReportFile`). Cases end up sorted by (definition, uuid), so a sharded run's combined report
equals an unsharded one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson

from ikdata.core import jsonl, schema
from ikdata.core.errors import RecordError, UsageError
from ikdata.core.store import write_atomic
from ikdata.core.cases import Case, Group, Report, bound_problems, read_report

FORMAT = "ikdata-replay/1"
SEED_BESIDE = "results/ikdata-replay.json"  # ikdata's report in the seed layout, beside the seed's results/replay.json
TIMING_FIELDS = ("started_at", "finished_at")  # what differs between two identical runs (with cases' "seconds")
_MUST_AGREE = ("format", "torch", "ikdata_version", "device", "comparison", "tolerances")


def case_order(case: Mapping[str, Any]) -> tuple[str, str]:
    return (str(case.get("definition")), str(case.get("uuid")))


def header(*, device: str, device_name: str | None, torch_version: str, tolerances: Mapping[str, Any],
           shard: str | None) -> dict[str, Any]:
    """A new report without cases."""
    from ikdata._version import __version__

    return {"format": FORMAT, "torch": torch_version, "ikdata_version": __version__, "device": device,
            "device_name": device_name, "comparison": "all output elements", "tolerances": dict(tolerances),
            "shard": shard, "started_at": time.time(), "finished_at": None, "refused": [], "cases": []}


def default_path(ds: Any, shard: str | None = None) -> Path:
    """Where a replay of ``ds`` writes its report unless told otherwise.

    ``reports/replay.json`` in ikdata's layout. In the seed capture script's layout the
    ``results/replay.json`` there is that script's verdict: ikdata writes
    ``results/ikdata-replay.json`` beside it and leaves it as it is. A shard (``"I-of-N"``)
    writes ``replay-shard-I-of-N.json`` in the same folder.
    """
    path = ds.root / SEED_BESIDE if ds.layout == "seed" else Path(ds.report_path)
    return path if shard is None else path.with_name(f"replay-shard-{shard}.json")


def _refuse_foreign(path: Path) -> None:
    """Raise UsageError when ``path`` holds a file ikdata did not write (ikdata never replaces one)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the report there ({exc.strerror or exc})") from exc
    if b'"format"' in head and FORMAT.encode() in head:
        return
    try:
        found = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        found = None
    if isinstance(found, dict) and found.get("format") == FORMAT:
        return
    raise UsageError(f"{path} was not written by ikdata (no \"format\": \"{FORMAT}\"); ikdata never replaces a "
                     "file it did not write. Pass --report with another path, or move that file away")


def check_case(case: Any, *, path: str = "<case>") -> None:
    """Raise RecordError if a case does not fit the report schema."""
    if not isinstance(case, Mapping):
        raise RecordError(f"a case must be a JSON object, got {type(case).__name__}", path=path)
    wrapper = {"torch": "", "device": "", "tolerances": {}, "cases": [dict(case)]}
    problems = bound_problems(wrapper, path=path) or schema.check("report", wrapper, path=path)
    if problems:
        raise RecordError("; ".join(f"{p.pointer}: {p.message}" for p in problems), path=path)


def load(path: str | os.PathLike) -> dict[str, Any]:
    """Read and schema-check a report (ikdata's or the seed's), as its JSON document.

    Raises:
        RecordError: the file is missing, not JSON or does not fit ``report.schema.json``, located
            (:func:`ikdata.core.cases.read_report`, the one reader).
    """
    return read_report(path).to_json()


def journal_path(path: str | os.PathLike) -> Path:
    """The journal beside a report: ``replay.json`` -> ``replay.json.journal``."""
    path = Path(path)
    return path.with_name(path.name + ".journal")


def load_partial(path: str | os.PathLike) -> dict[str, Any]:
    """A report as a killed replay left it: the report file plus the cases its journal holds.

    Raises:
        RecordError: the report is not a valid report.
    """
    report = load(path)
    journal = journal_path(path)
    if journal.is_file():
        known = {c["uuid"]: i for i, c in enumerate(report["cases"])}
        for _, case in jsonl.read(journal).records:  # a torn last line (killed mid-write) is skipped
            try:
                check_case(case, path=str(journal))
            except RecordError:
                continue
            if case["uuid"] in known:
                report["cases"][known[case["uuid"]]] = case
            else:
                known[case["uuid"]] = len(report["cases"])
                report["cases"].append(case)
    return report


class ReportFile:
    """A report being written, each case committed atomically as it is judged.

    Every :meth:`add` appends the case to the journal beside the report
    (``replay.json.journal``: one whole line in one locked write, so a killed
    replay never leaves half a case). The report itself is rewritten atomically
    (temp file, fsync, rename) when the run starts, at least every
    ``REWRITE_EVERY`` seconds, and at :meth:`finish`, which also removes the
    journal. Rewriting the whole report after each case instead costs O(cases)
    per case: 8 ms per case at 1,000 cases, more than a small case's replay.
    :func:`load_partial` (used by ``--resume``) reads the report and its journal.

    Example:
        >>> out = ReportFile(path, header(device="cpu", ...))
        >>> out.add(case)       # the journal holds the case
        >>> out.finish()        # the report holds every case, the journal is gone
    """

    REWRITE_EVERY = 2.0

    def __init__(self, path: str | os.PathLike, report: dict[str, Any]) -> None:
        self.path = Path(path)
        self.journal = journal_path(self.path)
        self.report = report
        self.by_uuid = {c["uuid"]: c for c in report["cases"]}
        self._written_at = 0.0

    @classmethod
    def start(cls, path: str | os.PathLike, fresh: dict[str, Any]) -> ReportFile:
        """Begin a new report at ``path``, replacing any report and journal there."""
        _refuse_foreign(Path(path))
        out = cls(path, fresh)
        out.journal.unlink(missing_ok=True)
        out.write()
        return out

    @classmethod
    def resume(cls, path: str | os.PathLike, fresh: dict[str, Any]) -> ReportFile:
        """Continue the report at ``path`` (and its journal) if written under the same conditions as ``fresh``.

        Raises:
            UsageError: it was written on another device, torch, ikdata, tolerance table or shard.
            RecordError: it is not a valid report.
        """
        path = Path(path)
        if not path.exists():
            return cls.start(path, fresh)
        _refuse_foreign(path)
        old = load_partial(path)
        for key in (*_MUST_AGREE, "shard"):
            if old.get(key) != fresh.get(key):
                raise UsageError(f"{path}: cannot resume: the report has {key} = {old.get(key)!r}, this run "
                                 f"{fresh.get(key)!r}. Rerun without --resume (or with --report elsewhere).")
        old["finished_at"] = None
        old.setdefault("refused", [])
        out = cls(path, old)
        out.write()
        return out

    def add(self, case: Case | Mapping[str, Any]) -> dict[str, Any]:
        """Record one case (replacing an earlier one of the same uuid): journal it, rewrite the report when due.

        Returns the case as the report holds it (its JSON object)."""
        case = case.to_json() if isinstance(case, Case) else dict(case)
        if case["uuid"] in self.by_uuid:
            cases = self.report["cases"]
            cases[:] = [c for c in cases if c["uuid"] != case["uuid"]]
        self.report["cases"].append(case)
        self.by_uuid[case["uuid"]] = case
        jsonl.append(self.journal, [case], fsync=False)
        if time.monotonic() - self._written_at >= self.REWRITE_EVERY:
            self.write()
        return case

    def typed(self) -> Report:
        """The report so far as a :class:`Report` (what a family's ``finish`` decides over)."""
        return Report.from_json(self.report, path=str(self.path))

    def set_groups(self, family: str, groups: Iterable[Group]) -> None:
        """Record ``family``'s group verdicts (the report's list named as the family), written with the report."""
        self.report[family] = [group.to_json() for group in groups]

    def write(self) -> None:
        """Replace the report with its current state (atomic and durable), then empty the journal."""
        write_atomic(self.path, [orjson.dumps(self.report, option=orjson.OPT_INDENT_2), b"\n"])
        if self.journal.exists():
            os.truncate(self.journal, 0)  # every journaled case is in the report now
        self._written_at = time.monotonic()

    def finish(self, refused: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """Sort the cases, record refusals and the end time, schema-check the whole report, write it.

        Raises:
            RecordError: the report does not fit ``report.schema.json`` (a bug in ikdata, not in the data).
        """
        self.report["cases"].sort(key=case_order)
        self.report["refused"] = sorted((dict(r) for r in refused), key=lambda r: r["definition"])
        self.report["finished_at"] = time.time()
        problems = schema.check("report", self.report, path=str(self.path))
        if problems:
            raise RecordError("; ".join(str(p) for p in problems), path=str(self.path))
        self.write()
        self.journal.unlink(missing_ok=True)
        return self.report


def combine(reports: Iterable[Report | Mapping[str, Any]], *, names: Iterable[str] | None = None) -> dict[str, Any]:
    """Combine the reports of the shards ``1/N`` .. ``N/N`` of one replay into one report, as its JSON document
    (:func:`combine_reports` for Reports; JSON documents are read as Reports first).

    Raises:
        UsageError: as :func:`combine_reports`.
        RecordError: a JSON document that is not a report.
    """
    reports = [Report.of(r, path=f"report {i + 1}") for i, r in enumerate(reports)]
    return combine_reports(reports, names=names).to_json()


def combine_reports(reports: Iterable[Report], *, names: Iterable[str] | None = None) -> Report:
    """Combine the reports of the shards ``1/N`` .. ``N/N`` of one replay into one report.

    The result equals the report of an unsharded run, except for the timings
    and a ``"shards"`` list naming what was combined.

    Raises:
        UsageError: the reports disagree on device, torch, ikdata or tolerances, a shard is
            missing or given twice, or two shards judged the same workload.
    """
    reports = list(reports)
    names = list(names) if names is not None else [f"report {i + 1}" for i in range(len(reports))]
    if not reports:
        raise UsageError("name at least one shard report to combine")
    first = reports[0]
    for name, report in zip(names, reports):
        for key in _MUST_AGREE:
            if report.get(key) != first.get(key):
                raise UsageError(f"{name}: {key} is {report.get(key)!r}, but {names[0]} has {first.get(key)!r}; "
                                 "only shards of one replay combine")
    shards = [r.get("shard") for r in reports]
    if any(s is None for s in shards):
        raise UsageError(f"{names[shards.index(None)]} is not a shard report (its 'shard' is null)")
    totals = {int(s.split("/")[1]) for s in shards}
    if len(totals) != 1:
        raise UsageError(f"the reports come from different shard counts: {sorted(set(shards))}")
    total = totals.pop()
    wanted = [f"{i}/{total}" for i in range(1, total + 1)]
    duplicated = sorted({s for s in shards if shards.count(s) > 1})
    missing = [s for s in wanted if s not in shards]
    if duplicated or missing:
        raise UsageError(f"cannot combine: shards missing {missing}, given twice {duplicated}; "
                         f"pass exactly one report per shard {wanted[0]} .. {wanted[-1]}")
    seen: dict[str, str] = {}
    cases: list[Case] = []
    for name, report in zip(names, reports):
        for case in report.cases:
            if case.uuid in seen:
                raise UsageError(f"workload {case.uuid} is in both {seen[case.uuid]} and {name}; the shards overlap")
            seen[case.uuid] = name
            cases.append(case)
    refused: dict[str, dict] = {}
    for report in reports:
        for entry in report.get("refused") or []:
            known = refused.setdefault(entry["definition"], dict(entry, workloads=0))
            known["workloads"] += entry.get("workloads", 0)
    starts = [r.get("started_at") for r in reports if r.get("started_at") is not None]
    ends = [r.get("finished_at") for r in reports if r.get("finished_at") is not None]
    header = {k: v for k, v in first.header.items() if k != "refused"}
    header.update(shard=None, shards=sorted(shards, key=lambda s: int(s.split("/")[0])),
                  started_at=min(starts) if starts else None,
                  finished_at=max(ends) if len(ends) == len(reports) else None,
                  refused=sorted(refused.values(), key=lambda r: r["definition"]))
    order = (*(k for k in first.order if k not in ("cases", "refused")), *(k for k in header if k not in first.order),
             "refused", "cases")
    combined = Report(header, tuple(sorted(cases, key=_case_key)), first.groups, tuple(dict.fromkeys(order)))
    from ikdata.judging import families  # groups (sampling definitions, trajectories) span the shards

    return families.regroup_all(combined)


def _case_key(case: Case) -> tuple[str, str]:
    return (case.definition, case.uuid)


def write(path: str | os.PathLike, report: Mapping[str, Any]) -> None:
    """Schema-check a whole report and write it atomically (never over a file ikdata did not write)."""
    _refuse_foreign(Path(path))
    problems = schema.check("report", dict(report), path=str(path))
    if problems:
        raise RecordError("; ".join(str(p) for p in problems), path=str(path))
    write_atomic(Path(path), [orjson.dumps(dict(report), option=orjson.OPT_INDENT_2), b"\n"])


__all__ = ["FORMAT", "ReportFile", "SEED_BESIDE", "TIMING_FIELDS", "case_order", "check_case", "combine", "combine_reports",
           "default_path", "header", "journal_path", "load", "load_partial", "write"]
