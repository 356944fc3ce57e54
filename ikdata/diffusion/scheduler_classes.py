"""The scheduler classes a trajectory record may name: the ones diffusers exports, and no other class."""

from __future__ import annotations

from ikdata.core.errors import RecordError


def scheduler_names() -> frozenset[str]:
    """The scheduler class names diffusers exports (its ``diffusers.schedulers`` module), read without
    importing them."""
    import diffusers.schedulers as module

    structure = getattr(module, "_import_structure", None)
    names = {n for values in structure.values() for n in values} if isinstance(structure, dict) else set(dir(module))
    return frozenset(n for n in names if n.endswith("Scheduler") and not n.startswith(("Flax", "_")))


def scheduler_class(name: object, *, where: str | None = None, line: int | None = None) -> type:
    """The diffusers scheduler class a record names: one diffusers exports that subclasses SchedulerMixin;
    no other class is instantiated from a record.

    Raises:
        RecordError: any other name (a model, a pipeline, anything else), located at ``/scheduler/class``.
    """
    import diffusers.schedulers as module

    found = getattr(module, name, None) if isinstance(name, str) and name in scheduler_names() else None
    base = module.SchedulerMixin
    if not (isinstance(found, type) and issubclass(found, base) and found is not base):
        raise RecordError(f"scheduler class {name!r} is not a scheduler diffusers exports; expected a subclass of "
                          "SchedulerMixin from diffusers.schedulers (e.g. FlowMatchEulerDiscreteScheduler, "
                          "DDIMScheduler); replay instantiates no other class a record names",
                          path=where, line=line, pointer="/scheduler/class")
    return found


__all__ = ["scheduler_class", "scheduler_names"]
