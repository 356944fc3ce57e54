"""The noise recipe cpu-randn-float32/1: digests agree with the earlier clip tool's formula, the CLI."""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.diffusion import noise
from ikdata.core.errors import UsageError


def _seed_tool_digest(seed: int, shapes: dict) -> str:
    """The earlier tool's recipe and digest, written out from its description (the facts to match)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(int(seed))
    tensors = {name: torch.randn(tuple(shape), generator=g, dtype=torch.float32) for name, shape in shapes.items()}
    h = hashlib.sha256(b"cpu-randn-float32/1")
    for name, t in tensors.items():
        h.update(f"|{name}:{'x'.join(str(d) for d in t.shape)}|".encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("seed,shapes", [(42, {"video": (1, 128, 3, 4, 6), "audio": (1, 8, 25, 16)}),
                                         (0, {"video": (1, 4, 5, 16, 16)}), (2**40 + 3, {"image": (2, 3, 8, 8)})])
def test_digest_matches_the_seed_tool(seed, shapes):
    streams = noise.streams_of(shapes)
    assert noise.recipe_digest(seed, streams) == _seed_tool_digest(seed, shapes)


def test_digest_is_pinned():
    streams = [noise.Stream("video", (1, 4, 3, 4, 4)), noise.Stream("audio", (1, 2, 5, 2))]
    assert noise.recipe_digest(42, streams) == "8b2d6002224ee77d1e78b0d9f7457b6670581c89d167760ad9617c1bbdf23273"


def test_digest_depends_on_order_names_and_shapes():
    a = noise.recipe_digest(1, [noise.Stream("video", (2, 3)), noise.Stream("audio", (4,))])
    assert a != noise.recipe_digest(1, [noise.Stream("audio", (4,)), noise.Stream("video", (2, 3))])
    assert a != noise.recipe_digest(1, [noise.Stream("video", (3, 2)), noise.Stream("audio", (4,))])
    assert a != noise.recipe_digest(1, [noise.Stream("latent", (2, 3)), noise.Stream("audio", (4,))])


def test_digest_of_numpy_equals_digest_of_torch():
    tensors = noise.draw(5, [noise.Stream("video", (2, 3, 4))])
    t = tensors["video"]
    assert noise.digest([("video", (2, 3, 4), t)]) == noise.digest([("video", (2, 3, 4), t.numpy())])


def test_digest_refuses_other_dtypes():
    import numpy as np

    with pytest.raises(UsageError, match="recipe draws float32"):
        noise.digest([("video", (2,), np.zeros(2, dtype=np.float64))])


@pytest.mark.parametrize("text", ["video", "video=", "video=1,x", "video=0,3", "=1,2", "video=1;2", "v ideo=1"])
def test_malformed_shape_is_refused(text):
    with pytest.raises(UsageError) as error:
        noise.parse_shape(text)
    assert str(error.value) == (f"bad --shape {text!r}; expected NAME=D0,D1,... with positive integers, "
                                "e.g. video=1,128,3,4,6")


def test_cli_prints_the_digest_and_saves_the_tensors(tmp_path):
    from safetensors.torch import load_file

    target = tmp_path / "noise.safetensors"
    result = CliRunner().invoke(app, ["noise", "42", "--shape", "video=1,4,3,4,4", "--shape", "audio=1,2,5,2",
                                      "--save", str(target), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["digest"] == "8b2d6002224ee77d1e78b0d9f7457b6670581c89d167760ad9617c1bbdf23273"
    assert document["recipe"] == "cpu-randn-float32/1"
    assert document["streams"] == [{"name": "video", "shape": [1, 4, 3, 4, 4]}, {"name": "audio", "shape": [1, 2, 5, 2]}]
    saved = load_file(str(target))
    order = [s["name"] for s in document["streams"]]  # the file keeps no order: the recipe's order is video, audio
    assert noise.digest([(n, tuple(saved[n].shape), saved[n]) for n in order]) == document["digest"]


def test_cli_malformed_shape_exits_2_and_writes_nothing(tmp_path):
    target = tmp_path / "noise.safetensors"
    result = CliRunner().invoke(app, ["noise", "1", "--shape", "video=1,x", "--save", str(target)])
    assert result.exit_code == 2
    assert "bad --shape 'video=1,x'; expected NAME=D0,D1,..." in result.output
    assert not target.exists()


def test_cli_refuses_a_stream_given_twice():
    result = CliRunner().invoke(app, ["noise", "1", "--shape", "video=2", "--shape", "video=3"])
    assert result.exit_code == 2
    assert "stream 'video' given twice" in result.output
