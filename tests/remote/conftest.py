"""Fixtures of the sharing tests: a real S3 API server (moto) and a Hub stand-in, both on loopback.

Every backend runs the same contract (``remote_url``): a local folder, file://,
memory://, s3:// against moto's server, and hf:// against ``hub_server.py``
through the real huggingface_hub client.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

BUCKET = "ikdata-test"


@pytest.fixture(scope="session")
def s3_server():
    """moto's real S3 server on 127.0.0.1 with a free port (one per pytest process: each xdist worker has its
    own, bound to port 0 so the kernel picks one no other worker holds); yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    app = server._server.app

    def counted(environ, start_response):
        _S3_REQUESTS.append(f"{environ['REQUEST_METHOD']} {environ.get('PATH_INFO', '')}?"
                            f"{environ.get('QUERY_STRING', '')}")
        return app(environ, start_response)

    server._server.app = counted
    yield f"http://127.0.0.1:{port}"
    server.stop()


_S3_REQUESTS: list[str] = []


@pytest.fixture
def s3_requests(s3_env) -> list[str]:
    """Every request the S3 server receives from now on, as "METHOD /path?query"."""
    _S3_REQUESTS.clear()
    return _S3_REQUESTS


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """Point boto at the moto server with dummy credentials; create the test bucket."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    return s3_server


@pytest.fixture(scope="session")
def hub_server():
    """The Hub stand-in (tests/remote/hub_server.py) on a free loopback port (one per xdist worker, port 0 bound
    by the server itself); yields its endpoint."""
    from hub_server import HubServer

    server = HubServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def hub_env(hub_server, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub_server.endpoint)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return hub_server


from remote_helpers import BACKENDS, url_for  # noqa: E402


@pytest.fixture(params=BACKENDS)
def remote_url(request, tmp_path) -> str:
    """One contract, every backend: a fresh, empty remote."""
    return url_for(request.param, request, tmp_path)


@pytest.fixture
def make_dataset(tmp_path, gemm_record):
    """Factory: a committed ikdata dataset with ``rows`` small GEMM workloads (distinct per ``seed``)."""

    def make(name: str, rows: int = 3, *, seed: int = 0, start: int = 0) -> Path:
        from ikdata.core.definitions import USER, Definition
        from ikdata.core.writer import DatasetWriter

        root = tmp_path / name
        definition = Definition.from_dict(gemm_record, origin=USER, source="test")
        writer = DatasetWriter(root)
        rng = np.random.default_rng(seed)
        w = rng.standard_normal((4, 8)).astype(np.float32)
        for i in range(start, start + rows):
            a = rng.standard_normal((i % 5 + 1, 8)).astype(np.float32)
            writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T},
                       {"engine": "test", "model": "tiny", "request_id": f"s{seed}-r{i}", "step": i})
        writer.commit()
        return root

    return make
