"""Trust beyond DESIGN.md's basic rule: definitions instantiated from shipped templates.

Capture instantiates shipped templates (``dense_gemm_bf16_nt`` with its N and K
fixed, named ``dense_gemm_bf16_nt_n{N}_k{K}``) into the dataset. Such a
definition is as trustworthy as its template only if it is exactly what the
template would produce. Capture owns that rule; this module asks it through
one lookup and trusts nothing when capture does not provide it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from ikdata.definitions import Definition


def instance_trusted_digests(definitions: Mapping[str, Definition]) -> frozenset[str]:
    """Digests of the given definitions (by name) that are exact instances of shipped templates.

    Uses ``ikdata.capture.templates.trusted_instances(definitions)`` when capture
    provides it (name -> the instance as the shipped template gives it);
    otherwise nothing is trusted this way.
    """
    try:
        from ikdata.capture import templates
    except ImportError:
        return frozenset()
    helper = getattr(templates, "trusted_instances", None)
    if helper is None:
        return frozenset()
    return frozenset(instance.digest for instance in helper(dict(definitions)).values())


__all__ = ["instance_trusted_digests"]
