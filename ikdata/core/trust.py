"""Trust beyond DESIGN.md's basic rule: definitions instantiated from shipped templates.

Capture instantiates shipped templates (``dense_gemm_bf16_nt`` with its N and K
fixed, named ``dense_gemm_bf16_nt_n{N}_k{K}``) into the dataset. Such a
definition is as trustworthy as its template only if it is exactly what the
template would produce (:func:`ikdata.core.templates.trusted_instances`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from ikdata.core.definitions import Definition


def instance_trusted_digests(definitions: Mapping[str, Definition]) -> frozenset[str]:
    """Digests of the given definitions (by name) that are exact instances of shipped templates."""
    from ikdata.core.templates import trusted_instances

    return frozenset(instance.digest for instance in trusted_instances(dict(definitions)).values())


__all__ = ["instance_trusted_digests"]
