"""Sampling, end to end: the capture hook at HF's sampler, records, the expected distribution, the
statistical tests, the judge and server completions import. It plugs into capture and replay through
:mod:`ikdata.judging.families`."""
