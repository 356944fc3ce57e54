"""Issue 43, weakness: the report page kept raw ESC and BEL bytes from a report's values.

A page is a file people also look at with ``cat`` or a pager, which act on ESC, BEL and the C1 CSI. Every value
reaches the page through :func:`ikdata.ops.report_parts.escape` or :func:`~ikdata.ops.report_parts.label`,
which now show a control character as the visible ``\\xNN``.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from merge_helpers import REPORT, capture
from security_helpers import trusted_folder

import ikdata
from ikdata.cli import app
from ikdata.core.writer import DatasetWriter

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\x7f"


def test_the_report_page_holds_no_control_character_from_a_value(tmp_path):
    from ikdata.replay.runner import replay

    folder = trusted_folder(tmp_path)
    root = capture(tmp_path / "ds", rows=2)
    assert replay(ikdata.open(root, definitions=[folder]), reuse=False).exit_code == 0
    DatasetWriter(root).commit()
    report = json.loads((root / REPORT).read_text())
    report["device"] = "cpu" + HOSTILE
    first, second = report["cases"]
    first.update(status="failed", reason="C: too far" + HOSTILE, uuid=first["uuid"] + HOSTILE)
    first["metrics"]["C"]["max_error_ratio"] = 5.0
    first["metrics"]["C" + HOSTILE] = first["metrics"]["C"]
    second["definition"] = second["definition"] + HOSTILE
    (root / REPORT).write_text(json.dumps(report))

    page = tmp_path / "page.html"
    result = CliRunner().invoke(app, ["report", str(root), "--html", str(page)])
    assert "Traceback" not in result.output, result.output
    data = page.read_bytes()
    text = data.decode("utf-8")
    for control in ("\x1b", "\x07", "\x9b", "\x7f"):
        assert control not in text, f"{control!r} reached the page"
    assert "\\x1b]0;pwned\\x07" in text  # shown, not acted on
    assert b"\x1b" not in result.output.encode()
