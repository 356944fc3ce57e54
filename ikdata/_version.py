"""The version of ikdata, alone, so that nothing needs the package face to know it."""

__version__ = "0.1.0"
