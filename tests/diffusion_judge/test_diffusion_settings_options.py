"""The diffusion family's ``settings`` hook: the replay command's options become the trajectory judge's settings,
with the same defaults and the same usage errors as ``ikdata replay`` gives."""

from __future__ import annotations

import pytest

from ikdata.core.errors import UsageError
from ikdata.judging.families import FAMILIES


def _from_options():
    [family] = [f for f in FAMILIES if f.name == "diffusion"]
    return family.hook("settings")


def test_no_options_give_the_default_settings():
    from ikdata.diffusion.settings import Settings

    assert _from_options()({}) == Settings()


def test_options_name_attention_floor_bounds_pipeline_clips_and_seed():
    settings = _from_options()({"pipeline": "ref.py:build", "clip": ["engine.mp4", "abc=other.mp4"],
                                "attention": "math", "floor_attention": "eager", "floor_k": 3.0, "floor_eps": 0.5,
                                "seed": 7})
    assert (settings.reference_attention, settings.alt_attention) == ("math", "eager")
    assert (settings.k, settings.eps) == (3.0, 0.5)
    assert settings.pipeline == "ref.py:build" and settings.seed == 7
    assert settings.clip_for("abcdef") == "other.mp4" and settings.clip_for("xyz") == "engine.mp4"


def test_floor_attention_none_judges_without_a_floor():
    assert _from_options()({"floor_attention": "none"}).alt_attention is None


@pytest.mark.parametrize("options, message", [
    ({"attention": "flashy"}, "--attention"),
    ({"attention": "math", "floor_attention": "math"}, "--floor-attention math"),
    ({"floor_k": -1.0}, "--floor-k and --floor-eps must be >= 0"),
    ({"seed": 2**64}, "--seed"),
])
def test_bad_options_are_usage_errors(options, message):
    with pytest.raises(UsageError, match=message):
        _from_options()(options)
