"""Definition templates: shipped definitions whose const axes are filled in from what capture observes.

A template is an ordinary, valid definition (so ``read_folder(shipped_folder())``
parses it, and its reference works for any size) with one more field,
``"template"``: the pattern of the names it instantiates, such as
``"dense_gemm_bf16_nt_n{N}_k{K}"``. The axes the pattern names are ``var`` in
the template; an instance makes them ``const`` with the observed values, drops
the ``"template"`` field and tags itself ``ikdata:template=<template name>``.

Instantiation is deterministic, so an instance written into a dataset is
trusted exactly when it is byte-for-byte what instantiating the shipped
template gives: :func:`trusted_instances` checks that by digest.

Example:
    >>> templates = load_templates()
    >>> gemm = templates["dense_gemm_bf16_nt"]
    >>> instantiate(gemm, {"N": 4096, "K": 4096}).name
    'dense_gemm_bf16_nt_n4096_k4096'
"""

from __future__ import annotations

import functools
import re
import string
from dataclasses import dataclass
from typing import Mapping

from ikdata.core.definitions import SHIPPED, Definition, read_folder, shipped_folder
from ikdata.core.errors import DefinitionError

TEMPLATE_TAG = "ikdata:template"


@dataclass(frozen=True)
class Template:
    """A shipped template: the definition, its name pattern and the axes the pattern fills."""

    definition: Definition
    pattern: str
    fills: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.definition.name

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        parts = []
        for literal, field_name, _, _ in string.Formatter().parse(self.pattern):
            parts.append(re.escape(literal))
            if field_name is not None:
                parts.append(f"(?P<{field_name}>[0-9]+)")
        return re.compile("".join(parts) + r"\Z")

    def parse(self, name: str) -> dict[str, int] | None:
        """The const values an instance name carries, or None if the name is not an instance of this template."""
        match = self.regex.match(name)
        return {k: int(v) for k, v in match.groupdict().items()} if match else None


def template_of(definition: Definition) -> Template | None:
    """The Template view of a definition that has a ``"template"`` field, else None."""
    pattern = definition.record.get("template")
    if not pattern:
        return None
    fills = tuple(f for _, f, _, _ in string.Formatter().parse(pattern) if f is not None)
    return Template(definition, pattern, fills)


@functools.lru_cache(maxsize=1)
def load_templates() -> dict[str, Template]:
    """Every shipped template by name (read once per process).

    Read without :func:`~ikdata.core.definitions.read_folder`'s checks: every captured process
    loads them at start, and parsing the references of all shipped definitions cost ~0.4 s
    there; the shipped files are checked by the tests (and by ``ikdata validate`` on any dataset
    that holds an instance), and an instance is trusted only by its digest.
    """
    import orjson

    templates = {}
    for path in sorted(shipped_folder().rglob("*.json")):
        record = orjson.loads(path.read_bytes())
        if isinstance(record, dict) and record.get("template"):
            template = template_of(Definition.from_dict(record, origin=SHIPPED, source=str(path)))
            if template is not None:
                templates[template.definition.name] = template
    return templates


def instantiate(template: Template, values: Mapping[str, int]) -> Definition:
    """The definition with the template's pattern axes made const with ``values``.

    Raises:
        DefinitionError: a pattern axis has no value.
    """
    missing = [a for a in template.fills if a not in values]
    if missing:
        raise DefinitionError(f"template needs values for {missing}", definition=template.name)
    record = {k: v for k, v in template.definition.record.items() if k != "template"}
    axes = {}
    for axis, spec in record["axes"].items():
        if axis in template.fills:
            spec = {k: v for k, v in spec.items() if k != "type"}
            spec = {"type": "const", "value": int(values[axis]), **spec}
        axes[axis] = spec
    record["axes"] = axes
    record["name"] = template.pattern.format(**{a: int(values[a]) for a in template.fills})
    record["tags"] = [t for t in record.get("tags", []) if t != TEMPLATE_TAG] + [f"{TEMPLATE_TAG}={template.name}"]
    return Definition.from_dict(record, origin=SHIPPED, source=f"template {template.name}")


def match_instance(name: str) -> tuple[Template, dict[str, int]] | None:
    """The template an instance name belongs to and the values it carries, if any."""
    for template in load_templates().values():
        values = template.parse(name)
        if values is not None:
            return template, values
    return None


def trusted_instances(dataset_definitions: Mapping[str, Definition]) -> dict[str, Definition]:
    """The dataset definitions that are exact instances of shipped templates, as trusted definitions.

    A definition read from a dataset is untrusted; if its digest equals the
    digest of the shipped template instantiated with the same values, its
    reference is the shipped one and may run. So is one a capture source's declared ``trusts`` hook vouches
    for (a conversion of an installed FlashInfer template): each source decides which are its own. Pass the result to
    ``load_reference(..., trusted_definitions=...)``.

    Example:
        >>> ds = ikdata.open("captures/minilm")
        >>> trusted = trusted_instances(ds.definitions)
        >>> run = load_reference(ds.definitions[name], trusted_definitions=trusted)
    """
    trusted: dict[str, Definition] = {}
    templates = load_templates()
    for name, definition in dataset_definitions.items():
        tag = next((t for t in definition.record.get("tags", []) if t.startswith(TEMPLATE_TAG + "=")), None)
        template = templates.get(tag.split("=", 1)[1]) if tag else None
        if template is None:
            continue
        values = {a: definition.const_axes.get(a) for a in template.fills}
        if any(v is None for v in values.values()):
            continue
        instance = instantiate(template, values)
        if instance.name == name and instance.digest == definition.digest:
            trusted[name] = instance
    from ikdata.core import features

    for source in features.sources() if dataset_definitions else ():  # each source says which are its own
        trusts = source.hook("trusts")
        if trusts is not None:
            trusted.update(trusts(dataset_definitions))
    return trusted


__all__ = ["Template", "TEMPLATE_TAG", "load_templates", "template_of", "instantiate", "match_instance",
           "trusted_instances"]
