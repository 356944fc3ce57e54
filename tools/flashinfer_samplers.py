"""FlashInfer's own sampling APIs run on CPU, under FlashInfer's own flight recorder: real recorder dumps of them.

FlashInfer's sampling APIs (``flashinfer.sampling.top_k_sampling_from_probs`` and the rest) are Python
that checks and converts its arguments and then calls a CUDA kernel module built by its JIT
(``gen_sampling_module().build_and_load()``). On a CPU machine this tool hands FlashInfer a CPU twin of
that kernel module (:class:`CpuKernels`: the same kernel entry points, the same output buffers, draws
from the distribution the kernel draws from) and the CPU default generator where FlashInfer asks for
CUDA's (a seed and offset drawn from the CPU generator). Everything else is FlashInfer's: the decorated API, its argument handling (scalar or per-row
settings, ``indices``, ``generator``, ``seed``/``offset``, ``filter_apply_order``), its nested API calls
(``top_k_top_p_sampling_from_probs`` calls ``top_k_renorm_probs`` and ``top_p_sampling_from_probs``)
and its recorder, so the dump is what FlashInfer writes for those calls on a GPU.

    python tools/flashinfer_samplers.py OUT [--wrong ignore-top-k|ignore-min-p|greedy|ignore-top-p] [--plan NAME]

``--wrong`` swaps in a wrong kernel (ignoring a setting, or taking the argmax): an engine the sampling
judge must fail. Plans (:data:`PLANS`) are lists of calls; OUT/dumps holds the recorder's call folders.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

WRONG = ("ignore-top-k", "ignore-top-p", "ignore-min-p", "greedy")


class CpuKernels:
    """The kernel entry points ``flashinfer.sampling`` calls (``module.<name>(...)``), computed on CPU.

    Each sampler fills ``samples`` (and ``valid``) as FlashInfer's kernel does: row ``i`` draws from
    ``probs[indices[i]]`` (or row i) after the row's cut; per-row settings are read at that same row,
    as the kernel reads ``top_k_arr[row_idx]``. Draws come from a CPU generator seeded by the call's
    ``(seed, offset)`` and the row, the kernel's Philox stream in spirit. ``wrong`` names a defect.
    """

    def __init__(self, wrong: str | None = None):
        self.wrong = wrong

    # -- helpers ------------------------------------------------------------------------------------------------

    @staticmethod
    def _setting(arr: Any, value: Any, row: int) -> float:
        return float(arr[row].item()) if arr is not None else float(value)

    def _draw(self, rows: Any, samples: Any, valid: Any, indices: Any, keep: Any, seed: Any, offset: Any) -> None:
        """Fill ``samples`` with one draw per output row from ``rows`` cut by ``keep(row_values, row_idx)``."""
        import torch

        seed_val = int(seed[0].item()) if isinstance(seed, torch.Tensor) else int(seed)
        offset_val = int(offset[0].item()) if isinstance(offset, torch.Tensor) else int(offset)
        for i in range(samples.shape[0]):
            row_idx = int(indices[i].item()) if indices is not None else i
            p = rows[row_idx].to(torch.float64).clamp_min(0)
            kept = p * keep(p, row_idx) if self.wrong != "greedy" else None
            gen = torch.Generator().manual_seed((seed_val * 1_000_003 + offset_val * 7919 + i) % (2 ** 63))
            if kept is None or float(kept.sum()) <= 0:
                samples[i] = int(p.argmax())
                if valid is not None:
                    valid[i] = kept is None
                continue
            samples[i] = int(torch.multinomial(kept / kept.sum(), 1, generator=gen).item())
            if valid is not None:
                valid[i] = True

    @staticmethod
    def _top_k_keep(p: Any, k: int) -> Any:
        import torch

        if not 0 < k < p.numel():
            return torch.ones_like(p)
        pivot = torch.topk(p, k).values[-1]
        return (p >= pivot).to(p.dtype)

    @staticmethod
    def _top_p_keep(p: Any, top_p: float) -> Any:
        import torch

        if top_p >= 1.0:
            return torch.ones_like(p)
        q = p / p.sum()
        order = torch.argsort(q, descending=True)
        before = torch.cumsum(q[order], 0) - q[order]
        keep = torch.zeros_like(p)
        keep[order[before < top_p]] = 1.0
        return keep

    # -- kernel entry points (names and arguments as flashinfer.sampling calls them) -----------------------------

    def sampling_from_probs(self, probs, samples, valid, indices, deterministic, seed_arr, seed_val, offset_arr,
                            offset_val):
        import torch

        self._draw(probs, samples, valid, indices, lambda p, r: torch.ones_like(p),
                   seed_arr if seed_arr is not None else seed_val, offset_arr if offset_arr is not None else offset_val)

    def sampling_from_logits(self, logits, samples, indices, deterministic, seed_arr, seed_val, offset_arr,
                             offset_val):
        import torch

        probs = torch.softmax(logits.to(torch.float64), -1)
        self.sampling_from_probs(probs, samples, None, indices, deterministic, seed_arr, seed_val, offset_arr,
                                 offset_val)

    def top_p_sampling_from_probs(self, probs, samples, valid, indices, top_p_arr, top_p_val, deterministic,
                                  seed_arr, seed_val, offset_arr, offset_val):
        wrong = self.wrong == "ignore-top-p"
        self._draw(probs, samples, valid, indices,
                   lambda p, r: self._top_p_keep(p, 1.0 if wrong else self._setting(top_p_arr, top_p_val, r)),
                   seed_arr if seed_arr is not None else seed_val, offset_arr if offset_arr is not None else offset_val)

    def top_k_sampling_from_probs(self, probs, samples, valid, indices, top_k_arr, top_k_val, deterministic,
                                  seed_arr, seed_val, offset_arr, offset_val):
        wrong = self.wrong == "ignore-top-k"
        self._draw(probs, samples, valid, indices,
                   lambda p, r: self._top_k_keep(p, 0 if wrong else int(self._setting(top_k_arr, top_k_val, r))),
                   seed_arr if seed_arr is not None else seed_val, offset_arr if offset_arr is not None else offset_val)

    def min_p_sampling_from_probs(self, probs, samples, valid, indices, min_p_arr, min_p_val, deterministic,
                                  seed_arr, seed_val, offset_arr, offset_val):
        wrong = self.wrong == "ignore-min-p"

        def keep(p, r):
            m = 0.0 if wrong else self._setting(min_p_arr, min_p_val, r)
            return (p >= p.max() * m).to(p.dtype)

        self._draw(probs, samples, valid, indices, keep,
                   seed_arr if seed_arr is not None else seed_val, offset_arr if offset_arr is not None else offset_val)

    def top_k_top_p_sampling_from_probs(self, probs, samples, valid, indices, top_k_arr, top_k_val, top_p_arr,
                                        top_p_val, deterministic, seed_arr, seed_val, offset_arr, offset_val):
        """The joint kernel: a token is kept when it is in the row's top k and in its top-p set."""
        def keep(p, r):
            k = 0 if self.wrong == "ignore-top-k" else int(self._setting(top_k_arr, top_k_val, r))
            top_p = 1.0 if self.wrong == "ignore-top-p" else self._setting(top_p_arr, top_p_val, r)
            return self._top_k_keep(p, k) * self._top_p_keep(p, top_p)

        self._draw(probs, samples, valid, indices, keep,
                   seed_arr if seed_arr is not None else seed_val, offset_arr if offset_arr is not None else offset_val)

    def top_p_renorm_probs(self, probs, renorm_probs, top_p_arr, top_p_val, is_deterministic, workspace):
        for r in range(probs.shape[0]):
            p = probs[r].double()
            kept = p * self._top_p_keep(p, self._setting(top_p_arr, top_p_val, r))
            renorm_probs[r] = (kept / kept.sum()).to(renorm_probs.dtype)

    def top_k_renorm_probs(self, probs, renorm_probs, top_k_arr, top_k_val, is_deterministic, row_states_buffer):
        k_off = self.wrong == "ignore-top-k"
        for r in range(probs.shape[0]):
            p = probs[r].double()
            kept = p * self._top_k_keep(p, 0 if k_off else int(self._setting(top_k_arr, top_k_val, r)))
            renorm_probs[r] = (kept / kept.sum()).to(renorm_probs.dtype)

    def top_k_mask_logits(self, logits, mask_logits, top_k_arr, top_k_val, row_states_buffer):
        k_off = self.wrong == "ignore-top-k"
        for r in range(logits.shape[0]):
            x = logits[r]
            keep = self._top_k_keep(x.double(), 0 if k_off else int(self._setting(top_k_arr, top_k_val, r)))
            mask_logits[r] = x.masked_fill(keep == 0, float("-inf"))

    def softmax(self, workspace_buffer, logits, probs, temperature_arr, temperature_val, enable_pdl):
        import torch

        t = temperature_arr.reshape(-1, 1) if temperature_arr is not None else temperature_val
        probs.copy_(torch.softmax(logits.float() / t, -1))


def install(wrong: str | None = None) -> Any:
    """``flashinfer.sampling`` with the CPU kernel twin (and the CPU default generator); returns the module."""
    import torch

    from ikdata.flashinfer import loader

    sampling = loader.submodule("sampling")
    kernels = CpuKernels(wrong)

    class _Built:
        def build_and_load(self):
            return kernels

    def seed_and_offset(increment, generator=None, device=None):  # noqa: ARG001
        # CUDA's generator state is Philox (seed, offset); a CPU generator's is not: take both from its stream
        drawn = torch.randint(0, 1 << 62, (2,), generator=generator or torch.default_generator)
        return int(drawn[0]), int(drawn[1])

    sampling.gen_sampling_module = lambda: _Built()
    sampling.get_seed_and_offset = seed_and_offset
    sampling.device_support_pdl = lambda device=None: False
    sampling.get_sampling_module.cache_clear()
    return sampling


# A plan: (API, batch, vocab, calls, arguments). Arguments are built per call by _arguments; "gen" passes a
# torch.Generator, "indices" an index tensor (rows repeated), "tensor" per-row settings, "scalar" Python numbers.
PLANS: dict[str, list[tuple[str, int, int, int, dict]]] = {
    "min_p": [("min_p_sampling_from_probs", 64, 32, 3, {"min_p": ("scalar", 0.1)}),
              ("min_p_sampling_from_probs", 64, 32, 3, {"min_p": ("tensor", 0.1), "generator": True})],
    "every": [
        ("sampling_from_probs", 64, 32, 3, {}),
        ("sampling_from_probs", 64, 32, 3, {"indices": True, "generator": True}),
        ("sampling_from_logits", 64, 32, 3, {}),
        ("sampling_from_logits", 64, 32, 3, {"indices": True}),
        ("top_k_sampling_from_probs", 64, 32, 3, {"top_k": ("tensor", 8)}),
        ("top_k_sampling_from_probs", 64, 32, 3, {"top_k": ("scalar", 8), "indices": True, "generator": True}),
        ("top_p_sampling_from_probs", 64, 32, 3, {"top_p": ("tensor", 0.8)}),
        ("top_p_sampling_from_probs", 64, 32, 3, {"top_p": ("scalar", 0.7), "indices": True}),
        ("min_p_sampling_from_probs", 64, 32, 3, {"min_p": ("scalar", 0.1)}),
        ("min_p_sampling_from_probs", 64, 32, 3, {"min_p": ("tensor", 0.1), "indices": True, "generator": True}),
        ("top_k_top_p_sampling_from_probs", 64, 32, 3, {"top_k": ("tensor", 10), "top_p": ("tensor", 0.8)}),
        ("top_k_top_p_sampling_from_probs", 64, 32, 3, {"top_k": ("scalar", 10), "top_p": ("scalar", 0.8),
                                                        "filter_apply_order": "joint", "indices": True}),
        ("top_k_top_p_sampling_from_logits", 128, 32, 3, {"top_k": ("tensor", 16), "top_p": ("tensor", 0.9),
                                                          "generator": True}),
        ("top_k_top_p_sampling_from_logits", 64, 32, 3, {"top_k": ("scalar", 10), "top_p": ("scalar", 0.8),
                                                         "filter_apply_order": "joint", "indices": True}),
        ("top_k_renorm_probs", 8, 32, 2, {"top_k": ("scalar", 8)}),
        ("top_p_renorm_probs", 8, 32, 2, {"top_p": ("scalar", 0.8)}),
        ("top_k_mask_logits", 8, 32, 2, {"top_k": ("tensor", 8)}),
    ],
    # a serving loop's share of the dump: a few draws per call, many calls of one shape
    "small": [("top_k_sampling_from_probs", 2, 32, 2, {"top_k": ("tensor", 8)}),
              ("min_p_sampling_from_probs", 2, 32, 3, {"min_p": ("scalar", 0.1)})],
    # two top-k calls too small to judge even pooled (vocabulary 40: a definition of their own) beside calls
    # that can be judged
    "mixed": [("top_k_sampling_from_probs", 2, 40, 2, {"top_k": ("tensor", 8)}),
              ("sampling_from_probs", 64, 32, 3, {}),
              ("top_k_sampling_from_probs", 64, 32, 3, {"top_k": ("scalar", 8)})],
    # one call of each kind a wrong kernel must be caught on
    "wrong": [("sampling_from_probs", 96, 32, 2, {}),
              ("top_k_sampling_from_probs", 96, 32, 2, {"top_k": ("tensor", 8)}),
              ("min_p_sampling_from_probs", 96, 32, 2, {"min_p": ("scalar", 0.1)}),
              ("top_k_top_p_sampling_from_probs", 96, 32, 2, {"top_k": ("tensor", 8), "top_p": ("tensor", 0.9)})],
}


def _arguments(api: str, batch: int, vocab: int, spec: dict, gen: Any) -> tuple[tuple, dict]:
    import torch

    logits = torch.randn(batch, vocab, generator=gen) * 2.0
    first = logits if api.endswith("_logits") else torch.softmax(logits, -1)
    kwargs: dict[str, Any] = {}
    for name in ("top_k", "top_p", "min_p"):
        if name in spec:
            kind, value = spec[name]
            dtype = torch.int32 if name == "top_k" else torch.float32
            kwargs[name] = torch.full((batch,), value, dtype=dtype) if kind == "tensor" else value
    if spec.get("indices"):
        kwargs["indices"] = torch.arange(batch, dtype=torch.int32).flip(0)
    if spec.get("generator"):
        kwargs["generator"] = torch.Generator().manual_seed(int(torch.randint(1 << 30, (1,), generator=gen)))
    if "filter_apply_order" in spec:
        kwargs["filter_apply_order"] = spec["filter_apply_order"]
    return (first,), kwargs


def _child(plan: str, wrong: str | None, seed: int) -> None:
    import torch

    sampling = install(wrong)
    gen = torch.Generator().manual_seed(seed)
    for api, batch, vocab, calls, spec in PLANS[plan]:
        for _ in range(calls):
            args, kwargs = _arguments(api, batch, vocab, spec, gen)
            getattr(sampling, api)(*args, **kwargs)


def record(out: Path, plan: str = "every", *, wrong: str | None = None, seed: int = 0, fmt: str = "safetensors",
           timeout: float = 600) -> Path:
    """Run ``plan``'s calls of FlashInfer's sampling APIs under its recorder in a child process; returns OUT/dumps.

    Raises:
        subprocess.CalledProcessError: the child failed (its stderr says why).
    """
    from flashinfer_engines import recorder_env  # tools/, beside this file

    out.mkdir(parents=True, exist_ok=True)
    env = recorder_env(out, fmt)
    env.pop("FLASHINFER_TRACE_DUMP_DIR", None)
    command = [sys.executable, __file__, str(out), "--child", "--plan", plan, "--seed", str(seed)]
    command += ["--wrong", wrong] if wrong else []
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=timeout)
    return out / "dumps"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--plan", default="every", choices=sorted(PLANS))
    parser.add_argument("--wrong", choices=WRONG)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", default="safetensors", choices=["safetensors", "torch"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        _child(args.plan, args.wrong, args.seed)
        return
    print(record(Path(args.out), args.plan, wrong=args.wrong, seed=args.seed, fmt=args.format))


if __name__ == "__main__":
    main()
