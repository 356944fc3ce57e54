"""Configuration: sizes, steps, the env var, and usage errors that stop the command before it starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ikdata.capture.config import CaptureConfig, parse_size, parse_steps
from ikdata.cli import app
from ikdata.core.errors import UsageError


@pytest.mark.parametrize("text, expected", [("64MB", 64_000_000), ("1GiB", 1 << 30), ("512KiB", 512 << 10),
                                            ("4096", 4096), ("1.5G", 1_500_000_000), ("10 mb", 10_000_000)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "12XB", "-5MB", "1e9"])
def test_parse_size_refuses(text):
    with pytest.raises(UsageError, match="bad size"):
        parse_size(text)


def test_parse_steps():
    assert parse_steps("0,4,7") == (0, 4, 7)
    assert parse_steps("0-3,8,2") == (0, 1, 2, 3, 8)
    with pytest.raises(UsageError, match="bad --steps '3-1'"):
        parse_steps("3-1")
    with pytest.raises(UsageError, match="bad --steps"):
        parse_steps("a")


def test_config_round_trips_through_the_env_var():
    config = CaptureConfig(into="/d", only=("gemm",), steps=(0, 2), max_bytes=10, provenance={"model": "m"})
    assert CaptureConfig.from_env({"IKDATA_CAPTURE": config.to_env()}) == config
    assert CaptureConfig.from_env({"IKDATA_CAPTURE": "/plain/path"}).into == "/plain/path"
    assert CaptureConfig.from_env({"IKDATA_CAPTURE": config.to_env(), "IKDATA_CAPTURE_STRICT": "1"}).strict
    assert CaptureConfig.from_env({}) is None
    with pytest.raises(UsageError, match="unknown keys \\['bogus'\\]"):
        CaptureConfig.from_json('{"into": "/d", "bogus": 1}')


def _capture(tmp_path: Path, *options: str):
    """Run the CLI with a command that would leave a marker file if it ever started."""
    marker = tmp_path / "started"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    result = CliRunner().invoke(app, ["capture", *options, "--", *command])
    return result, marker


def test_bad_size_is_a_usage_error_before_the_command_starts(tmp_path):
    result, marker = _capture(tmp_path, "--into", str(tmp_path / "d"), "--max-bytes", "lots")
    assert result.exit_code == 2
    assert "bad size 'lots'; expected a number with an optional unit such as 64MB" in result.output
    assert not marker.exists()


def test_unknown_only_name_is_a_usage_error(tmp_path):
    result, marker = _capture(tmp_path, "--into", str(tmp_path / "d"), "--only", "gemm,flash_mla")
    assert result.exit_code == 2
    assert ("--only: unknown name(s) flash_mla; expected an op type (activation, attention, conv, embedding, gemm, "
            "norm, rope, sampling)") in result.output
    assert not marker.exists()


def test_only_accepts_op_types_templates_and_instances(tmp_path):
    result, marker = _capture(tmp_path, "--into", str(tmp_path / "d"),
                              "--only", "norm,dense_gemm_bf16_nt,sdpa_causal_bf16_h32_kv8_d128")
    # accepted (not 2): the command ran; it never imports torch, so nothing was captured, which exits 1 (issue 32)
    assert result.exit_code == 1, result.output
    assert "no process of the command imported torch" in result.output
    assert marker.exists()


def test_unwritable_folder_is_a_usage_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result, marker = _capture(tmp_path, "--into", str(blocker / "d"))
    assert result.exit_code == 2
    assert f"--into {blocker / 'd'}: cannot write there (Not a directory); choose a writable folder" in result.output
    assert not marker.exists()


def test_folder_of_another_kind_is_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    result, marker = _capture(tmp_path, "--into", str(other))
    assert result.exit_code == 2
    assert "folder holds files but no ikdata dataset; choose an empty folder" in result.output
    assert not marker.exists()


def test_missing_adapter_and_definitions_are_usage_errors(tmp_path):
    result, marker = _capture(tmp_path, "--into", str(tmp_path / "d"), "--adapter", "no_such_adapter_mod")
    assert result.exit_code == 2
    assert "--adapter no_such_adapter_mod: no such module" in result.output
    result, marker = _capture(tmp_path, "--into", str(tmp_path / "d"), "--definitions", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert "no such folder; expected a folder of definition JSON files" in result.output
    assert not marker.exists()


def test_command_that_cannot_run(tmp_path):
    result = CliRunner().invoke(app, ["capture", "--into", str(tmp_path / "d"), "--", "/no/such/program"])
    assert result.exit_code == 2
    assert "cannot run '/no/such/program'" in result.output


def test_exit_status_of_the_command_is_passed_on(tmp_path):
    result = CliRunner().invoke(app, ["capture", "--into", str(tmp_path / "d"), "--",
                                      sys.executable, "-c", "raise SystemExit(3)"])
    assert result.exit_code == 3
    assert "the command exited with status 3" in result.output


def test_public_api_is_exported():
    import ikdata.capture

    assert sorted(ikdata.capture.__all__) == sorted(
        ["CaptureConfig", "current", "flush", "install", "instantiate", "load_templates", "parse_size",
         "parse_steps", "request", "step", "trusted_instances", "uninstall", "write_request_file"])
    assert all(hasattr(ikdata.capture, name) for name in ikdata.capture.__all__)


def test_capture_help_lists_every_option():
    result = CliRunner().invoke(app, ["capture", "--help"])
    assert result.exit_code == 0
    for option in ("--into", "--definitions", "--only", "--steps", "--max-per-definition", "--max-bytes",
                   "--step-module", "--request-file", "--adapter", "--strict"):
        assert option in result.output
