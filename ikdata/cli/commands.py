"""Every command registered on :data:`ikdata.cli.app`, for code that imports this module for that effect.

:func:`ikdata.cli.load` is the one place that knows the command modules (:data:`ikdata.cli.MODULES`); command
modules import torch only inside command bodies, so loading them all stays torch-free.
"""

from ikdata.cli import load

app = load()

__all__ = ["app"]
