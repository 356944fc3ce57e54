"""The judge-family seam: every family of judges declared once, and iterated by every path that judges.

See :mod:`ikdata.judging.families`.
"""
