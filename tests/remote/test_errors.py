"""Remotes that cannot be used: a clear message, exit 1, and never a traceback."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from ikdata.cli import app


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output
    return result


def test_bucket_that_does_not_exist(s3_env, make_dataset, tmp_path):
    root = make_dataset("src")
    for args in (["push", str(root), "s3://no-such-bucket/x"], ["clone", "s3://no-such-bucket/x", str(tmp_path / "c")],
                 ["ls", "s3://no-such-bucket/x"]):
        result = _run(*args)
        assert result.exit_code == 1, result.output
        assert "s3://no-such-bucket/x: bucket 'no-such-bucket' does not exist at http://127.0.0.1:" in result.output
        assert "create it (aws s3 mb s3://no-such-bucket)" in result.output


def test_unreachable_s3_endpoint(s3_env, make_dataset):
    root = make_dataset("src")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    result = _run("push", str(root), "s3://ikdata-test/x", "--endpoint-url", endpoint)
    assert result.exit_code == 1
    assert f"s3://ikdata-test/x: cannot reach the endpoint {endpoint}" in result.output
    assert "check --endpoint-url / AWS_ENDPOINT_URL and the network" in result.output


def test_wrong_s3_credentials(s3_env, make_dataset, monkeypatch, tmp_path):
    from moto import settings

    root = make_dataset("src")
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto now checks every access key
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    for args in (["push", str(root), "s3://ikdata-test/x"], ["clone", "s3://ikdata-test/x", str(tmp_path / "c")]):
        result = _run(*args)
        assert result.exit_code == 1, result.output
        # push, too, starts with the manifest read (a GET, whose answer names the error)
        assert "the credentials were refused (InvalidAccessKeyId)" in result.output
        assert "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or --profile" in result.output


def test_unreachable_hub(make_dataset, monkeypatch):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    result = _run("push", str(make_dataset("src")), "hf://datasets/org/x")
    assert result.exit_code == 1
    assert f"hf://datasets/org/x: cannot reach {endpoint} to create the repository" in result.output


def test_hub_repository_that_does_not_exist(hub_env, tmp_path):
    result = _run("clone", "hf://datasets/org/never-created", str(tmp_path / "c"))
    assert result.exit_code == 1
    assert "repository org/never-created (dataset) not found at http://127.0.0.1:" in result.output
    assert not (tmp_path / "c").exists()


def test_hub_token_refused(make_dataset, monkeypatch):
    from hub_server import HubServer

    server = HubServer(port=_closed_port(), token="hf_right")
    server.start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_TOKEN", "hf_wrong")
        result = _run("push", str(make_dataset("src")), "hf://datasets/org/x")
    finally:
        server.stop()
    assert result.exit_code == 1
    assert "check HF_TOKEN" in result.output


@pytest.mark.parametrize("url, message", [
    ("hf://org/x", "expected hf://datasets/ORG/NAME[@REVISION][/PATH]"),
    ("s3://", "expected s3://BUCKET[/PREFIX]"),
])
def test_malformed_urls_are_usage_errors(url, message, tmp_path):
    result = _run("clone", url, str(tmp_path / "c"))
    assert result.exit_code == 2 and message in result.output
