"""The scheduler sweep against diffusers' own list of scheduler classes (``diffusers.schedulers``' exports, as replay
reads it): every scheduler diffusers ships is either swept or listed here as not swept yet, so a scheduler diffusers
adds (or one the sweep gains) fails this test until the list says which."""

from __future__ import annotations

import scheduler_sweep

# Shipped by diffusers 0.42 and not in the sweep yet (issue 35's "every scheduler" is open for these): the sweep's
# UNet2DModel loop covers KarrasDiffusionSchedulers and the flow-matching Euler/Heun schedulers only.
NOT_SWEPT = frozenset({
    "AmusedScheduler", "BlockRefinementScheduler", "CMStochasticIterativeScheduler", "CogVideoXDDIMScheduler",
    "CogVideoXDPMScheduler", "ConsistencyDecoderScheduler", "DDIMInverseScheduler", "DDIMParallelScheduler",
    "DDPMParallelScheduler", "DDPMWuerstchenScheduler", "DPMSolverMultistepInverseScheduler", "DiscreteDDIMScheduler",
    "EDMDPMSolverMultistepScheduler", "EntropyBoundScheduler", "FlowMapEulerDiscreteScheduler", "FlowMatchLCMScheduler",
    "HeliosDMDScheduler", "HeliosScheduler", "IPNDMScheduler", "KarrasVeScheduler", "LCMScheduler",
    "LTXEulerAncestralRFScheduler", "MiniMaxH3Scheduler", "PiflowScheduler", "RFD4ProteinaScheduler",
    "RePaintScheduler", "SASolverScheduler", "SCMScheduler", "ScoreSdeVeScheduler", "ScoreSdeVpScheduler",
    "TCDScheduler", "UnCLIPScheduler", "VQDiffusionScheduler"})


def test_every_shipped_scheduler_is_swept_or_listed_as_not_yet():
    from ikdata.diffusion.scheduler_classes import scheduler_names

    shipped = set(scheduler_names())
    swept = {v.cls for v in scheduler_sweep.variants()}
    assert sorted(shipped - swept - NOT_SWEPT) == []  # new in diffusers: sweep it or list it
    assert sorted(NOT_SWEPT - shipped) == []  # gone from diffusers: drop it from the list
    assert sorted(NOT_SWEPT & swept) == []  # swept now: drop it from the list
