"""The feature packages, in declaration order: the one place that names them (:mod:`ikdata.core.features`).

Sampling is asked before diffusion which family owns a definition; operators take what none owns.
"""

from __future__ import annotations

from ikdata.diffusion.feature import FEATURE as DIFFUSION
from ikdata.engines.feature import FEATURE as ENGINES
from ikdata.flashinfer.feature import FEATURE as FLASHINFER
from ikdata.sampling.feature import FEATURE as SAMPLING

FEATURES = (SAMPLING, DIFFUSION, FLASHINFER, ENGINES)
