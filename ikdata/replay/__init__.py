"""Replay: rerun trusted references on captured inputs and judge them against the captured outputs.

Only the torch-free parts are imported here (:func:`recheck`, the tolerance
table); the runner and the judges import torch and live in their own modules.
"""

from ikdata.core.tolerances import DEFAULT_TOLERANCES, table
from ikdata.core.verdicts import recheck

__all__ = ["DEFAULT_TOLERANCES", "recheck", "table"]
