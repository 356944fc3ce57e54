"""The generators' draws before the first step, in order: which of them is each stream's noise, and the noise a
recorded draw order gives back.

A pipeline may draw from its generator before it draws the noise (pixel img2img and inpainting: the VAE's
``latent_dist.sample(generator)``), and may be given one generator per image (``generator=[g0, g1]``: each
image's noise drawn from its own generator, concatenated on the batch). Capture notes every draw; a stream's
noise is the first draw (or run of same-shaped draws from distinct generators, one per image) after the previous
stream's that the stream's first latents are made of. When the draws are not simply "stream k is draw k of one
generator", the trajectory's noise record lists them (``draws``: shape, generator index, stream or null; ``seeds``:
one per generator), and replay repeats them: each generator seeded, every draw made in order, the stream's noise
the concatenation of its own draws.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

MAX_DRAWS = 8  # capture notes at most this many draws before the first step


def find(draws: Sequence[tuple[Any, Any]], sample: Any, start: int,
         made_of: Callable[[Any], str | None]) -> tuple[list[int], Any] | None:
    """The indices of the draws (from ``start`` on) that make ``sample`` (``made_of(noise)`` names how, else None),
    and their noise: one draw, or a run of equally shaped draws from distinct generators concatenated on the batch
    (a generator per image); None when no draw makes it."""
    import torch

    n_sample = sample.numel()
    for j in range(start, len(draws)):
        drawn = draws[j][1]
        if drawn.numel() == n_sample and made_of(drawn) is not None:
            return [j], drawn
        if drawn.numel() and n_sample % drawn.numel() == 0 and n_sample // drawn.numel() >= 2:
            n = n_sample // drawn.numel()
            run = list(range(j, j + n))
            if run[-1] >= len(draws):
                continue
            gens = [draws[k][0] for k in run]
            if any(draws[k][1].shape != drawn.shape for k in run) or len({id(g) for g in gens}) != n:
                continue
            joined = torch.cat([draws[k][1] for k in run], dim=0)
            if made_of(joined) is not None:
                return run, joined
    return None


def recipe_equal(draws: Sequence[tuple[Any, Any]], indices: Sequence[int]) -> tuple[bool, str | None]:
    """Whether each draw at ``indices`` is the recipe's: its CPU generator seeded by its ``initial_seed()``, every
    earlier draw from the same generator repeated first (in that draw's dtype: a bf16 draw is the float32
    numbers rounded). Returns (equal, why not)."""
    import torch

    from ikdata.diffusion import noise as noise_mod

    for k in indices:
        generator, drawn = draws[k]
        if not (isinstance(generator, torch.Generator) and generator.device.type == "cpu" and drawn.is_floating_point()):
            return False, "the noise was not drawn as floating point numbers from a CPU torch.Generator"
        earlier = [d for g, d in draws[:k + 1] if g is generator]
        recipe = noise_mod.draw(generator.initial_seed(), [noise_mod.Stream(f"d{i}", tuple(d.shape))
                                                          for i, d in enumerate(earlier)])
        if not torch.equal(recipe[f"d{len(earlier) - 1}"].to(drawn.dtype), drawn):
            return False, (f"the noise drawn is not the recipe's for the generator's seed {generator.initial_seed()} "
                           "(drawn in another way than torch.randn on that generator)")
    return True, None


def record(draws: Sequence[tuple[Any, Any]], used: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """The noise record's ``draws`` and ``seeds`` when the draw order is not simply stream k = draw k of one
    generator; empty otherwise (earlier trajectories read the same)."""
    last = max((k for indices in used.values() for k in indices), default=-1)
    if last < 0:
        return {}
    generators: list[Any] = []
    for g, _ in draws[:last + 1]:
        if all(g is not h for h in generators):
            generators.append(g)
    simple = len(generators) == 1 and all(list(indices) == [k] for k, indices in enumerate(used.values())) and \
        last == len(used) - 1
    if simple:
        return {}
    owner = {k: name for name, indices in used.items() for k in indices}
    seeds = []
    for g in generators:
        try:
            seeds.append(int(g.initial_seed()))
        except (AttributeError, RuntimeError):
            seeds.append(None)
    return {"draws": [{"shape": [int(d) for d in t.shape], "generator": next(i for i, h in enumerate(generators) if h is g),
                       "stream": owner.get(k)} for k, (g, t) in enumerate(draws[:last + 1])],
            "seeds": seeds}


def replay(noise: Mapping[str, Any], seed_override: int | None = None) -> dict[str, Any]:
    """Each stream's noise from a recorded draw order (``noise["draws"]``, ``noise["seeds"]``): a CPU generator
    per seed (``seed_override`` replaces a single generator's seed), every draw made in order, a stream's draws
    concatenated on the batch. {stream: float32 tensor}."""
    import torch

    seeds = list(noise.get("seeds") or [])
    if seed_override is not None and len(seeds) == 1:
        seeds = [seed_override]
    generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
    found: dict[str, list] = {}
    for draw in noise.get("draws") or []:
        tensor = torch.randn(tuple(draw["shape"]), generator=generators[int(draw["generator"])], dtype=torch.float32)
        if draw.get("stream") is not None:
            found.setdefault(draw["stream"], []).append(tensor)
    return {name: torch.cat(parts, dim=0) if len(parts) > 1 else parts[0] for name, parts in found.items()}


def limit_problems(noise: Mapping[str, Any], largest: int | None) -> list[tuple[str, str]]:
    """(JSON pointer, message) for a recorded draw order that would size what replay draws beyond the record's
    bounds: more than :data:`MAX_DRAWS` draws, a draw of more than 8 dimensions or more than 4 times the largest
    tensor's elements, a generator index with no seed, a seed the generator does not take."""
    from ikdata.diffusion import noise as noise_mod

    found: list[tuple[str, str]] = []
    draws, seeds = noise.get("draws"), noise.get("seeds")
    if draws is None:
        return found
    if not isinstance(draws, list) or len(draws) > MAX_DRAWS:
        return [("/noise/draws", f"expected a list of at most {MAX_DRAWS} draws")]
    if not isinstance(seeds, list) or not seeds:
        return [("/noise/seeds", "expected one seed per generator of /noise/draws")]
    for i, seed in enumerate(seeds):
        refusal = noise_mod.seed_refusal(seed)
        if refusal:
            found.append((f"/noise/seeds/{i}", f"noise {refusal}"))
    for i, draw in enumerate(draws):
        shape = draw.get("shape") if isinstance(draw, dict) else None
        g = draw.get("generator") if isinstance(draw, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape) or len(shape) > noise_mod.MAX_DIMS:
            found.append((f"/noise/draws/{i}/shape", f"expected at most {noise_mod.MAX_DIMS} non-negative integers"))
            continue
        if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < len(seeds):
            found.append((f"/noise/draws/{i}/generator", f"expected an index into /noise/seeds (0 to {len(seeds) - 1})"))
        numel = 1
        for d in shape:
            numel *= d
        if largest is not None and numel > 4 * max(largest, 1):
            found.append((f"/noise/draws/{i}/shape", f"draw of {numel} elements; expected at most 4 times the largest "
                                                     f"tensor the trajectory holds ({largest})"))
    return found


__all__ = ["MAX_DRAWS", "find", "limit_problems", "record", "recipe_equal", "replay"]
