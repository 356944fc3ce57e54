"""Commands that read or check a dataset: init, validate, ls, show, stats, repair, manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ikdata.core import manifest as manifest_mod
from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import DatasetArg, DatasetOrUrlArg, DefinitionsOpt, JsonOpt, QuietOpt, open_dataset
from ikdata.core.errors import UsageError

VALIDATE_EXAMPLES = """
Examples:
  ikdata validate runs/minilm --deep
  ikdata validate seed-capture --definitions seed/definitions --json
"""


@app.command()
def init(path: DatasetArg, name: Annotated[Optional[str], typer.Option(help="Dataset name.")] = None,
         description: Annotated[Optional[str], typer.Option(help="One-line description.")] = None,
         json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Create an empty ikdata dataset with its manifest."""
    from ikdata.core.layout import init_dataset

    o = out.Output(json=json_, quiet=quiet)
    dataset_id = init_dataset(path, name=name, description=description)
    o.result({"path": str(path), "id": dataset_id},
             lambda: out.info(f"initialised {path} (id {dataset_id[:12]})"))


@app.command(epilog=VALIDATE_EXAMPLES)
def validate(ctx: typer.Context, path: DatasetOrUrlArg,
             deep: Annotated[bool, typer.Option("--deep", help="Also rehash every blob.")] = False,
             definitions: DefinitionsOpt = None, json_: JsonOpt = False,
             jobs: Annotated[Optional[int], typer.Option("--jobs", min=1, help="Threads for blob checks.")] = None,
             quiet: QuietOpt = False) -> None:
    """Check every record, reference and blob; report every problem. Exit 1 if any."""
    from ikdata.ops.validate import validate as run_validate

    o = out.Output(json=json_, quiet=quiet)
    ds = open_dataset(path, definitions, ctx=ctx, blobs="full" if deep else "headers")
    with o.progress("validate", unit="blobs") as progress:
        report = run_validate(ds, deep=deep, jobs=jobs, progress=progress)

    def human() -> None:  # the problem list is validate's result, so it goes to stdout
        out.problems(report.problems, to_stdout=True)
        verdict = "clean" if report.ok else f"{len(report.problems)} problem(s)"
        out.info(f"{path}: {verdict} — {report.definitions} definitions, {report.workloads} workloads, "
                 f"{report.receipts} receipts, {report.blobs_checked} blobs checked"
                 + (f", {report.blobs_rehashed} rehashed" if deep else ""))

    o.result(report.to_dict(), human)
    if quiet and not json_:
        o.problems(report.problems)
    o.exit(not report.ok)


@app.command("ls")
def list_workloads(ctx: typer.Context, path: DatasetOrUrlArg, definition: Annotated[Optional[str], typer.Option(
        "--definition", help="Only this definition's workloads.")] = None,
        definitions: DefinitionsOpt = None, json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """List workloads: uuid, definition, axes. Exit 1 if a line could not be read."""
    o = out.Output(json=json_, quiet=quiet)
    ds = open_dataset(path, definitions, ctx=ctx)
    rows = list(ds.workloads(definition))
    o.result([{"uuid": r.uuid, "definition": r.definition, "axes": r.axes, "source": r.source} for r in rows],
             lambda: out.table(f"{len(rows)} workloads", ["uuid", "definition", "axes"],
                               [(r.uuid, r.definition, " ".join(f"{k}={v}" for k, v in r.axes.items()))
                                for r in rows]))
    o.problems(ds.problems)
    o.exit(ds.problems)


@app.command()
def show(path: DatasetArg, uuid: Annotated[str, typer.Argument(
        help="Workload uuid or trajectory id (a unique prefix is enough).")],
         definitions: DefinitionsOpt = None, json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Show one workload: its row, its receipt and its blobs."""
    from ikdata.ops.inspect import describe_workload

    o = out.Output(json=json_, quiet=quiet)
    ds = open_dataset(path, definitions)
    from ikdata.diffusion.views import describe as describe_trajectory

    trajectory = describe_trajectory(ds, uuid)  # a diffusion trajectory id (prefix) shows the trajectory
    if trajectory is not None:
        from ikdata.cli._trajectory import print_trajectory

        o.result(trajectory, lambda: print_trajectory(trajectory))
        return
    document = describe_workload(ds, uuid)

    def human() -> None:
        row = document["row"]
        out.info(f"workload {row['workload']['uuid']}  definition {row['definition']}  ({document['source']})")
        out.table("inputs", ["name", "descriptor", "dtype", "shape"],
                  [(n, d["descriptor"], d.get("dtype", ""), d.get("shape", ""))
                   for n, d in document["inputs"].items()])
        for receipt in document["receipts"]:
            facts = {k: v for k, v in receipt.items() if k not in ("expected_output", "uuid", "definition")}
            out.info("receipt: " + ", ".join(f"{k}={v}" for k, v in sorted(facts.items())))

    o.result(document, human)
    o.problems(ds.problems)
    o.exit(ds.problems)


@app.command()
def stats(ctx: typer.Context, path: DatasetOrUrlArg, definitions: DefinitionsOpt = None,
          json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Definitions, workloads per definition, blobs, stored and referenced bytes, dedup ratio.

    Exit 1 if a line could not be read (the figures then leave it out).
    """
    from ikdata.ops.stats import compute

    o = out.Output(json=json_, quiet=quiet)
    ds = open_dataset(path, definitions, ctx=ctx, blobs="sizes")
    result = compute(ds)

    def human() -> None:
        out.table(f"{path} ({result.layout} layout)", ["definition", "workloads"],
                  sorted(result.workloads_per_definition.items()))
        out.info(f"definitions {result.definitions} · workloads {result.workloads} · receipts {result.receipts} · "
                 f"unique blobs {result.unique_blobs} · stored {out.human_bytes(result.stored_bytes)} · "
                 f"referenced {out.human_bytes(result.referenced_bytes)} · dedup ×{result.dedup_ratio:.2f}")
        from ikdata.cli._trajectory import trajectory_line

        if trajectory_line(result.trajectories):
            out.info(trajectory_line(result.trajectories))

    o.result(result.to_dict(), human)
    o.problems(ds.problems)
    o.exit(ds.problems)


@app.command()
def repair(path: DatasetArg, json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Finish every killed writer (import, capture, replay, gc); set aside torn lines and orphaned receipts."""
    from ikdata.core.layout import repair_dataset

    o = out.Output(json=json_, quiet=quiet)
    report = repair_dataset(path)

    def human() -> None:
        if not report.changed:
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


@app.command("manifest")
def manifest_cmd(path: DatasetArg, json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Rebuild the manifest from the files (after editing by hand) and print the dataset id."""
    if not Path(path).is_dir():
        raise UsageError(f"{path}: no such dataset folder")
    from ikdata.core.locking import dataset_lock

    with dataset_lock(path, exclusive=True):
        dataset_id = manifest_mod.write(path)
    out.Output(json=json_, quiet=quiet).result({"id": dataset_id}, lambda: out.info(dataset_id))
