"""Issue 51 finding 3: the demo's summary and the README said the diffusion rule is ``e <= k*f + eps (k = 4)``
while replay's default is 2. The demo prints the default replay applies, and the README shows what it prints."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import demo  # noqa: E402


def test_the_demo_and_the_readme_state_the_default_floor_bound(tmp_path, capsys, monkeypatch):
    from ikdata.diffusion.verdicts import DEFAULT_K

    monkeypatch.chdir(tmp_path)
    run = demo.Demo(tmp_path)
    run.run("init shared", ["init", str(tmp_path / "shared"), "--name", "x"], lambda d: "an empty dataset")
    run.summary([(".venv/bin/ikdata ls shared", "every workload")])
    shown = capsys.readouterr().out
    rule = next(line for line in shown.splitlines() if "a step passes while" in line)
    assert f"(k = {DEFAULT_K:g}, --floor-k)" in rule and DEFAULT_K == 2
    readme = (ROOT / "README.md").read_text()
    assert rule in readme.splitlines()  # the README's demo summary shows the line the demo prints
    assert "(k = 4" not in readme
