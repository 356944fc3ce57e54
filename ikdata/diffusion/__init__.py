"""Diffusion, end to end: the noise recipe, capture hooks, trajectories and models, step replay against
the noise floor, the decode check and the views. It plugs into capture and replay through
:mod:`ikdata.judging.families`."""
