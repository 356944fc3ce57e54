"""Commands that combine and trace datasets: import, lineage, diff, gc."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import (DatasetArg, DatasetOrUrlArg, DefinitionsOpt, EndpointOpt, JsonOpt, ProfileOpt,
                                 QuietOpt, local_folder, open_dataset)

# How SRC's verdicts are taken (import, and pull when it merges)
TrustReportsOpt = Annotated[bool, typer.Option("--trust-reports", help="Take SRC's verdicts on their word: re-judge "
                                               "none (they are still rechecked).")]
TrustOpt = Annotated[Optional[list[str]], typer.Option(
    "--trust", help="Trust the definition with this digest, so its reference may run to re-judge SRC's verdicts "
    "(repeatable).")]
RejudgeAllOpt = Annotated[bool, typer.Option("--rejudge-all", help="Re-judge every admitted workload, not a random "
                                             "sample.")]


def check_trusted_digests(trust: list[str] | None) -> tuple[str, ...]:
    """The --trust digests, each a full definition digest (else a usage error)."""
    from ikdata.core.errors import UsageError

    for digest in trust or ():
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise UsageError(f"--trust {digest!r}: expected a definition's full digest (64 lowercase hex "
                             "characters), as a refusal prints it")
    return tuple(trust or ())


IMPORT_EXAMPLES = """
\b
Examples:
  ikdata import runs/host-a shared/gemm
  ikdata import runs/host-b shared/gemm --only-passed --dry-run
  ikdata import seed-capture shared/qwen --definitions seed/definitions
  ikdata import flashinfer-trace shared/fi --keep-random --json
  ikdata import server-draws.jsonl runs/server   (OpenAI-style completions)
  ikdata import vllm-draws.jsonl runs/v --engine vllm   (vLLM's sampler order)
  ikdata import from-a-colleague shared/gemm --definitions defs --rejudge-all
  ikdata import my-own-run shared/gemm --trust-reports

SRC's report is a claim: import reruns the trusted reference on the workloads it admits (all of them,
or a random sample of 90: 99% confidence of catching 5% forged) and refuses the import when one
does not pass. --trust-reports takes SRC's verdicts on their word.
"""


@app.command("import", epilog=IMPORT_EXAMPLES)
def import_(src: Annotated[str, typer.Argument(help="Validated dataset to import (ikdata, seed or FlashInfer), "
                                                "or a completions .jsonl.", metavar="SRC", show_default=False)],
            dst: Annotated[str, typer.Argument(help="ikdata dataset folder to merge into (created if missing).",
                                               metavar="DST", show_default=False)],
            only_passed: Annotated[bool, typer.Option("--only-passed", help="Import the validated subset; "
                                                      "list what is left out.")] = False,
            dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would happen; write nothing.")] = False,
            keep_random: Annotated[bool, typer.Option("--keep-random", help="Keep FlashInfer rows with random "
                                                      "inputs (no expected output).")] = False,
            trust_reports: TrustReportsOpt = False, trust: TrustOpt = None, rejudge_all: RejudgeAllOpt = False,
            device: Annotated[str, typer.Option(help="Where references run when re-judging: cpu, cuda, "
                                                "cuda:N.")] = "cpu",
            definitions: DefinitionsOpt = None, json_: JsonOpt = False, quiet: QuietOpt = False,
            engine: Annotated[Optional[str], typer.Option(
                "--engine", help="The server that wrote a completions .jsonl (vllm, sglang): its lines are judged "
                "in that engine's sampler order.")] = None) -> None:
    """Merge a fully validated dataset into DST: all or nothing, each tensor stored once; SRC's verdicts
    are re-judged (a sample, or all) unless --trust-reports."""
    from ikdata.importing.apply import import_dataset

    o = out.Output(json=json_, quiet=quiet)
    trust = check_trusted_digests(trust)
    src, dst = _import_folders(src, dst)
    from ikdata.core.features import file_importer

    reader = file_importer(src) if src.is_file() else None  # a file a feature reads (completions -> sampling)
    if reader is not None:
        found = reader(src, dst, dry_run=dry_run, engine=engine)
        o.result(found.to_dict(), lambda: out.info(found.summary()))
        return
    if engine is not None:
        from ikdata.core.errors import UsageError

        raise UsageError(f"--engine {engine!r}: only a completions .jsonl names its engine; {src} is a dataset")
    before = _current_id(dst)
    with o.progress("import", unit="blobs") as progress:
        result = import_dataset(src, dst, only_passed=only_passed, dry_run=dry_run, definitions=definitions or (),
                                keep_random=keep_random, progress=progress, trust_reports=trust_reports,
                                trust=trust or (), rejudge_all=rejudge_all, device=device)

    def human() -> None:
        verb = "would add" if dry_run else "added"
        moved = (f"{result.blobs_new} new" if dry_run
                 else f"{result.blobs_linked} linked, {result.blobs_copied} copied")
        out.info(f"{src} -> {dst}: {verb} {len(result.added)} workload(s), skipped {len(result.skipped)} already "
                 f"present, left out {len(result.left_out)}; blobs: {moved}, {result.blobs_present} already present "
                 f"({out.human_bytes(result.bytes_in)} in)")
        for left in result.left_out:
            out.info(f"  left out {left.uuid} ({left.definition}): {left.reason}")
        for refused in result.refused:
            out.info(f"  refused {refused.uuid} ({refused.definition}): {refused.reason}")
        for conflict in result.conflicts:
            out.info(f"  conflict: {conflict}")
        if result.rejudged is not None and (result.rejudged.claimed or result.rejudged.trusted):
            out.info(result.rejudged.statement())
        if result.dataset_id and result.dataset_id == before:  # nothing was written: DST keeps its id
            out.info(f"{dst} is unchanged ({result.dataset_id[:12]}): {src} holds nothing it lacks")
        elif result.dataset_id:
            out.info(f"{dst} is now {result.dataset_id[:12]}, merged from {src} ({result.parent_id[:12]})")

    o.result(result.to_dict(), human)
    o.exit(dry_run and (result.refused or result.conflicts))


def _current_id(root: Path) -> str | None:
    """DST's id before the import (None: no dataset yet, or a manifest the import itself will refuse)."""
    from ikdata.core.errors import IkdataError
    from ikdata.core.manifest import current_id

    try:
        return current_id(root) if root.is_dir() else None
    except (IkdataError, OSError):
        return None


def _import_folders(src: str, dst: str) -> tuple[Path, Path]:
    """SRC and DST as local folders: a URL on either side is refused with the command that does it."""
    from ikdata.core.errors import UsageError
    from ikdata.remote.url import check_location, is_url

    check_location(src), check_location(dst)
    if is_url(dst):
        raise UsageError(f"{dst}: import merges into a local dataset folder; to publish, import locally and push: "
                         f"ikdata import {src} DIR && ikdata push DIR {dst}")
    if is_url(src):
        raise UsageError(f"{src}: to merge a remote dataset, pull it: ikdata pull {src} {dst}")
    return Path(src), Path(dst)


LINEAGE_EXAMPLES = """
\b
Examples:
  ikdata lineage shared/gemm 3f2a9c
  ikdata lineage shared/gemm 5d41402abc4b2a76b9719d911017c592... --json
  ikdata lineage shared/gemm --dot | dot -Tsvg > lineage.svg
"""


@app.command(epilog=LINEAGE_EXAMPLES)
def lineage(ctx: typer.Context, path: DatasetOrUrlArg,
            key: Annotated[Optional[str], typer.Argument(help="Workload uuid (or unique prefix), or a blob digest. "
                                                         "Omit it for the dataset's parent graph.")] = None,
            dot: Annotated[bool, typer.Option("--dot", help="Print the parent graph for Graphviz.")] = False,
            json_: JsonOpt = False, quiet: QuietOpt = False, endpoint_url: EndpointOpt = None,
            profile: ProfileOpt = None) -> None:
    """Trace a workload to its capture, imports and validations; or show the parent graph.

    A clone also shows where it was copied from (the note clone keeps beside the dataset).
    """
    from ikdata.cli import _read

    o = out.Output(json=json_, quiet=quiet)
    path = open_dataset(path, None, ctx=ctx, endpoint_url=endpoint_url,  # a remote: through a temporary
                        profile=profile).root  # verified copy
    o.exit(code=_read.lineage(path, key, dot, o))


DIFF_EXAMPLES = """
\b
Examples:
  ikdata diff shared/gemm-monday shared/gemm
  ikdata diff runs/host-a runs/host-b --json
"""
GC_EXAMPLES = """
\b
Examples:
  ikdata gc shared/gemm --dry-run
  ikdata gc shared/gemm --grace 0
"""


@app.command("diff", epilog=DIFF_EXAMPLES)
def diff_(a: Annotated[str, typer.Argument(help="Dataset A (before).", metavar="A", show_default=False)],
          b: Annotated[str, typer.Argument(help="Dataset B (after).", metavar="B", show_default=False)],
          json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Show workloads added, removed and changed per definition, definitions changed, and pipeline calls
    (trajectories: seed, noise, model, scheduler) and model records that differ."""
    from ikdata.ops.diff import diff

    a, b = local_folder(a, "ikdata diff"), local_folder(b, "ikdata diff")
    changes = diff(a, b)
    o = out.Output(json=json_, quiet=quiet)
    if not o.human:
        o.result(changes.to_dict())
        return
    if changes.is_empty:
        out.info(f"{a} and {b} hold the same workloads, definitions, trajectories and models")
        return
    if changes.workloads:
        out.table(f"workloads {a} -> {b}", ["definition", "added", "removed", "changed"],
                  [(name, len(c.added), len(c.removed), len(c.changed))
                   for name, c in sorted(changes.workloads.items())])
    for family in changes.families:  # each family's records in its own words (trajectories, model records)
        for line in family.lines():
            out.info(line)
    for label, names in (("added", changes.definitions_added), ("removed", changes.definitions_removed),
                         ("changed", changes.definitions_changed)):
        for name in names:
            out.info(f"definition {label}: {name}")


@app.command(epilog=GC_EXAMPLES)
def gc(path: DatasetArg,
       dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be deleted; delete nothing.")] = False,
       grace: Annotated[float, typer.Option("--grace", help="Spare blobs younger than this many minutes.")] = 10.0,
       json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Delete blobs that no workload or receipt references (holds the dataset lock)."""
    from ikdata.core.dataset import require_dataset
    from ikdata.ops.gc import collect_garbage

    require_dataset(path)
    result = collect_garbage(path, dry_run=dry_run, grace_minutes=grace)
    o = out.Output(json=json_, quiet=quiet)
    if not o.human:
        o.result(result.to_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    out.info(f"{path}: {verb} {len(result.deleted)} unreferenced blob(s), {out.human_bytes(result.bytes_freed)} "
             f"freed; kept {result.kept}, spared {len(result.spared_young)} younger than {grace:g} min")
