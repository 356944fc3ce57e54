"""What the command line takes from the features' declarations (:mod:`ikdata.core.features`), read from the registry
each time typer builds a command, so a feature registered later is offered at once and one left out is offered
nowhere: a family's options (``ikdata replay --floor-k``, ``ikdata capture --streams``) and a feature's own
commands (``ikdata noise``)."""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Any, Callable, Optional

import typer
from typer.core import TyperCommand


def family_parameters(command: str) -> list[inspect.Parameter]:
    """Every registered family's declared options of ``command`` as keyword parameters, each help line starting
    with its family's name (``Diffusion: ...``)."""
    from ikdata.core import features

    found = []
    for family, option in features.options(command):
        kind: Any = list[option.type] if option.multiple else option.type
        if option.default is None and option.type is not bool:
            kind = Optional[kind]
        words = f"{family.name.capitalize()}: {option.help[:1].lower()}{option.help[1:]}"
        info = typer.Option(option.flag, metavar=option.metavar, help=words)
        found.append(inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[kind, info],
                                       default=option.default))
    return found


class WithFamilyOptions:
    """A command function whose signature gains the registered families' options of one command; the function
    takes them as ``**family_options`` (by :attr:`ikdata.core.features.Option.name`)."""

    def __init__(self, command: str, function: Callable[..., Any]) -> None:
        functools.update_wrapper(self, function)
        self._command, self._function = command, function

    @property
    def __signature__(self) -> inspect.Signature:
        own = inspect.signature(self._function, eval_str=True)
        kept = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        return own.replace(parameters=[*kept, *family_parameters(self._command)])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function(*args, **kwargs)


def with_family_options(command: str) -> Callable[[Callable[..., Any]], WithFamilyOptions]:
    """Decorate a command function (under ``@app.command``) to offer the families' options of ``command``."""
    return lambda function: WithFamilyOptions(command, function)


def declared(name: str) -> bool:
    """Whether a registered feature declares the command ``name`` as its own (:attr:`Feature.commands`)."""
    from ikdata.core import features

    return name in features.commands()


class FeatureCommand(TyperCommand):
    """A feature's own command: listed and run only while a registered feature declares it; otherwise it is
    hidden from the help and refused as click refuses a command it does not know (exit 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden = self.hidden or not declared(self.name or "")

    def invoke(self, ctx):  # type: ignore[override]
        if not declared(self.name or ""):
            from ikdata.core.errors import UsageError

            raise UsageError(f"no such command {self.name!r}: no registered feature offers it")
        return super().invoke(ctx)


__all__ = ["FeatureCommand", "WithFamilyOptions", "declared", "family_parameters", "with_family_options"]
