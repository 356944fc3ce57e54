"""Fixtures of the Ray tests: one real local Ray cluster for the module, and a moto S3 server on loopback.

The S3 endpoint and dummy credentials are put in the environment before Ray starts, so the
workers inherit them as they would on a real cluster (credentials come from the environment,
never from the dataset).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from replay.conftest import _private_cache, build  # noqa: F401  (the replay tests' dataset factory)

BUCKET = "ikdata-ray"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local Ray cluster (2 CPUs) with a moto S3 server's endpoint in every worker's environment."""
    ray = pytest.importorskip("ray")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: the kernel picks
    server.start()
    port = server.get_host_and_port()[1]
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                                            "AWS_ENDPOINT_URL", "IKDATA_CACHE_DIR", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=endpoint, IKDATA_CACHE_DIR=str(tmp_path_factory.mktemp("ray-cache")))
    # Ray (>= 2.5x) writes its cluster token to ~/.ray/auth_token and caches it in this process; every test has
    # its own HOME (tests/conftest.py), so a cluster a test restarts would look for it in that HOME and its GCS
    # would not start. The token is made here, in this worker's session HOME, and named for every Ray process.
    token = Path(os.path.expanduser("~")) / ".ray" / "auth_token"
    if not token.exists():
        token.parent.mkdir(parents=True, exist_ok=True)
        token.write_text(secrets.token_hex(32))  # as Ray makes one: 256 random bits
        token.chmod(0o600)
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        yield endpoint
    finally:
        ray.shutdown()
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
