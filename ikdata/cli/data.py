"""Commands that read or check a dataset: init, validate, ls, show, stats, repair, manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import (DatasetArg, DatasetOrUrlArg, DefinitionsOpt, EndpointOpt, JsonOpt, ProfileOpt,
                                 QuietOpt, open_dataset)

VALIDATE_EXAMPLES = """
\b
Examples:
  ikdata validate runs/minilm --deep
  ikdata validate seed-capture --definitions seed/definitions --json
"""

INIT_EXAMPLES = """
\b
Examples:
  ikdata init shared/gemm --name gemm --description "nightly GEMMs"
  ikdata init runs/empty --json
"""
LS_EXAMPLES = """
\b
Examples:
  ikdata ls runs/minilm
  ikdata ls runs/minilm --definition gemm_n384_k384 | grep M=8
  ikdata ls s3://team-bucket/datasets/gemm --json
"""
SHOW_EXAMPLES = """
\b
Examples:
  ikdata show runs/minilm 3f2a9c
  ikdata show runs/minilm 3f2a9c --json
  ikdata show runs/flux 8be1c2:4   (the workloads of step 4 of a trajectory)
"""
STATS_EXAMPLES = """
\b
Examples:
  ikdata stats shared/gemm
  ikdata stats hf://datasets/acme/gemm-captures --json
"""
REPAIR_EXAMPLES = """
\b
Examples:
  ikdata repair shared/gemm
  ikdata repair shared/gemm --json
"""
MANIFEST_EXAMPLES = """
\b
Examples:
  ikdata manifest shared/gemm   (after adding or editing a file by hand)
"""


@app.command(epilog=INIT_EXAMPLES)
def init(path: DatasetArg, name: Annotated[Optional[str], typer.Option(help="Dataset name.")] = None,
         description: Annotated[Optional[str], typer.Option(help="One-line description.")] = None,
         json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Create an empty ikdata dataset with its manifest."""
    from ikdata.core.dataset import MANIFEST
    from ikdata.core.errors import UsageError
    from ikdata.core.layout import init_dataset

    from ikdata.core.locking import refuse_remote

    o = out.Output(json=json_, quiet=quiet)
    refuse_remote(path)
    if (Path(path) / MANIFEST).exists():  # init never rewrites a dataset (its id would change)
        raise UsageError(f"{path}: already a dataset ({MANIFEST} exists); init creates new datasets only")
    dataset_id = init_dataset(path, name=name, description=description)
    o.result({"path": str(path), "id": dataset_id},
             lambda: out.info(f"initialised {path} (id {dataset_id[:12]})"))


@app.command(epilog=VALIDATE_EXAMPLES)
def validate(ctx: typer.Context, path: DatasetOrUrlArg,
             deep: Annotated[bool, typer.Option("--deep", help="Also rehash every blob.")] = False,
             definitions: DefinitionsOpt = None, json_: JsonOpt = False,
             jobs: Annotated[Optional[int], typer.Option("--jobs", min=1, help="Threads for blob checks.")] = None,
             quiet: QuietOpt = False, endpoint_url: EndpointOpt = None, profile: ProfileOpt = None,
             json_lines: Annotated[bool, typer.Option("--json-lines", help="Print JSON Lines on stdout: one "
                                                      "problem per line, then a summary line.")] = False) -> None:
    """Check every record, reference and blob; report every problem. Exit 1 if any."""
    from ikdata.ops.validate import validate as run_validate

    o = out.Output(json=json_, quiet=quiet)
    ds = open_dataset(path, definitions, ctx=ctx, blobs="full" if deep else "headers", endpoint_url=endpoint_url,
                      profile=profile)
    with o.progress("validate", unit="blobs") as progress:
        report = run_validate(ds, deep=deep, jobs=jobs, progress=progress)

    def human() -> None:  # the problem list is validate's result, so it goes to stdout
        out.problems(report.problems, to_stdout=True)
        verdict = "clean" if report.ok else f"{len(report.problems)} problem(s)"
        out.info(f"{path}: {verdict} — {report.definitions} definitions, {report.workloads} workloads, "
                 f"{report.receipts} receipts, {report.blobs_checked} blobs checked"
                 + (f", {report.blobs_rehashed} rehashed" if deep else ""))

    if json_lines:
        out.emit_json_lines(report.json_lines())
        o.exit(not report.ok)
    o.result(report.to_dict(), human)
    if quiet and not json_:
        o.problems(report.problems)
    o.exit(not report.ok)


@app.command("ls", epilog=LS_EXAMPLES)
def list_workloads(ctx: typer.Context, path: DatasetOrUrlArg, definition: Annotated[Optional[str], typer.Option(
        "--definition", help="Only this definition's workloads.")] = None,
        definitions: DefinitionsOpt = None, json_: JsonOpt = False, quiet: QuietOpt = False,
        endpoint_url: EndpointOpt = None, profile: ProfileOpt = None) -> None:
    """List workloads: uuid, definition, axes. Exit 1 if a line could not be read."""
    from ikdata.cli import _read

    o = out.Output(json=json_, quiet=quiet)
    ds = open_dataset(path, definitions, ctx=ctx, endpoint_url=endpoint_url, profile=profile)
    o.exit(code=_read.ls(ds, definition, o))


@app.command(epilog=SHOW_EXAMPLES)
def show(ctx: typer.Context, path: DatasetOrUrlArg, uuid: Annotated[str, typer.Argument(
        help="Workload uuid (a unique prefix is enough), trajectory id, or TRAJECTORY:STEP[:STREAM] as lineage "
        "takes it.", metavar="KEY")],
         definitions: DefinitionsOpt = None, json_: JsonOpt = False, quiet: QuietOpt = False,
         endpoint_url: EndpointOpt = None, profile: ProfileOpt = None) -> None:
    """Show one workload: its row, its receipt and its blobs."""
    from ikdata.cli import _read

    o = out.Output(json=json_, quiet=quiet)
    ds = open_dataset(path, definitions, ctx=ctx, blobs="headers", endpoint_url=endpoint_url, profile=profile)
    o.exit(code=_read.show(ds, uuid, o))


@app.command(epilog=STATS_EXAMPLES)
def stats(ctx: typer.Context, path: DatasetOrUrlArg, definitions: DefinitionsOpt = None,
          json_: JsonOpt = False, quiet: QuietOpt = False, endpoint_url: EndpointOpt = None,
          profile: ProfileOpt = None) -> None:
    """Definitions, workloads per definition, blobs, stored and referenced bytes, dedup ratio.

    Exit 1 if a line could not be read (the figures then leave it out).
    """
    from ikdata.cli import _read

    o = out.Output(json=json_, quiet=quiet)
    ds = open_dataset(path, definitions, ctx=ctx, blobs="sizes", endpoint_url=endpoint_url, profile=profile)
    o.exit(code=_read.stats(ds, str(path), o))


@app.command(epilog=REPAIR_EXAMPLES)
def repair(path: DatasetArg, json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Finish every killed writer (import, capture, replay, gc); set aside torn lines and orphaned receipts."""
    from ikdata.core.dataset import require_dataset
    from ikdata.core.layout import repair_dataset

    o = out.Output(json=json_, quiet=quiet)
    require_dataset(path)  # repair finishes writers of a dataset; it writes into no other folder
    report = repair_dataset(path)

    def human() -> None:
        if not report.changed and report.ok:
            out.info(f"{path}: nothing to repair")
        if report.import_recovery == "rolled-forward":
            out.info(f"{path}: finished an import that was killed after its commit point")
        elif report.import_recovery == "discarded":
            out.info(f"{path}: dropped the staging of an import that was killed before its commit point")
        for r in report.lines:
            out.info(f"{r.path}: moved line(s) {', '.join(map(str, r.removed_lines))} to {r.set_aside}")
        for rel in report.definitions_reordered:
            out.info(f"{rel}: inputs and outputs rewritten in run's order (flashinfer-bench calls run positionally)")
        for note in report.notes():
            out.info(f"{path}: {note}")

    o.result({"path": str(path), **report.to_dict()}, human)
    o.exit(not report.ok)  # 1 when something found could not be finished (the notes say what)


@app.command("manifest", epilog=MANIFEST_EXAMPLES)
def manifest_cmd(path: DatasetArg, json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Rebuild the manifest from the files (after editing by hand) and print the dataset id."""
    from ikdata.core import manifest as manifest_mod
    from ikdata.core.dataset import require_dataset
    from ikdata.core.locking import dataset_lock, refuse_remote

    refuse_remote(path)
    require_dataset(path)  # a manifest is written for a dataset only, never into any folder

    with dataset_lock(path, exclusive=True):
        dataset_id = manifest_mod.write(path)
    out.Output(json=json_, quiet=quiet).result({"id": dataset_id}, lambda: out.info(dataset_id))
