"""FlashInfer as a source: its flight recorder's dumps and trace definitions become ikdata workloads.

``loader`` imports FlashInfer's pure-Python parts (``flashinfer.trace``,
``flashinfer.api_logging``) even where the package's top level needs CUDA;
``convert`` turns a FlashInfer Trace definition into an ikdata definition;
``dumps`` reads the recorder's folder without running pickles; ``matching`` ties
each call to its definition; ``staging`` writes them as an ikdata dataset that
``ikdata import`` then merges like any other. See docs/flashinfer.md.
"""
