"""``ikdata replay`` and ``ikdata replay-combine``: rerun references on captured inputs and judge them."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from rich.markup import escape

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._declared import with_family_options
from ikdata.core.status import Status
from ikdata.cli._options import DatasetOrUrlArg, DefinitionsOpt, EndpointOpt, JsonOpt, ProfileOpt, QuietOpt

if TYPE_CHECKING:
    from ikdata.core.cases import Report

REPLAY_EXAMPLES = """
\b
Examples:
  ikdata replay runs/minilm
  ikdata replay runs/minilm --device cuda \\
      --definition dense_gemm_bf16_nt_n384_k384
  ikdata replay pulled/ds --trust 5a1d2b9c...  (once you read its reference)
  ikdata replay runs/big --shard 1/4 --resume  (then: ikdata replay-combine)
  ikdata replay runs/big --ray                 (a local Ray cluster)
  ikdata replay runs/big --ray auto            (joins a running one)
  ikdata replay s3://bucket/big --ray auto --report big-replay.json
"""

COMBINE_EXAMPLES = """
\b
Examples:
  ikdata replay-combine runs/big/reports/replay.json \\
      runs/big/reports/replay-shard-*-of-4.json
"""


def _is_ray_address(text: str) -> bool:
    """What ``--ray`` takes as its value: local, auto, HOST:PORT or ray://HOST:PORT (else a dataset path)."""
    return text in ("local", "auto") or (":" in text and not text.startswith(("/", ".")) and "://" not in text) \
        or text.startswith("ray://")


def _looks_like_dataset(text: str) -> bool:
    """Whether the word after ``--ray`` is the dataset rather than an address: an existing path, a URL, or a
    path-like word; anything else (``--ray no-port-here``) stays ``--ray``'s value, refused as an address."""
    import os

    return not _is_ray_address(text) and (os.path.exists(text) or "/" in text or "://" in text)


class _RayOptional(typer.core.TyperCommand):
    """``--ray`` alone means a local cluster: ``--ray DIR`` (or ``--ray`` last) is ``--ray local DIR``."""

    def parse_args(self, ctx, args):  # type: ignore[override]
        fixed: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                fixed += args[i:]
                break
            if arg == "--ray":
                following = args[i + 1] if i + 1 < len(args) else None
                if following is None or following.startswith("-") or _looks_like_dataset(following):
                    fixed.append("--ray=local")
                    continue
            fixed.append(arg)
        return super().parse_args(ctx, fixed)


@app.command("replay", epilog=REPLAY_EXAMPLES, cls=_RayOptional)
@with_family_options("replay")  # every family's declared options (diffusion's --floor-k ...), by the registry
def replay_command(
        path: DatasetOrUrlArg,
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
        definitions: DefinitionsOpt = None, quiet: QuietOpt = False,
        ray: Annotated[Optional[str], typer.Option(
            "--ray", metavar="[ADDRESS]", help="Run the cases on Ray: alone (or 'local') starts a cluster here, "
            "'auto' joins a running one, HOST:PORT a given one. Needed to replay a URL (s3://, hf://) without "
            "pulling it.")] = None,
        endpoint_url: EndpointOpt = None, profile: ProfileOpt = None,
        strict: Annotated[bool, typer.Option(
            "--strict", help="Exit 1 also when a statistical verdict is not judged (too few draws).")] = False,
        **family_options: Any,
) -> None:
    """Rerun each trusted reference on the captured inputs and judge it against the captured outputs.

    Exit 0 when every replayed case passed, 1 when any failed or errored or a definition was refused.
    """
    import ikdata
    from ikdata.core.errors import UsageError
    from ikdata.remote.url import is_url
    from ikdata.replay.runner import replay

    from ikdata.core.trust import check_digests

    trust = list(check_digests(trust))  # a short or mistyped digest would trust nothing, silently
    o = out.Output(json=json_, quiet=quiet)
    if not is_url(path):
        from ikdata.core.dataset import require_dataset
        from ikdata.core.locking import refuse_remote

        refuse_remote(path)  # a replay writes its report and the manifest into the folder
        require_dataset(path)  # and never into a folder that holds no dataset
    else:
        _endpoint_environment(path, endpoint_url, profile)
    from ikdata.judging.families import settings_from

    settings = settings_from(family_options)  # each family's from its declared options, by the family's name
    cluster = None
    if ray is not None:
        from ikdata.replay.distributed import replay_on_ray

        if shard:
            raise UsageError("--ray and --shard: Ray spreads the cases itself; drop --shard")
        with o.progress("replay", unit="cases") as callback:
            result, cluster = replay_on_ray(path, address=ray, device=device, definitions=definition,
                                            definition_folders=definitions or (), resume=resume, report_path=report,
                                            trust=trust or (), reuse=reuse, progress=callback, settings=settings)
    else:
        if is_url(path):
            raise UsageError(f"{path}: replaying a URL runs on Ray workers that fetch only the blobs they need: "
                             "add --ray local (or --ray auto), or 'ikdata clone' it first")
        ds = ikdata.open(Path(path), definitions=definitions or ())
        with o.progress("replay", unit="cases") as callback:
            result = replay(ds, device=device, definitions=definition, shard=shard, resume=resume,
                            report_path=report, trust=trust or (), reuse=reuse, progress=callback,
                            settings=settings)
    o.problems(result.problems, label="not replayed: ")
    for refusal in result.refused:
        out.err_console.print(f"[red]refused:[/red] {escape(refusal.message)} ({refusal.workloads} workloads not "
                              "replayed)", markup=True, highlight=False)

    summary = result.summary()
    if cluster is not None:
        summary["ray"] = {"address": cluster.address, "cpus": cluster.workers, "gpus": cluster.gpus,
                          "startup_seconds": round(cluster.startup_seconds, 3), "tasks": cluster.tasks,
                          "worker_deaths": cluster.worker_deaths, "fetched_bytes": cluster.fetched_bytes}

    def human() -> None:
        from ikdata.core.cases import Report

        _print_summary(summary, Report.of(result.report, path=str(result.report_path)))
        if cluster is not None:
            out.info(f"ray: {cluster.tasks} tasks on {cluster.workers} CPUs / {cluster.gpus} GPUs "
                     f"({cluster.address}, start-up {cluster.startup_seconds:.1f} s), "
                     f"{cluster.worker_deaths} worker deaths, {out.human_bytes(cluster.fetched_bytes)} fetched")

    o.result(summary, human)
    o.exit(code=result.exit_code or (1 if strict and summary.get("not_judged") else 0))


@app.command("replay-combine", epilog=COMBINE_EXAMPLES)
def replay_combine(
        output: Annotated[Path, typer.Argument(help="Where to write the combined report.", show_default=False)],
        reports: Annotated[list[Path], typer.Argument(help="One report per shard 1/N .. N/N.", show_default=False)],
        json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Combine the shard reports of one replay into the report an unsharded run would write.

    Exit 0 when every case in the combined report passed, 1 otherwise.
    """
    from ikdata.core.errors import UsageError
    from ikdata.core.cases import read_report
    from ikdata.replay import report as report_mod
    from ikdata.replay.summary import summarize

    if output.is_file() and _is_shard_report(output):
        raise UsageError(f"{output} is a shard report, so it cannot be OUTPUT (it would be overwritten): "
                         "name the combined report first: ikdata replay-combine OUTPUT SHARD_REPORT...")
    combined = report_mod.combine_reports([read_report(p) for p in reports], names=[str(p) for p in reports])
    report_mod.write(output, combined.to_json())
    summary = summarize(combined, report_path=output)
    o = out.Output(json=json_, quiet=quiet)
    o.result(summary, lambda: _print_summary(summary, combined, tables=False))
    o.exit(code=summary["exit_code"])


def _is_shard_report(path: Path) -> bool:
    """Whether ``path`` looks like a shard report, even one no reader would accept (it is never overwritten)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and bool(found.get("shard")) and isinstance(found.get("cases"), list)


def _endpoint_environment(url: str, endpoint_url: Optional[str], profile: Optional[str]) -> None:
    """--endpoint-url and --profile for a replay on Ray: through the environment its workers inherit."""
    import os

    from ikdata.remote.url import parse_url

    protocol = parse_url(url).protocol
    if endpoint_url:
        os.environ["HF_ENDPOINT" if protocol == "hf" else "AWS_ENDPOINT_URL"] = endpoint_url
    if profile:
        os.environ["AWS_PROFILE"] = profile


def _print_block(table_: Any) -> None:
    """A family's summary table, then its notes whole, wrapped at spaces, indented under it (in a pipe or a file:
    plain columns, as ls and stats print)."""
    from rich.table import Table

    if not out.is_terminal():
        out.table(table_.title, table_.columns, table_.rows)
        for line in table_.notes:
            out.info(f"  {line}")
        return
    table = Table(title=table_.title, title_justify="left")
    for column in table_.columns:
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    for row in table_.rows:
        table.add_row(*(escape(c) for c in row))
    out.console.print(table)
    for line in table_.notes:
        out.info(_wrapped(line))


def _wrapped(line: str) -> str:
    return textwrap.fill(line, width=max(40, out.console.width), initial_indent="  ", subsequent_indent="      ",
                         break_long_words=False, break_on_hyphens=False)


_LISTED = 20  # a definition with more cases lists only those that did not pass


def _print_tables(report: Report, covered: frozenset[str] = frozenset()) -> None:
    """One table per definition, laid out for the terminal's width: columns are dropped or cut,
    never wrapped (notes that do not fit are printed whole under the table). In a pipe or a file: plain
    columns, every column kept and nothing cut, one line per case (as ls and stats print). Definitions a
    family's summary table lists (``covered``) are left to it."""
    import sys

    from rich.table import Table

    from ikdata.replay.summary import case_rows, fit_table

    terminal = out.is_terminal()
    for name, rows in case_rows(report).items():
        if name in covered:
            continue  # a family's own table lists them
        shown = rows if len(rows) <= _LISTED else [r for r in rows if r[2] != Status.PASSED]
        if not terminal:
            layout = fit_table(shown, sys.maxsize)
            out.table(f"{name}: {len(rows)} cases", layout.columns, layout.rows)
            if len(shown) < len(rows):
                out.info(f"  ({len(rows) - len(shown)} passed cases not listed; see the report)")
            continue
        layout = fit_table(shown, out.console.width)
        table = Table(title=f"{name}: {len(rows)} cases", title_justify="left")
        for column in layout.columns:
            table.add_column(column, no_wrap=True, overflow="ellipsis")
        for row in layout.rows:
            table.add_row(*row)
        out.console.print(table)
        for uuid, note in layout.notes:  # whole, wrapped at spaces, indented under the table
            out.info(_wrapped(f"{uuid}: {note}"))
        if len(shown) < len(rows):
            out.info(f"  ({len(rows) - len(shown)} passed cases not listed; see the report)")


def _print_summary(summary: dict[str, Any], report: Report, *, tables: bool = True) -> None:
    """The per-definition tables (unless ``tables`` is False), every family's summary, then one line of counts."""
    from ikdata.judging.families import summaries
    from ikdata.judging.summary_table import SummaryTable

    blocks = summaries(report)
    if tables:
        _print_tables(report, frozenset(d for b in blocks if isinstance(b, SummaryTable) for d in b.covers))
    for block in blocks:  # trajectories; sampling verdicts with alpha, p-values and detectable shifts
        if isinstance(block, SummaryTable):
            if block.rows:
                _print_block(block)
        else:
            out.info(block)
    counts = summary["counts"]
    parts = [f"{counts[k]} {k}" for k in Status if counts[k]]
    if counts["reused"]:
        parts.append(f"{counts['reused']} reused")
    if summary["refused"]:
        parts.append(f"{len(summary['refused'])} definitions refused")
    if summary.get("problems"):
        parts.append(f"{len(summary['problems'])} unreadable records")
    if summary.get("not_judged"):  # no power claimed there: --strict exits 1
        parts.append(f"{len(summary['not_judged'])} verdict(s) or part(s) not judged (sampling draws too few, "
                     "guidance not rebuilt; --strict fails)")
    out.info(f"{', '.join(parts) or 'nothing to replay'} — report: {summary['report']}")
