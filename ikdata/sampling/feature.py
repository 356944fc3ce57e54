"""What sampling declares to the engines: its judge family and its capture source (HF ``generate``'s sampler)."""

from __future__ import annotations

from ikdata.core.features import Family, Feature, FileImport, Source

FEATURE = Feature(
    "sampling",
    family=Family("sampling", owns="ikdata.sampling.judge:is_sampling", execute="ikdata.sampling.judge:execute_case",
                  finish="ikdata.sampling.judge:finish", regroup="ikdata.sampling.judge:regroup",
                  recheck="ikdata.sampling.groups:recheck", summary="ikdata.sampling.judge:summary_lines",
                  figures="ikdata.sampling.report_figures:figures", judges=("sampling",)),
    sources=(Source("transformers", "transformers", order="hf", hooks="ikdata.sampling.capture",
                    models=("transformers", "transformers_modules"),
                    selection="ikdata.sampling.capture:selection_lines"),),
    file_imports=(FileImport(".jsonl", "ikdata.sampling.completions:import_completions",
                             "an OpenAI-style completions log"),),  # server draws -> sampling workloads
)
