"""What a scheduler step reads besides (x, out): recorded at capture, replayed in the chain check.

A Diffusers scheduler's ``step`` is a function of more than its arguments: multistep solvers read the
model outputs of earlier steps (DPM-Solver, UniPC, DEIS, PNDM), two-stage ones the first stage's sample
and derivative (Heun, KDPM2), every one its step index; stochastic ones draw noise from the generator
(DDPM, DDIM with eta > 0, Euler ancestral) or take it as ``variance_noise``. Capture records, per step,
the state attributes :data:`STATE_FIELDS` as they were when the step began, the noise the step drew
(in draw order) or was given, its scalar keyword arguments, and the arguments the pipeline passed to
``set_timesteps``; the chain check (:func:`replay_step`) puts that state on a copy of the reference
scheduler (built by its own ``set_timesteps`` with the recorded arguments), feeds the recorded noise
to its draws and recomputes ``x_next`` bit for bit.

The schedule itself (timesteps, sigmas, alphas) is never taken from the record: it is the reference's,
so a wrong sigma in the engine shows as a chain error at that step.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ikdata.core.digest import finite_json, from_finite_json

# the attributes a diffusers scheduler's step reads and writes besides its schedule (diffusers 0.3x-0.4x)
STATE_FIELDS = ("_step_index", "_begin_index", "model_outputs", "lower_order_nums", "timestep_list", "last_sample",
                "this_order", "order_list", "disable_corrector", "prev_derivative", "dt", "sample", "ets", "counter",
                "cur_model_output", "cur_sample", "derivatives", "last_noise", "this_predictor_order",
                "this_corrector_order")  # the last three: SASolver's predictor-corrector
STEP_TENSOR_ARGS = ("model_output", "timestep", "sample", "generator", "return_dict", "variance_noise")
NOISE_SOURCES = ("randn", "variance_noise")


@dataclass
class StepRecord:
    """What capture keeps of one step besides (x, out, x_next): host copies are the caller's objects."""

    state: dict[str, Any] = field(default_factory=dict)  # name -> encoded value (tensors as the caller's copies)
    noise: list[tuple[str, Any]] = field(default_factory=list)  # (source, copy) in draw order
    args: dict[str, Any] = field(default_factory=dict)  # scalar keyword arguments of step (eta, s_churn, ...)
    unrecorded: list[str] = field(default_factory=list)  # state or arguments that could not be recorded


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "element_size")


def encode(value: Any, copy_tensor: Callable[[Any], Any]) -> Any:
    """A state value as JSON-able data: scalars as they are (non-finite tagged), tensors as
    ``{"tensor": copy_tensor(t)}``, lists as ``{"list": [...]}``. Raises TypeError on anything else."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return finite_json(value)
    if _is_tensor(value):
        return {"tensor": copy_tensor(value)}
    if isinstance(value, (list, tuple)):
        return {"list": [encode(v, copy_tensor) for v in value]}
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a numpy scalar
        return encode(value.item(), copy_tensor)
    raise TypeError(f"a {type(value).__name__}")


def decode(value: Any, load: Callable[[Any], Any]) -> Any:
    """The inverse of :func:`encode`, ``load`` turning a tensor descriptor into a tensor."""
    if isinstance(value, dict) and set(value) == {"tensor"}:
        return load(value["tensor"])
    if isinstance(value, dict) and set(value) == {"list"}:
        return [decode(v, load) for v in value["list"]]
    return from_finite_json(value)


def snapshot(sched: Any, original: Callable, args: tuple, kwargs: dict,
             copy_tensor: Callable[[Any], Any]) -> StepRecord:
    """The state a step of ``sched`` is about to read, and its scalar arguments (call before the step)."""
    found = StepRecord()
    own = vars(sched)
    for name in STATE_FIELDS:
        if name not in own:
            continue
        try:
            found.state[name] = encode(own[name], copy_tensor)
        except TypeError as exc:
            found.unrecorded.append(f"state {name} ({exc})")
    bound = _bound_step(sched, original, args, kwargs)
    for name, value in bound.items():
        if name == "self" or name in STEP_TENSOR_ARGS:
            continue
        if value is None or isinstance(value, (bool, int, float)):
            found.args[name] = finite_json(value)
        else:
            found.unrecorded.append(f"argument {name} (a {type(value).__name__})")
    noise = bound.get("variance_noise")
    if _is_tensor(noise):
        found.noise.append(("variance_noise", copy_tensor(noise)))
    return found


def _bound_step(sched: Any, original: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The step's arguments by name, bound to the first ``step`` in the class's MRO that names them (an
    engine's subclass may take ``*args, **kwargs`` and pass them on)."""
    candidates = [original] + [getattr(k.__dict__["step"], "__ikdata_original__", k.__dict__["step"])
                               for k in type(sched).__mro__ if callable(k.__dict__.get("step"))]
    for function in candidates:
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            continue
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
            continue
        try:
            return dict(signature.bind(sched, *args, **kwargs).arguments)
        except TypeError:
            continue
    return dict(kwargs)


def encode_arguments(original: Callable, sched: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The arguments of a ``set_timesteps`` call as JSON data (``device`` left out: replay runs where it runs):
    numbers as they are, numpy arrays and tensors as ``{"values", "kind", "dtype"}``."""
    try:
        bound = inspect.signature(original).bind(sched, *args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = dict(kwargs)
    found: dict[str, Any] = {}
    for name, value in bound.items():
        if name in ("self", "device"):
            continue
        if value is None or isinstance(value, (bool, int, float, str)):
            found[name] = finite_json(value)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
            found[name] = {"values": finite_json(list(value)), "kind": "list", "dtype": None}
        elif _is_tensor(value) or type(value).__module__ == "numpy":
            kind = "tensor" if hasattr(value, "element_size") else "ndarray"
            values = value.tolist() if hasattr(value, "tolist") else list(value)
            found[name] = {"values": finite_json(values), "kind": kind, "dtype": str(value.dtype)}
        else:
            found[name] = {"unrecorded": type(value).__name__}
    return found


MAX_STEPS = 10_000  # the most steps a schedule takes unless a record lists more (trajectories.MAX_SCHEDULE_STEPS)
MAX_ORDER = 16  # solver orders (DPM-Solver, UniPC, DEIS use 1 to 3): a list or loop per order is made from it
MAX_SETTING = 1 << 20  # any other integer a scheduler setting or set_timesteps argument gives
MAX_NESTING = 4  # array values nest no deeper than this
# the dtypes a recorded set_timesteps array may name: numbers, never a string or object dtype that sizes itself
ARRAY_DTYPES = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
                          "bfloat16"})


def _elements(values: Any, depth: int = 0) -> int | None:
    """The numbers a nested list holds, or None when it nests deeper than :data:`MAX_NESTING` or holds
    anything but numbers (and null, a non-finite number's tag)."""
    if isinstance(values, list):
        if depth >= MAX_NESTING:
            return None
        total = 0
        for value in values:
            found = _elements(value, depth + 1)
            if found is None:
                return None
            total += found
        return total
    if values is None or isinstance(values, (bool, int, float, str)):
        return 1
    return None


def _integer_problems(pointer: str, name: str, value: Any, cap: int) -> list[tuple[str, str]]:
    if not isinstance(value, int) or isinstance(value, bool):
        return []
    low = name.lower()
    if "order" in low and value > MAX_ORDER:
        return [(pointer, f"{name} is {value}; expected at most {MAX_ORDER} (a solver's order)")]
    if "step" in low and value > cap:
        return [(pointer, f"{name} is {value}; expected at most {cap:,} (no schedule takes more)")]
    if abs(value) > MAX_SETTING:
        return [(pointer, f"{name} is {value}; expected at most {MAX_SETTING:,} in size")]
    return []


def limit_problems(scheduler: Any, *, cap: int) -> list[tuple[str, str]]:
    """(JSON pointer, what is wrong and what was expected) for every size a trajectory's ``scheduler`` record
    gives that would size an allocation before replay could judge it: solver orders (at most
    :data:`MAX_ORDER`), step counts (at most ``cap``), other integer settings (:data:`MAX_SETTING`), list
    settings (``trained_betas``: at most ``cap`` numbers), and each recorded ``set_timesteps`` argument: its
    step count, its arrays' lengths (``cap`` numbers, nested at most :data:`MAX_NESTING`) and their dtype
    (one of :data:`ARRAY_DTYPES`: ``S200000000`` would size each element at 200 MB)."""
    found: list[tuple[str, str]] = []
    if not isinstance(scheduler, dict):
        return found
    config = scheduler.get("config")
    for name, value in (config.items() if isinstance(config, dict) else ()):
        pointer = f"/scheduler/config/{name}"
        if isinstance(value, list):
            count = _elements(value)
            if count is None or count > cap:
                found.append((pointer, f"scheduler setting {name} holds more than {cap:,} numbers, or nests deeper "
                                       f"than {MAX_NESTING}; expected a schedule's array"))
        elif "step" not in name.lower():  # step counts: limit_problems of the trajectory names them
            found += _integer_problems(pointer, f"scheduler setting {name}", value, cap)
    calls = scheduler.get("set_timesteps")
    for stream, arguments in (calls.items() if isinstance(calls, dict) else ()):
        for name, value in (arguments.items() if isinstance(arguments, dict) else ()):
            pointer = f"/scheduler/set_timesteps/{stream}/{name}"
            if isinstance(value, dict) and "values" in value:
                count = _elements(value["values"])
                if count is None or count > cap:
                    found.append((pointer, f"set_timesteps argument {name} holds more than {cap:,} numbers, or "
                                           f"nests deeper than {MAX_NESTING}; expected a schedule's array"))
                dtype = value.get("dtype")
                if dtype is not None and str(dtype).replace("torch.", "") not in ARRAY_DTYPES:
                    found.append((pointer + "/dtype", f"set_timesteps argument {name} has dtype {str(dtype)[:40]!r}; "
                                                      f"expected one of {', '.join(sorted(ARRAY_DTYPES))}"))
            else:
                found += _integer_problems(pointer, f"set_timesteps argument {name}", value, cap)
    return found


def decode_arguments(recorded: dict[str, Any], *, cap: int | None = None) -> dict[str, Any]:
    """``set_timesteps`` keyword arguments from :func:`encode_arguments`' record, each size bounded first
    (:func:`limit_problems`; ``cap``: the most steps, default :data:`MAX_STEPS`).

    Raises:
        ValueError: an argument capture could not record, or one beyond the limits.
    """
    import numpy as np
    import torch

    cap = MAX_STEPS if cap is None else cap
    refused = limit_problems({"set_timesteps": {"": recorded}}, cap=cap) if isinstance(recorded, dict) else \
        [("", "set_timesteps arguments must be an object")]
    if refused:
        raise ValueError("; ".join(message for _, message in refused))
    found: dict[str, Any] = {}
    for name, value in recorded.items():
        if isinstance(value, dict) and "unrecorded" in value:
            raise ValueError(f"set_timesteps argument {name} (a {value['unrecorded']}) was not recorded")
        if isinstance(value, dict) and "values" in value:
            values = from_finite_json(value["values"])
            if value.get("kind") == "ndarray":
                found[name] = np.array(values, dtype=value.get("dtype"))
            elif value.get("kind") == "tensor":
                found[name] = torch.tensor(values, dtype=getattr(torch, str(value["dtype"]).replace("torch.", "")))
            else:
                found[name] = values
        else:
            found[name] = from_finite_json(value)
    return found


@contextlib.contextmanager
def recorded_noise(draws: list[Any]) -> Iterator[list[Any]]:
    """``torch.randn`` returns ``draws`` in order while the block runs (the reference step's noise is the
    engine's); yields the list of draws not yet taken.

    Raises:
        ValueError: a draw beyond those recorded, or of another shape.
    """
    import torch

    left = list(draws)
    original = torch.randn

    def randn(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None, layout: Any = None,
              **_: Any) -> Any:
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)) else tuple(size)
        if not left:
            raise ValueError(f"the reference step draws noise of shape {list(shape)}, the engine's step drew "
                                f"{len(draws)} noise tensor(s) and no more")
        drawn = left.pop(0)
        if tuple(drawn.shape) != shape:
            raise ValueError(f"the reference step draws noise of shape {list(shape)}, the engine's step drew "
                                f"{list(drawn.shape)}")
        return drawn.to(dtype=dtype or drawn.dtype, device=device or drawn.device)

    torch.randn = randn
    try:
        yield left
    finally:
        torch.randn = original


def replay_step(sched: Any, index: int, step: dict, out: Any, x: Any, load: Callable[[Any], Any]) -> Any:
    """The reference scheduler's step ``index`` on the engine's (out, x) with the step's recorded state,
    arguments and noise: what ``x_next`` must be.

    A step recorded before states were (no ``state``) gets the step index only, and DDIM eta 0.

    Raises:
        ValueError: the reference step draws other noise than the engine's step recorded.
    """
    step_sched = copy.copy(sched)
    state = step.get("state")
    if state is None:
        for name in STATE_FIELDS:  # never share a mutable list with the reference
            if isinstance(vars(sched).get(name), list):
                setattr(step_sched, name, list(vars(sched)[name]))
        if hasattr(step_sched, "_step_index"):
            step_sched._step_index = index
    else:
        for name, value in state.items():
            if name in STATE_FIELDS:
                setattr(step_sched, name, decode(value, load))
    kwargs = {n: from_finite_json(v) for n, v in (step.get("step_args") or {}).items()}
    if state is None and "DDIM" in type(sched).__name__:
        kwargs.setdefault("eta", 0.0)
    noise = step.get("noise") or []
    for item in noise:
        if item.get("source") == "variance_noise":
            kwargs["variance_noise"] = load(item["tensor"])
    draws = [load(item["tensor"]) for item in noise if item.get("source") == "randn"]
    with recorded_noise(draws) as left:
        result = step_sched.step(out, sched.timesteps[index], x, return_dict=False, **kwargs)
    if left:
        raise ValueError(f"the engine's step drew {len(draws)} noise tensor(s), the reference step "
                            f"{len(draws) - len(left)}")
    return result[0]


def chain_error(x_next: Any, reference: Any) -> float:
    """‖x_next − reference‖ / ‖x_next‖ in float64 (0 when both are zero; inf on another shape)."""
    if tuple(x_next.shape) != tuple(reference.shape):
        return math.inf
    a, b = x_next.double(), reference.double()
    na, d = float(a.norm()), float((a - b).norm())
    return d / na if na else (0.0 if d == 0 else math.inf)


__all__ = ["ARRAY_DTYPES", "MAX_ORDER", "MAX_SETTING", "NOISE_SOURCES", "STATE_FIELDS", "StepRecord", "chain_error",
           "decode", "decode_arguments", "encode", "encode_arguments", "limit_problems", "recorded_noise",
           "replay_step", "snapshot"]
