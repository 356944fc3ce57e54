"""End-to-end census of FlashInfer's templates: one honest engine per template, recorded, imported, replayed, validated.

For every installed TraceTemplate with a ``reference`` and an ``init``, an honest CPU engine
(``tools/flashinfer_engines.py``: the API's parameter names, the reference's outputs) is called once
under FlashInfer's own flight recorder in a child process; the dump folder is imported into one
dataset with ``--only-passed`` (import replays each call with its trusted reference and judges it);
the dataset is then validated (``validate --deep``) and replayed again (the definitions must stay
trusted after import). A template *works end to end* when its call was recorded, imported as a
passing workload, validated and replayed passing. Every other template is listed with the first
stage it did not pass and why.

    python tools/flashinfer_census.py OUT [--only SUBSTRING] [--seconds 20] [--markdown]

OUT/census.json holds every template's row; --markdown prints the table of docs/flashinfer.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS.parent))
sys.path.insert(0, str(TOOLS))


def _engine_name(index: int, attr: str) -> str:
    return f"t{index:03d}_" + re.sub(r"[^A-Za-z0-9_]", "_", attr.removesuffix("_trace"))[:60]


def _api_of(ref) -> str | None:
    """The one FlashInfer API (``module.function``) whose decorator traces with this template, or None."""
    import flashinfer_engines

    return flashinfer_engines.api_of(ref.template)


def _sampler_values(t, api: str, sampling, kernels) -> dict | None:
    """Arguments for FlashInfer's own sampling API ``api`` (run on the CPU kernel twin of
    tools/flashinfer_samplers.py): the template's init at 512 rows of a 64-token vocabulary, so its draws can
    be judged. None for a template that is not a sampler with such an API."""
    import inspect

    name = api.rpartition(".")[2]
    if list(t.outputs) != ["samples"] or not hasattr(sampling, name) or not hasattr(kernels, name.replace(
            "top_k_top_p_sampling_from_logits", "top_k_top_p_sampling_from_probs")):
        return None
    accepted = inspect.signature(t.init).parameters
    sizes = {k: v for k, v in (("batch_size", 512), ("vocab_size", 64)) if k in accepted}
    return t.init(device="cpu", seed=1, **sizes)


def _child(out: Path, only: str | None, seconds: int) -> None:
    """Call each template's honest engine once under the recorder; write one line per template to engines.jsonl."""
    import torch

    import flashinfer_engines
    import flashinfer_samplers
    from ikdata.flashinfer import loader

    api = loader.submodule("api_logging")
    sampling = flashinfer_samplers.install()  # FlashInfer's own sampling APIs, on a CPU twin of their kernels
    dumps = Path(os.environ["FLASHINFER_DUMP_DIR"])

    def slow(signum, frame):  # noqa: ARG001
        raise TimeoutError

    signal.signal(signal.SIGALRM, slow)
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (6 << 30, hard))
    with (out / "engines.jsonl").open("w") as log:
        for index, ref in enumerate(loader.templates()):
            if only and only not in ref.key:
                continue
            t = ref.template
            row = {"key": ref.key, "op_type": t.op_type, "engine": _engine_name(index, ref.attr)}
            if t.reference is None:
                row["stage"], row["why"] = "no reference", "the template has no reference: nothing to judge with"
            elif t.init is None and flashinfer_engines.cpu_init(ref.key) is None:
                row["stage"], row["why"] = "no init", "the template has no init: no inputs to call an engine with"
            else:
                fi_api = _api_of(ref)  # before the alarm: the first call reads every API's templates
                signal.alarm(seconds)
                before = set(os.listdir(dumps)) if dumps.is_dir() else set()
                try:
                    values = _sampler_values(t, fi_api, sampling, flashinfer_samplers.CpuKernels) \
                        if fi_api and t.init is not None else None
                    if values is not None:  # a sampler: FlashInfer's own API draws, on the CPU kernel twin
                        row["api"] = fi_api
                        with torch.no_grad():
                            getattr(sampling, fi_api.rpartition(".")[2])(**values)
                    else:
                        twin = flashinfer_engines.cpu_init(ref.key) if t.init is None else None
                        values = twin(1) if twin else flashinfer_engines.call_values(
                            t, flashinfer_engines.EngineCall("", "", sizes=flashinfer_engines.small_sizes(ref.key)))
                        if twin:
                            row["init"] = "CPU twin (tools/flashinfer_engines.py)"
                        if not isinstance(values, dict) or "run" in values and "plan" in values:
                            raise TypeError("init builds a wrapper's plan/run, not one call")
                        function = flashinfer_engines.engine(row["engine"], t, list(values))
                        if fi_api:  # named as the API it stands for: the API's decorator names its template
                            flashinfer_engines.as_api(function, fi_api)
                            row["api"] = fi_api
                        engine = api.flashinfer_api(trace=t)(function)
                        # each tensor its own memory: the recorder's safetensors refuses two arguments sharing it
                        # (trtllm_fmha_v2_prefill's init passes one tensor as cum_seq_lens_q and _kv)
                        values = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in values.items()}
                        with torch.no_grad():
                            engine(**values)
                    row["stage"] = "called"
                    try:  # the definition name the call renders, to find its workloads after import
                        row["definition"] = t.build_fi_trace_fn("census")(**values)["name"]
                    except Exception:  # noqa: BLE001  import says why it cannot render it
                        pass
                except TimeoutError:
                    row["stage"], row["why"] = "engine", f"init or reference slower than {seconds} s on this CPU"
                except MemoryError:
                    row["stage"], row["why"] = "engine", "init or reference too large for this census (6 GiB)"
                except Exception as exc:  # noqa: BLE001  counted with its reason
                    text = " ".join(str(exc).split())[:160]
                    row["stage"], row["why"] = "engine", f"the engine fails on CPU: {type(exc).__name__}: {text}"
                finally:
                    signal.alarm(0)
                    row["folders"] = sorted(n for n in (set(os.listdir(dumps)) if dumps.is_dir() else set()) - before
                                            if "_call" in n)
            log.write(json.dumps(row) + "\n")
            log.flush()


def run(out: Path, only: str | None = None, seconds: int = 20) -> dict:
    """The census under ``out``: record, import, validate, replay; returns (and writes) the rows."""
    from ikdata.core.errors import IkdataError
    from ikdata.importing.apply import import_dataset

    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    env = {**os.environ, "FLASHINFER_LOGLEVEL": "10", "FLASHINFER_DUMP_DIR": str(out / "dumps"),
           "FLASHINFER_LOGDEST": str(out / "recorder.log"), "FLASHINFER_DUMP_SAFETENSORS": "1",
           "PYTHONWARNINGS": "ignore"}
    env.pop("FLASHINFER_TRACE_DUMP_DIR", None)
    child = [sys.executable, __file__, str(out), "--child", "--seconds", str(seconds)]
    child += ["--only", only] if only else []
    subprocess.run(child, env=env, check=True, stdout=subprocess.DEVNULL)
    rows = {r["engine"]: r for r in map(json.loads, (out / "engines.jsonl").read_text().splitlines())}
    FOLDERS.clear()
    FOLDERS.update({folder: engine for engine, row in rows.items() for folder in row.get("folders") or ()})
    by_engine = _diagnose(out, rows)  # why each call was left out, or its replay's error, in full
    dataset = out / "dataset"
    result = None
    for _ in range(3):  # a problem that refuses the whole import: its calls are set aside and the rest imported
        try:
            result = import_dataset(str(out / "dumps"), str(dataset), only_passed=True)
            break
        except IkdataError as exc:
            refused = _set_aside(out, rows, exc, by_engine)
            print(f"import: {exc}", file=sys.stderr)
            if not refused:
                break
    for item in result.left_out if result is not None else ():
        engine = _engine_of(item.uuid) or _engine_of_definition(dataset, item.definition, rows)
        if engine:
            by_engine.setdefault(engine, f"{'replay' if item.uuid and '-' in item.uuid else 'import'}: "
                                         f"{' '.join(item.reason.split())[:200]}")
    imported = _imported(dataset)
    validate = subprocess.run([sys.executable, "-m", "ikdata", "validate", "--deep", str(dataset)],
                              capture_output=True, text=True)
    replay = subprocess.run([sys.executable, "-m", "ikdata", "replay", "--no-reuse", "--json", str(dataset)],
                            capture_output=True, text=True)
    passed = _passed(dataset)
    for engine, row in rows.items():
        if row["stage"] != "called":
            continue
        if engine in by_engine:
            row["stage"], row["why"] = by_engine[engine].split(": ", 1)
        elif engine not in imported:
            row["stage"], row["why"] = "import", "no workload imported and no reason given"
        elif validate.returncode != 0 and engine in validate.stdout + validate.stderr:
            row["stage"], row["why"] = "validate", "validate --deep names it"
        elif imported[engine] not in passed:
            row["stage"], row["why"] = "replay after import", "the imported dataset's replay did not pass it"
        else:
            row["stage"], row["definition"] = "works", imported[engine]
    _captured(out, rows)
    summary = {"flashinfer": _version(), "templates": len(rows), "seconds": round(time.monotonic() - started, 1),
               "validate_exit": validate.returncode, "replay_exit": replay.returncode,
               "stages": dict(collections.Counter(r["stage"] for r in rows.values()).most_common()),
               "rows": list(rows.values())}
    (out / "census.json").write_text(json.dumps(summary, indent=1))
    return summary


NO_OUTPUTS = "the recorder holds no output tensor"


def _captured(out: Path, rows: dict) -> None:
    """The in-place APIs the recorder cannot dump outputs for, through ``ikdata capture`` instead (which copies
    their inputs before the call and records the written arguments as outputs): captured, validated and replayed
    in OUT/captured; each that passes works end to end (``via: capture``)."""
    import flashinfer_engines

    pending = {e: r for e, r in rows.items() if r["stage"] == "import" and NO_OUTPUTS in str(r.get("why"))
               and "[" not in r["key"] and r.get("definition")}
    if not pending:
        return
    calls = []
    for row in pending.values():
        module, attr = row["key"].split("trace.templates.")[-1].split(":", 1)
        calls.append(flashinfer_engines.EngineCall(module, attr, sizes=flashinfer_engines.small_sizes(row["key"])))
    into = out / "captured"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    capture = subprocess.run([sys.executable, "-m", "ikdata", "capture", "--into", str(into), "--", sys.executable,
                              str(TOOLS / "flashinfer_engines.py"), "--child", *(c.to_arg() for c in calls)],
                             capture_output=True, text=True, env=env)
    validate = subprocess.run([sys.executable, "-m", "ikdata", "validate", "--deep", str(into)], capture_output=True,
                              text=True, env=env)
    subprocess.run([sys.executable, "-m", "ikdata", "replay", "--no-reuse", "--json", str(into)],
                   capture_output=True, text=True, env=env)
    passed = _passed(into)
    for engine, row in pending.items():
        found = [d for d in passed if d == row["definition"] or d.startswith(row["definition"] + "__without_")]
        if capture.returncode == 0 and validate.returncode == 0 and found:
            row["stage"], row["via"], row["definition"] = "works", "capture", found[0]
            row.pop("why", None)
        else:
            row["why"] += "; through ikdata capture instead: not passing"


def _set_aside(out: Path, rows: dict, exc: Exception, by_engine: dict) -> list[str]:
    """Move the calls of the engines a whole-import refusal names to OUT/set-aside; returns those engines."""
    import shutil

    named = []
    for problem in getattr(exc, "problems", None) or []:
        text = str(problem)
        for engine, row in rows.items():
            base = row.get("definition")
            if base and (f"({base})" in text or f"({base}__without_" in text or f"'{base}'" in text
                         or f"'{base}__without_" in text or f"/{base}.jsonl" in text or f"/{base}__without_" in text):
                by_engine.setdefault(engine, "import: " + " ".join(text.split())[:240])
                named.append(engine)
    for folder in (out / "dumps").iterdir() if named else ():
        if _engine_of(folder.name) in named:
            (out / "set-aside").mkdir(exist_ok=True)
            shutil.move(str(folder), str(out / "set-aside" / folder.name))
    return named


def _diagnose(out: Path, rows: dict) -> dict[str, str]:
    """engine -> "stage: why" for each call staging leaves out, or whose replay with its reference errs or fails."""
    from ikdata.flashinfer.source import _judge
    from ikdata.flashinfer.staging import stage

    staged = stage(out / "dumps", None, out / "staged")
    found = {}
    for where, reason in staged.left_out:
        engine = _engine_of(Path(where).name)
        if engine:
            found[engine] = "import: " + " ".join(reason.split())[:240]
    if staged.definitions:
        _judge(out / "staged")
        report = json.loads((out / "staged" / "reports" / "replay.json").read_text())
        for case in report.get("cases", []):
            engine = _engine_of_definition(out, case.get("definition"), rows)
            if engine and case.get("status") != "passed" and engine not in found:
                error = str(case.get("error") or "").strip().splitlines()
                why = error[-1] if error else str(case.get("reason") or case.get("status"))
                found[engine] = f"replay: {case.get('status')}: {' '.join(why.split())[:240]}"
    return found


FOLDERS: dict[str, str] = {}  # recorder call folder -> the engine whose call wrote it (engines.jsonl "folders")


def _engine_of(name: str) -> str | None:
    if name in FOLDERS:
        return FOLDERS[name]
    found = re.search(r"_pid[0-9]+_(t[0-9]{3}_.*)_call[0-9]+$", name or "")
    return found.group(1) if found else None


def _engine_of_definition(dataset: Path, definition: str, rows: dict) -> str | None:
    """The engine whose call renders ``definition`` (or its ``__without_`` variant)."""
    base = (definition or "").split("__without_", 1)[0]
    return next((e for e, r in rows.items() if r.get("definition") == base), None)


def _imported(dataset: Path) -> dict[str, str]:
    """engine -> definition of each imported workload (from its receipt's ``operation``)."""
    found = {}
    receipts = dataset / "receipts.jsonl"
    for line in receipts.read_text().splitlines() if receipts.is_file() else []:
        record = json.loads(line)
        engine = _engine_of(str(record.get("dump", ""))) or str(record.get("operation", "")).rpartition(".")[2]
        found[engine] = record["definition"]
    return found


def _passed(dataset: Path) -> set[str]:
    report = dataset / "reports" / "replay.json"
    if not report.is_file():
        return set()
    cases = json.loads(report.read_text()).get("cases", [])
    failed = {c["definition"] for c in cases if c.get("status") != "passed"}
    return {c["definition"] for c in cases if c.get("status") == "passed"} - failed


def _version() -> str:
    from importlib.metadata import version

    return version("flashinfer-python")


def markdown(summary: dict) -> str:
    """The census as docs/flashinfer.md shows it: the counts, then every template not working and why."""
    rows = summary["rows"]
    lines = [f"flashinfer-python {summary['flashinfer']}: {summary['templates']} templates, "
             f"{summary['stages'].get('works', 0)} work end to end ({summary['seconds']} s)", "",
             "| stage not passed | templates |", "|---|---|"]
    lines += [f"| {stage} | {n} |" for stage, n in summary["stages"].items()]
    families: dict[str, collections.Counter] = {}
    for row in rows:
        family = row["key"].split("trace.templates.")[-1].split(":", 1)[0]
        families.setdefault(family, collections.Counter())[row["stage"]] += 1
        families[family]["via capture"] += row.get("via") == "capture"
    lines += ["", "| family | with a reference | work | of which through capture | not working (stage: count) |",
              "|---|---|---|---|---|"]
    for family, counts in sorted(families.items()):
        total = sum(n for k, n in counts.items() if k not in ("no reference", "via capture"))
        if not total:
            continue
        rest = ", ".join(f"{k} {n}" for k, n in sorted(counts.items())
                         if k not in ("works", "no reference", "via capture") and n)
        lines.append(f"| {family} | {total} | {counts['works']} | {counts['via capture']} | {rest or '-'} |")
    lines += ["", "| template | stage not passed | why |", "|---|---|---|"]
    for row in rows:
        if row["stage"] not in ("works", "no reference"):
            why = str(row.get("why", "")).replace("|", "\\|")
            lines.append(f"| `{row['key'].split('trace.templates.')[-1]}` | {row['stage']} | {why} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--only", help="templates whose module:attr key contains this")
    parser.add_argument("--seconds", type=int, default=20, help="per template, for init and the engine")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(Path(args.out), args.only, args.seconds)
        return
    summary = run(Path(args.out), args.only, args.seconds)
    print(markdown(summary) if args.markdown else json.dumps({k: v for k, v in summary.items() if k != "rows"},
                                                             indent=1))


if __name__ == "__main__":
    main()
