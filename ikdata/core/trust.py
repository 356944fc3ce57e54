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

import re
from typing import Any, Collection, Iterable, Mapping, Protocol

from ikdata.core.errors import UntrustedReference, UsageError

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


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


def check_digests(digests: Iterable[str] | None, *, option: str = "--trust") -> tuple[str, ...]:
    """The digests a user trusts explicitly, each a definition's full digest (64 hex digits, any case).

    A shorter or mistyped value would trust nothing and say nothing, so it is refused.

    Raises:
        UsageError: naming the value and the form expected.
    """
    checked = []
    for digest in digests or ():
        text = digest.strip().lower() if isinstance(digest, str) else digest
        if not isinstance(text, str) or not _DIGEST.match(text):
            raise UsageError(f"{option} {digest!r}: not a definition digest; expected the 64 hex digits that the "
                             "refusal printed (--trust trusts one definition by its full digest)")
        checked.append(text)
    return tuple(checked)


__all__ = ["DATASET", "SHIPPED", "TRUSTED_ORIGINS", "USER", "check_digests", "is_trusted", "require_trusted"]
