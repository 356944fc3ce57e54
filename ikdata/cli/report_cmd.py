"""``ikdata report``: draw a replay report as one static HTML page (ikdata.ops.report_html)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import JsonOpt, QuietOpt
from ikdata.core.status import Status

REPORT_EXAMPLES = """
\b
Examples:
  ikdata report runs/clip --html clip.html
  ikdata report runs/big/reports/replay-combined.json --html big.html
"""


@app.command("report", epilog=REPORT_EXAMPLES)
def report_command(
        target: Annotated[Path, typer.Argument(
            help="A dataset folder (its replay report) or a replay report file.", show_default=False)],
        html: Annotated[Path, typer.Option(
            "--html", help="Write the page here: per trajectory e and f per step (log scale), chain error, PSNR "
            "per frame; max_error_ratio per definition; PIT histograms.", show_default=False)],
        self_contained: Annotated[bool, typer.Option(
            "--self-contained", help="Inline plotly.js in the page: one file to send around (4.6 MiB more). "
            "Without it the page loads plotly.js from a file beside it, written once per folder.")] = False,
        json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Draw a replay report as a static HTML page (plotly, no server; opens offline in a browser).

    The page opens with a table of the failing cases, each linked to its chart. plotly.js is included
    once: as plotly-VERSION.min.js beside the page (keep the two together), or inlined with
    --self-contained.

    Every value of the report is escaped on the page. A value of the wrong type (a string where a number
    belongs, a step index that is not an integer) is drawn as a gap and listed at the top of the page;
    each is printed on stderr with the report file and its JSON pointer.

    Exit 0 when the page was written from a clean report; 1 when the report cannot be read (no page), or
    when the page was written but some of its values could not be drawn.
    """
    from ikdata.core.cases import read_report
    from ikdata.ops import report_html

    o = out.Output(json=json_, quiet=quiet)
    if not Path(html).parent.is_dir():  # the page goes into a folder that exists; none is created (#27)
        from ikdata.core.errors import UsageError

        raise UsageError(f"--html {html}: no such folder {Path(html).parent}; create it first")
    from ikdata.ops import report_provenance

    source = report_html.report_path_for(target)
    report = read_report(source)
    root = report_provenance.dataset_of(source)
    provenance = report_provenance.gather(root) if root is not None else None
    written, problems = report_html.write_html(report, html, title=f"ikdata replay report: {target}",
                                               path=str(source), self_contained=self_contained,
                                               provenance=provenance)
    library = None if self_contained else written.parent / report_html.plotly_js_name()
    counted = _counted(report.document)
    document = {"report": str(source), "html": str(written), "cases": len(report.cases),
                **counted, "bytes": written.stat().st_size,
                "failing": sum(1 for c in report.cases if c.status in (Status.FAILED, Status.ERROR)),
                "plotly_js": str(library) if library else None, "problems": [p.to_dict() for p in problems]}
    o.result(document, lambda: out.info(f"wrote {written} ({len(report.cases)} cases, "
                                        + "".join(f"{n} {noun}, " for noun, n in counted.items())
                                        + f"{document['failing']} failing, "
                                        f"{out.human_bytes(document['bytes'])}) from {source}"
                                        + (f", with {library.name} beside it" if library else "")
                                        + "; open it in a browser"
                                        + (f"; {len(problems)} value(s) could not be drawn (listed on the page)"
                                           if problems else "")))
    o.problems(problems)
    o.exit(problems)


def _counted(report: dict) -> dict[str, int]:
    """What each family's summary table counts (``{"trajectories": 3}``), from the report's JSON document (what a
    ``summary`` hook reads). A report the page draws may hold values of the wrong type (listed on the page); a
    family whose summary they break is not counted."""
    from ikdata.judging.families import FAMILIES
    from ikdata.judging.summary_table import SummaryTable

    found: dict[str, int] = {}
    for family in FAMILIES:
        hook = family.hook("summary")
        try:
            blocks = hook(report) if hook is not None else []
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
        found.update({b.noun: len(b.rows) for b in blocks if isinstance(b, SummaryTable) and b.noun})
    return found
