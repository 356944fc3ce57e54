"""Finding 11 of issue 21: receipt fields are data from whoever captured the dataset; ``ikdata show`` and
``ikdata lineage`` must print their control characters as escapes (``\\x1b``), never send them to the
terminal, where they could retitle the window, clear the screen, colour or overwrite lines. ``--json`` keeps
the exact values (JSON escapes them itself)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from foundation_helpers import gemm_definition_record

# OSC retitle + BEL, clear screen, colour; a C1 CSI; carriage return; a right-to-left override
ESCAPES = "\x1b]0;PWNED\x07\x1b[2J\x1b[31m"
C1 = "\x9b31m"
RAW = ("\x1b", "\x07", "\x9b", "\r", "\u202e")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ikdata", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def hostile_dataset(tmp_path) -> tuple[Path, str]:
    """One GEMM workload whose receipt carries escape sequences in engine, model and request_id."""
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    definition = Definition.from_dict(gemm_definition_record(), origin=USER, source="test")
    writer = DatasetWriter(tmp_path / "ds")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 8)).astype(np.float32)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    added = writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T},
                      {"engine": "sglang" + ESCAPES, "model": "tiny" + C1 + "\r\u202e", "request_id": "r" + ESCAPES,
                       "step": 0, "request": {"prompt": "hi" + C1}})
    writer.commit()
    return tmp_path / "ds", added.row.uuid


def _assert_escaped(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text)
    assert "sglang\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31m" in text
    assert "tiny\\x9b31m\\x0d\\u202e" in text


def test_show_prints_receipt_escapes_as_text(hostile_dataset):
    root, uuid = hostile_dataset
    result = _cli("show", str(root), uuid[:8])
    assert result.returncode == 0, result.stderr
    _assert_escaped(result.stdout)
    assert "request_id: r\\x1b]0;PWNED" in result.stdout


def test_lineage_prints_receipt_escapes_as_text(hostile_dataset):
    root, uuid = hostile_dataset
    result = _cli("lineage", str(root), uuid[:8])
    assert result.returncode == 0, result.stderr
    _assert_escaped(result.stdout)
    assert "hi\\x9b31m" in result.stdout  # the request payload too


def test_json_output_keeps_the_exact_values(hostile_dataset):
    root, uuid = hostile_dataset
    shown = json.loads(_cli("show", str(root), uuid[:8], "--json").stdout)
    assert shown["receipts"][0]["engine"] == "sglang" + ESCAPES
    traced = json.loads(_cli("lineage", str(root), uuid[:8], "--json").stdout)
    assert traced[0]["capture"]["model"] == "tiny" + C1 + "\r\u202e"


def test_an_error_quoting_a_hostile_key_is_escaped_too(hostile_dataset):
    root, _ = hostile_dataset
    result = _cli("show", str(root), "zz" + ESCAPES)
    assert result.returncode == 2  # no such workload: the key the user gave
    assert "Traceback" not in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "zz\\x1b]0;PWNED" in result.stderr


def test_terminal_safe_keeps_newlines_tabs_and_text():
    from ikdata.cli._output import terminal_safe

    assert terminal_safe("a\tb\nc é ✓ 日本") == "a\tb\nc é ✓ 日本"
    assert terminal_safe("\x00\x1b\x7f\x85\x9f\u2028\u2066") == "\\x00\\x1b\\x7f\\x85\\x9f\\u2028\\u2066"
