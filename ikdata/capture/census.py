"""The census of one process: every op capture saw, how often, how much was recorded, and why not the rest.

Hooks call three counters on the program's own thread, each a dict increment under a lock:

    census.seen("aten::addmm")                                   # a call of the op ran
    census.recorded("aten::addmm", "dense_gemm_bias_f32_nt_n8_k4")  # it became a workload of that definition
    census.skipped("aten::addmm", "selection rule", "dense_gemm_bias_f32_nt_n8_k4")  # it did not, and why

and the boot says whether capture is on in the process (:func:`enabled`, :func:`not_enabled`) and which
``--adapter`` failed (:func:`adapter_failed`). At exit (:func:`write`, called by the boot after the final
flush) the process leaves one census record (``schemas/census.schema.json``); ``ikdata capture`` merges
them (:func:`summarise`) into one line a user reads, and keeps them in the dataset (``census/<run>.jsonl``)
so "nothing was missed" is a fact anyone holding the dataset can check.

A call seen but neither recorded nor skipped by a hook is counted under ``no definition``: the hook
looked at it and no definition describes that form.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

# Why a call was not recorded: the reasons capture itself gives (a hook may name others; the schema takes any).
REASONS = ("no definition", "selection rule", "budget", "dtype", "copy failed", "not selected", "step",
           "disabled", "write failed")
NO_DEFINITION = "no definition"
COMPILED = "compiled"  # a compiled region's calls: the ops inside are counted where taps or the dispatcher see them
EXPLAINED = {  # a reason in words, after a count of calls
    "no definition": "had no definition that describes them",
    "selection rule": "repeated a call already recorded (one per definition, request, step and shape)",
    "budget": "came after a cap was reached (--max-per-definition, --max-bytes)",
    "dtype": "had a dtype no definition takes",
    "copy failed": "could not be copied",
    "not selected": "were not selected (--only, or no request in flight)",
    "step": "ran outside the steps asked for (--steps)",
    "disabled": "came after capture of their definition stopped on a failure",
    "write failed": "could not be written",
    "compiled": "ran as compiled regions (torch.compile); the ops inside are named where capture saw them",
}
STATE_FILE = "census.jsonl"  # in a run's state folder: one line per process, read by ikdata capture
DATASET_DIR = "census"  # in the dataset: census/<run>.jsonl

_ARGV_KEPT = (16, 256)  # a process's argv kept in a summary: at most 16 arguments of 256 characters each

_LOCK = threading.Lock()
_SEEN: dict[str, int] = {}
_RECORDED: dict[tuple[str, str], int] = {}
_SKIPPED: dict[tuple[str, str, str | None], int] = {}
_STATE: dict[str, Any] = {"enabled": None, "reason": None, "adapters": {}, "written": None}


def seen(op: str, n: int = 1) -> None:
    """``n`` calls of ``op`` ran (``"aten::addmm"``, ``"_C::rms_norm"``, ``"torch.nn.functional.linear"``)."""
    with _LOCK:
        _SEEN[op] = _SEEN.get(op, 0) + n


def recorded(op: str, definition: str, n: int = 1) -> None:
    """``n`` calls of ``op`` were recorded as workloads of ``definition``."""
    key = (op, definition)
    with _LOCK:
        _RECORDED[key] = _RECORDED.get(key, 0) + n


def skipped(op: str, reason: str, definition: str | None = None, n: int = 1) -> None:
    """``n`` calls of ``op`` were not recorded, for ``reason`` (one of :data:`REASONS`, or a hook's own words:
    kept as given, never dropped); ``definition``: the one the call would have been recorded as, if known."""
    key = (op, reason, definition)
    with _LOCK:
        _SKIPPED[key] = _SKIPPED.get(key, 0) + n


def enabled() -> None:
    """Capture is on in this process."""
    _STATE["enabled"], _STATE["reason"] = True, None


def not_enabled(reason: str) -> None:
    """Capture could not be turned on in this process; ``reason`` says why (the exception, in words)."""
    _STATE["enabled"], _STATE["reason"] = False, reason


def adapter_failed(module: str, reason: str) -> None:
    """The ``--adapter`` module ``module`` could not be installed in this process."""
    _STATE["adapters"][module] = reason


def adapter_installed(module: str) -> None:
    """The ``--adapter`` module ``module`` is installed in this process."""
    _STATE["adapters"][module] = None


def reset() -> None:
    """Start empty (a forked child counts its own calls; tests)."""
    global _LOCK
    _LOCK = threading.Lock()  # a lock held by another thread at fork time stays held in the child
    _SEEN.clear()
    _RECORDED.clear()
    _SKIPPED.clear()
    _STATE["written"] = None


@dataclass(frozen=True)
class OpCount:
    """One op's line of a census: how often it ran, recorded per definition, skipped per reason."""

    op: str
    calls: int
    recorded: dict[str, int] = field(default_factory=dict)  # definition -> calls recorded
    skipped: tuple[tuple[str, str | None, int], ...] = ()  # (reason, definition or None, calls)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "calls": self.calls,
                "recorded": [{"definition": d, "calls": n} for d, n in sorted(self.recorded.items())],
                "skipped": [{"reason": r, "definition": d, "calls": n} for r, d, n in self.skipped]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpCount:
        return cls(data["op"], data["calls"], {r["definition"]: r["calls"] for r in data.get("recorded", [])},
                   tuple((s["reason"], s.get("definition"), s["calls"]) for s in data.get("skipped", [])))


def ops() -> list[OpCount]:
    """This process's counts so far, one :class:`OpCount` per op, calls not explained named ``no definition``."""
    with _LOCK:
        seen_now, rec_now, skip_now = dict(_SEEN), dict(_RECORDED), dict(_SKIPPED)
    names = set(seen_now) | {op for op, _ in rec_now} | {op for op, _, _ in skip_now}
    found = []
    for op in sorted(names):
        rec = {d: n for (o, d), n in rec_now.items() if o == op}
        skips = sorted(((r, d, n) for (o, r, d), n in skip_now.items() if o == op),
                       key=lambda s: (s[0], s[1] or ""))
        calls = max(seen_now.get(op, 0), sum(rec.values()) + sum(n for _, _, n in skips))
        rest = calls - sum(rec.values()) - sum(n for _, _, n in skips)
        if rest:
            skips.append((NO_DEFINITION, None, rest))
        found.append(OpCount(op, calls, rec, tuple(skips)))
    return found


def record(run: str | None = None) -> dict[str, Any]:
    """This process's census record (``schemas/census.schema.json``)."""
    import socket

    rank, world = _rank()
    return {"run": run, "pid": os.getpid(), "host": socket.gethostname(), "argv": [str(a) for a in sys.argv],
            "rank": rank, "world_size": world, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "torch": "torch" in sys.modules, "enabled": bool(_STATE["enabled"]), "reason": _STATE["reason"],
            "adapters": [{"module": m, "error": e} for m, e in sorted(_STATE["adapters"].items())],
            "ops": [o.to_json() for o in ops()]}


def _rank() -> tuple[int | None, int | None]:
    """The process's rank and world size: torch.distributed when initialised, else RANK/WORLD_SIZE."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001  a torn-down process group: fall back to the environment
        pass
    try:
        rank = int(os.environ["RANK"]) if "RANK" in os.environ else None
        world = int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else None
    except ValueError:
        return None, None
    return rank, world


def worth_writing() -> bool:
    """Whether this process has anything to report: it imported torch, tried to enable capture, or counted a call."""
    return "torch" in sys.modules or _STATE["enabled"] is not None or bool(_SEEN or _RECORDED or _SKIPPED)


def write(state_dir: str | None, into: str | None, run: str | None = None) -> Path | None:
    """Leave this process's census record, once per process; returns the file written to, or None.

    With a run's state folder (``ikdata capture``) the record is appended to ``STATE/census.jsonl`` and the
    runner moves it into the dataset. Without one (``IKDATA_CAPTURE`` set by hand) it goes straight into
    ``INTO/census/<host>-<pid>.jsonl``, when that dataset folder exists. Never raises (called at exit).
    """
    if _STATE["written"] == os.getpid() or not worth_writing():
        return None
    _STATE["written"] = os.getpid()
    try:
        import socket

        from ikdata.core import jsonl

        if state_dir:
            target = Path(state_dir) / STATE_FILE
        elif into and Path(into).is_dir():
            host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()).lstrip("._-")[:100] or "host"
            target = Path(into) / DATASET_DIR / f"{host}-{os.getpid()}.jsonl"  # a run's name: census/<run>.jsonl
            target.parent.mkdir(exist_ok=True)
        else:
            return None
        jsonl.append(str(target), [record(run)], fsync=not state_dir)
        return target
    except Exception as exc:  # noqa: BLE001  at exit: say so, never raise
        sys.stderr.write(f"ikdata capture [{os.getpid()}]: the census could not be written: {exc}\n")
        return None


def keep(root: str | os.PathLike, run: str, records: Iterable[dict[str, Any]]) -> Path:
    """Keep a run's census records (one line per process) in the dataset as ``census/<run>.jsonl``, atomically
    (written whole beside it, then renamed); the temp files a killed keeper left there go first (the one temp-file
    rule, :func:`ikdata.core.paths.sweep_temps`). Returns the file."""
    from ikdata.core import jsonl
    from ikdata.core.paths import sweep_temps
    from ikdata.core.store import write_atomic

    target = Path(root) / DATASET_DIR / f"{run}.jsonl"
    if target.parent.is_dir():
        sweep_temps(target.parent)
    write_atomic(target, (jsonl.dumps(r) + b"\n" for r in records))
    return target


def read(root: str | os.PathLike) -> tuple[list[dict[str, Any]], list[Any]]:
    """Every census record of a dataset (``census/<run>.jsonl``), each checked against its schema, as lists.

    Returns the valid records and the problems (malformed, torn or overlong lines, schema violations, files
    misnamed), each naming the file, line and JSON pointer. A dataset without ``census/`` has neither. For a
    large census use :func:`records` (streamed) and :func:`summarise` on it.
    """
    problems: list[Any] = []
    return list(records(root, problems)), problems


def records(root: str | os.PathLike, problems: list[Any], *, runs: Iterable[str] | None = None) -> Iterator[dict]:
    """The census records of a dataset, streamed one at a time (memory bounded by the longest line, itself
    capped: :data:`ikdata.core.record_checks.MAX_LINE_BYTES`); problems are appended to ``problems``.

    Without ``runs``: every file of the census (a file misnamed, in a subfolder or with a name that is not a
    run's, is a problem and is not read). With ``runs``: only ``census/<run>.jsonl`` of each run named, and in
    it only the records of that run: a file speaks for its own run, never for another, and nothing else
    (no process id or host) decides which records are a run's.
    """
    from ikdata.core.paths import PathResolver
    from ikdata.core.record_checks import checked_records, pattern_problem
    from ikdata.core.record_kinds import RUN_NAME  # a run's name, as census/<run>.jsonl and capture_run give it

    root = Path(root)
    folder = root / DATASET_DIR
    if not folder.is_dir():
        return
    resolver = PathResolver(root)
    if runs is None:
        chosen = [(path, None) for path in sorted(folder.rglob("*.jsonl"))]
    else:
        named = sorted({r for r in runs if isinstance(r, str) and re.fullmatch(RUN_NAME, r)})
        chosen = [(folder / f"{run}.jsonl", run) for run in named]
    for path, run in chosen:
        relative = path.relative_to(root).as_posix()
        misnamed = pattern_problem(relative)
        if misnamed is not None:
            problems.append(misnamed)
            continue
        if run is not None and not os.path.lexists(path):
            continue
        refusal = resolver.record_file_refusal(path)  # a link out of the dataset, a FIFO: never read
        if refusal is not None:
            problems.append(refusal.problem())
            continue
        for _, rec in checked_records("census", path, problems, display=relative, dataset=root):
            if run is None or rec.get("run") == run:
                yield rec


def of_runs(root: str | os.PathLike, runs: Iterable[str]) -> tuple[Summary, tuple[str, ...]]:
    """The census of the named capture runs merged (streamed: bounded memory whatever the census's size), and
    the runs that have records kept. Problems are left to validate."""
    runs = tuple(runs)
    found: set[str] = set()

    def taken() -> Iterator[dict]:
        for rec in records(root, [], runs=runs):
            found.add(rec["run"])
            yield rec

    summary = summarise(taken())
    return summary, tuple(sorted(found))


# -- merging the processes' records (ikdata capture) ----------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """The census of a whole run: every process's records merged.

    Attributes:
        processes: records read (one per process that imported torch or counted a call).
        ops: op -> merged :class:`OpCount`.
        not_enabled: (pid, host, argv, reason) of processes that imported torch and had capture off.
        adapter_failures: (pid, module, reason) of ``--adapter`` modules that failed to install.
    """

    processes: int
    ops: dict[str, OpCount]
    not_enabled: tuple[tuple[int, str, tuple[str, ...], str], ...] = ()
    adapter_failures: tuple[tuple[int, str, str], ...] = ()

    @property
    def calls(self) -> int:
        return sum(o.calls for o in self.ops.values())

    @property
    def recorded_calls(self) -> int:
        return sum(sum(o.recorded.values()) for o in self.ops.values())

    def definitions(self) -> set[str]:
        return {d for o in self.ops.values() for d in o.recorded}

    def by_reason(self) -> dict[str, dict[str, int]]:
        """reason -> op -> calls not recorded for it."""
        found: dict[str, dict[str, int]] = {}
        for o in self.ops.values():
            for reason, _, n in o.skipped:
                found.setdefault(reason, {})
                found[reason][o.op] = found[reason].get(o.op, 0) + n
        return found

    def lines(self, limit: int = 8) -> list[str]:
        """The summary in words: what ran, what was recorded, and per reason the ops not recorded (most first)."""
        n_defs = len(self.definitions())
        out = [f"ran {self.calls:,} call{'s' if self.calls != 1 else ''} of {len(self.ops)} op"
               f"{'s' if len(self.ops) != 1 else ''}; recorded {self.recorded_calls:,} call"
               f"{'s' if self.recorded_calls != 1 else ''} of {n_defs} definition{'s' if n_defs != 1 else ''}"]
        cut = False
        for reason, per_op in sorted(self.by_reason().items(), key=lambda kv: -sum(kv[1].values())):
            ranked = sorted(per_op.items(), key=lambda kv: (weight(kv[0]), -kv[1], kv[0]))  # what matters first
            shown = ", ".join(f"{op} x{n:,}" for op, n in ranked[:limit])
            more = f", and {len(ranked) - limit} more op(s)" if len(ranked) > limit else ""
            cut = cut or len(ranked) > limit
            out.append(f"not recorded, {reason}: {shown}{more}")
        if cut:
            out.append(f"every op and count ({len(self.ops)} ops): the dataset's census/*.jsonl, one record per process")
        on = self.processes - len(self.not_enabled)
        if self.processes == 1:
            out.append(f"1 process reported; capture was {'on' if on else 'off'} in it")
        elif self.processes:
            out.append(f"{self.processes} processes reported; capture was on in "
                       f"{'all of them' if on == self.processes else on}")
        return out

    def why_nothing(self) -> str:
        """Why a run recorded nothing, from the census, in one sentence."""
        if self.not_enabled:
            pid, _, argv, reason = self.not_enabled[0]
            return f"capture was not enabled in process {pid} ({' '.join(argv)[:80]}): {reason}"
        if not self.processes:
            return "no process of the command imported torch (capture starts when a Python process imports it)"
        if not self.ops:
            return "the program imported torch but ran no call capture looks at"
        reasons = self.by_reason()
        if not reasons:
            return "every call seen was recorded, yet no workload was written"
        parts = []
        for reason, per_op in sorted(reasons.items(), key=lambda kv: -sum(kv[1].values())):
            top = ", ".join(op for op, _ in sorted(per_op.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
            parts.append(f"{sum(per_op.values()):,} {EXPLAINED.get(reason, 'not recorded: ' + reason)} ({top})")
        return f"none of the {self.calls:,} calls seen was recorded: " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"processes": self.processes, "calls": self.calls, "recorded_calls": self.recorded_calls,
                "definitions": sorted(self.definitions()), "ops": [o.to_json() for o in self.ops.values()],
                "not_enabled": [{"pid": p, "host": h, "argv": list(a), "reason": r} for p, h, a, r in self.not_enabled],
                "adapter_failures": [{"pid": p, "module": m, "error": e} for p, m, e in self.adapter_failures]}


# Ops that move or describe data and compute nothing a kernel author would write: listed last.
NOISE = frozenset(f"aten::{name}" for name in (
    "view", "reshape", "_unsafe_view", "t", "transpose", "permute", "expand", "squeeze", "unsqueeze", "slice",
    "select", "detach", "alias", "as_strided", "contiguous", "clone", "copy_", "empty", "empty_like", "empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "fill_", "zero_", "split", "split_with_sizes", "chunk",
    "unbind", "lift_fresh", "_to_copy", "to", "flatten", "unflatten", "narrow", "new_empty", "new_zeros", "arange",
    "item", "_local_scalar_dense", "resolve_conj", "resolve_neg", "scalar_tensor", "lift_fresh_copy", "view_as",
    "expand_as", "_reshape_alias", "set_", "resize_", "split_with_sizes_copy", "index_select", "cat", "stack"))
# Words naming a kernel family: an op carrying one is listed before the rest.
FAMILIES = ("mm", "matmul", "linear", "conv", "norm", "attention", "sdpa", "softmax", "embedding", "gelu", "silu",
            "relu", "rotary", "rope", "quantized", "int8", "fp8", "moe", "topk", "sampl", "scaled", "einsum")


def weight(op: str) -> int:
    """How early a not-recorded op is listed: 0 for compiled regions, ops a template or a known kernel family
    describes and engines' own ops, 1 for the rest, 2 for view and copy noise (``aten::view``, ``aten::t``)."""
    if op in NOISE or op.startswith("profiler::"):
        return 2
    if op.startswith("compiled region") or not op.startswith(("aten::", "prims::")):
        return 0  # a compiled region, a patched function (torch.nn.functional.*), an engine's or a custom op
    name = op.split("::", 1)[1]
    return 0 if any(word in name for word in FAMILIES) else 1


def summarise(records: Iterable[dict[str, Any]]) -> Summary:
    """Merge census records (one per process) into a :class:`Summary`, one record at a time: ``records`` may be
    a stream (:func:`records`); what is kept grows with the ops and definitions seen, never with the lines read
    (a process with capture off keeps its first arguments only)."""
    merged: dict[str, dict[str, Any]] = {}
    off, adapters, count = [], [], 0
    for rec in records:
        count += 1
        if rec.get("torch") and not rec.get("enabled"):
            argv = tuple(str(a)[:_ARGV_KEPT[1]] for a in (rec.get("argv") or ())[:_ARGV_KEPT[0]])
            off.append((rec.get("pid", 0), rec.get("host", ""), argv,
                        rec.get("reason") or "no reason given"))
        adapters += [(rec.get("pid", 0), a["module"], a["error"]) for a in rec.get("adapters", []) if a.get("error")]
        for data in rec.get("ops", []):
            m = merged.setdefault(data["op"], {"calls": 0, "recorded": {}, "skipped": {}})
            m["calls"] += data["calls"]
            for r in data.get("recorded", []):
                m["recorded"][r["definition"]] = m["recorded"].get(r["definition"], 0) + r["calls"]
            for s in data.get("skipped", []):
                key = (s["reason"], s.get("definition"))
                m["skipped"][key] = m["skipped"].get(key, 0) + s["calls"]
    ops_found = {op: OpCount(op, m["calls"], m["recorded"],
                             tuple(sorted(((r, d, n) for (r, d), n in m["skipped"].items()),
                                          key=lambda s: (s[0], s[1] or ""))))
                 for op, m in sorted(merged.items())}
    return Summary(count, ops_found, tuple(off), tuple(adapters))


__all__ = ["REASONS", "NO_DEFINITION", "OpCount", "Summary", "adapter_failed", "adapter_installed", "enabled",
           "keep", "not_enabled", "of_runs", "ops", "read", "record", "records", "recorded", "reset", "seen", "skipped", "summarise", "write"]
