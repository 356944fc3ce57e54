"""``ikdata replay`` and ``ikdata replay-combine``: rerun references on captured inputs and judge them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import DatasetArg, DefinitionsOpt, JsonOpt

REPLAY_EXAMPLES = """
\b
Examples:
  ikdata replay runs/minilm
  ikdata replay runs/minilm --device cuda --definition dense_gemm_bf16_nt_n384_k384
  ikdata replay pulled/ds --trust 5a1d2b9c...   (after reading that definition's reference)
  ikdata replay runs/big --shard 1/4 --resume   (then: ikdata replay-combine OUT shard reports)
"""

COMBINE_EXAMPLES = """
\b
Examples:
  ikdata replay-combine runs/big/reports/replay.json runs/big/reports/replay-shard-*-of-4.json
"""


@app.command("replay", epilog=REPLAY_EXAMPLES)
def replay_command(
        path: DatasetArg,
        device: Annotated[str, typer.Option(help="Where references run: cpu, cuda, cuda:N.")] = "cpu",
        definition: Annotated[Optional[list[str]], typer.Option(
            "--definition", help="Only this definition's workloads (repeatable).")] = None,
        shard: Annotated[Optional[str], typer.Option(
            help="Replay only shard I/N (1 <= I <= N), partitioned by workload uuid.")] = None,
        resume: Annotated[bool, typer.Option("--resume", help="Keep the cases already in the report.")] = False,
        report: Annotated[Optional[Path], typer.Option(
            help="Report file (default: reports/replay.json, or reports/replay-shard-I-of-N.json).")] = None,
        json_: JsonOpt = False,
        trust: Annotated[Optional[list[str]], typer.Option(
            "--trust", help="Trust the definition with this digest, so its reference runs (repeatable).")] = None,
        reuse: Annotated[bool, typer.Option(
            "--reuse/--no-reuse", help="Reuse verdicts of identical cases judged before.")] = True,
        definitions: DefinitionsOpt = None) -> None:
    """Rerun each trusted reference on the captured inputs and judge it against the captured outputs.

    Exit 0 when every replayed case passed, 1 when any failed or errored or a definition was refused.
    """
    import ikdata
    from ikdata.replay.runner import replay

    ds = ikdata.open(path, definitions=definitions or ())
    with _ProgressBar(enabled=not json_) as callback:
        result = replay(ds, device=device, definitions=definition, shard=shard, resume=resume,
                        report_path=report, trust=trust or (), reuse=reuse, progress=callback)
    for problem in result.problems:
        out.err_console.print(f"[red]not replayed:[/red] {problem}", markup=True, highlight=False)
    for refusal in result.refused:
        out.err_console.print(f"[red]refused:[/red] {refusal.message} ({refusal.workloads} workloads not replayed)",
                              markup=True, highlight=False)
    if json_:
        out.emit_json(result.summary())
    else:
        _print_tables(result.report)
        _print_summary(result.summary())
    raise typer.Exit(result.exit_code)


@app.command("replay-combine", epilog=COMBINE_EXAMPLES)
def replay_combine(
        output: Annotated[Path, typer.Argument(help="Where to write the combined report.", show_default=False)],
        reports: Annotated[list[Path], typer.Argument(help="One report per shard 1/N .. N/N.", show_default=False)],
        json_: JsonOpt = False) -> None:
    """Combine the shard reports of one replay into the report an unsharded run would write.

    Exit 0 when every case in the combined report passed, 1 otherwise.
    """
    from ikdata.replay import report as report_mod
    from ikdata.replay.summary import summarize

    combined = report_mod.combine([report_mod.load(p) for p in reports], names=[str(p) for p in reports])
    report_mod.write(output, combined)
    summary = summarize(combined, report_path=output)
    if json_:
        out.emit_json(summary)
    else:
        _print_summary(summary)
    raise typer.Exit(summary["exit_code"])


class _ProgressBar:
    """A rich progress bar on stderr, as a callback for the library (which never prints)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            TextColumn("{task.description}"), console=out.err_console, transient=True)
        self.bar.__enter__()
        return self

    def __call__(self, event: Any) -> None:
        if self.task is None:
            self.task = self.bar.add_task("", total=event.total, completed=event.done)
            return
        text = f"{event.case['status']} {event.case['definition']}" if event.case else ""
        self.bar.update(self.task, completed=event.done, description=text)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


_LISTED = 20  # a definition with more cases lists only those that did not pass


def _print_tables(report: dict[str, Any]) -> None:
    from rich.table import Table

    from ikdata.replay.summary import case_rows

    for name, rows in case_rows(report).items():
        shown = rows if len(rows) <= _LISTED else [r for r in rows if r[2] != "passed"]
        table = Table(title=f"{name}: {len(rows)} cases", title_justify="left")
        for column in ("uuid", "axes", "status", "max abs", "rel rms", "cos", "mism"):
            table.add_column(column, no_wrap=True)
        table.add_column("s", no_wrap=True)
        table.add_column("note", overflow="fold")
        for row in shown:
            table.add_row(*row)
        out.console.print(table)
        if len(shown) < len(rows):
            out.info(f"  ({len(rows) - len(shown)} passed cases not listed; see the report)")


def _print_summary(summary: dict[str, Any]) -> None:
    counts = summary["counts"]
    parts = [f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped") if counts[k]]
    if counts["reused"]:
        parts.append(f"{counts['reused']} reused")
    if summary["refused"]:
        parts.append(f"{len(summary['refused'])} definitions refused")
    if summary.get("problems"):
        parts.append(f"{len(summary['problems'])} unreadable records")
    out.info(f"{', '.join(parts) or 'nothing to replay'} — report: {summary['report']}")
