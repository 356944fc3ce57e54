"""The trust rule (DESIGN.md contract 6): whether a definition's reference may run. Decided here only.

A reference is Python source, so it runs only when its definition is trusted:

- shipped with ikdata (origin ``shipped``), or read from a folder the user named (``user``);
- its digest was passed explicitly (``--trust DIGEST``);
- it is identical (same digest) to a trusted definition of the same name: a dataset's copy
  of a shipped or user definition, or an exact instance of a shipped template
  (``dense_gemm_bf16_nt_n{N}_k{K}``, see :func:`ikdata.core.templates.trusted_instances`),
  which :attr:`ikdata.core.dataset.Dataset.trusted_definitions` lists by name.

A definition read from a dataset (origin ``dataset``) is trusted by nothing else: a
dataset pulled from elsewhere does not get to run code by being replayed or imported.
This module imports no other definition module, so that :mod:`ikdata.core.definitions`
can call it.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping, Protocol

from ikdata.core.errors import UntrustedReference


class Definition(Protocol):
    """What the rule reads of a :class:`ikdata.core.definitions.Definition` (not imported: it imports us)."""

    name: str
    origin: str
    source: str

    @property
    def digest(self) -> str: ...

SHIPPED = "shipped"  # origin of definitions installed with ikdata
USER = "user"        # origin of definitions from a folder the user named
DATASET = "dataset"  # origin of definitions read from a dataset: untrusted
TRUSTED_ORIGINS = (SHIPPED, USER)


def is_trusted(definition: Definition, *, digests: Collection[str] = (),
               trusted: Mapping[str, Any] | None = None) -> bool:
    """Whether ``definition``'s reference may run.

    Args:
        definition: any definition, wherever it was read.
        digests: definition digests the user trusts explicitly.
        trusted: definitions trusted by name (shipped, user-named folders, exact template instances);
            an identical definition of the same name is trusted.

    Example:
        >>> is_trusted(ds.definitions["gemm"], trusted=ds.trusted_definitions)
        False
    """
    if definition.origin in TRUSTED_ORIGINS or definition.digest in digests:
        return True
    twin = (trusted or {}).get(definition.name)
    return twin is not None and twin.digest == definition.digest


def require_trusted(definition: Definition, *, digests: Collection[str] = (),
                    trusted: Mapping[str, Any] | None = None) -> None:
    """Refuse a definition that :func:`is_trusted` does not trust.

    Raises:
        UntrustedReference: with the digest to pass and where the definition came from.
    """
    if not is_trusted(definition, digests=frozenset(digests), trusted=trusted):
        raise UntrustedReference(definition.name, definition.digest, definition.source or "a dataset")


__all__ = ["DATASET", "SHIPPED", "TRUSTED_ORIGINS", "USER", "is_trusted", "require_trusted"]
