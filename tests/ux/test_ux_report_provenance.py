"""The report page says where its data came from (issue 51): the dataset and its id, the engine and model, the
program and the capture time; each case's step, layer, request and shapes, and the lineage command for it. A
report file outside its dataset says that its provenance is not known."""

from __future__ import annotations

import re
import shutil

from cli_helpers import run_cli, trusted_definitions, write_replayable


def _text(page: str) -> str:
    return re.sub(r"<script.*?</script>", "", page, flags=re.S)


def test_the_page_names_the_dataset_its_sources_and_each_cases_place(tmp_path):
    import ikdata
    from ikdata.core import manifest

    root = write_replayable(tmp_path / "ds", rows=3, failing=1)
    replayed = run_cli("replay", str(root), "--definitions", str(trusted_definitions(tmp_path / "defs")),
                       "--no-reuse")
    assert replayed.returncode == 1, replayed.stderr
    page_path = tmp_path / "page.html"
    done = run_cli("report", str(root), "--html", str(page_path))
    assert done.returncode == 0, done.stderr
    page = _text(page_path.read_text())
    assert "Where the data came from" in page
    assert manifest.current_id(root) in page
    assert "test: tiny" in page  # engine and model, as the receipts give them
    failing = page[page.index("id='failing'"):page.index("</table>", page.index("id='failing'"))]
    uuids = [row.uuid for row in ikdata.open(root).workloads()]
    assert f"ikdata lineage {root.resolve()} {uuids[1]}" in failing  # the failing case: what to ask next
    cells = re.findall(r"<td>(.*?)</td>", failing)
    assert "1" in cells and "M=2" in cells  # its step and shapes
    assert any("request r1" in cell for cell in cells)


def test_a_report_outside_its_dataset_says_its_provenance_is_not_known(tmp_path):
    root = write_replayable(tmp_path / "ds", rows=2)
    run_cli("replay", str(root), "--definitions", str(trusted_definitions(tmp_path / "defs")), "--no-reuse")
    alone = tmp_path / "alone.json"
    shutil.copy(root / "reports" / "replay.json", alone)
    page_path = tmp_path / "page.html"
    done = run_cli("report", str(alone), "--html", str(page_path))
    assert done.returncode == 0, done.stderr
    assert "Where the data came from: not known" in _text(page_path.read_text())
