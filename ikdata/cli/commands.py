"""Imports every command module so that each registers its commands on :data:`ikdata.cli.app`.

Command modules import torch only inside command bodies, so ``ikdata --help`` stays torch-free.
"""

from ikdata.cli import capture_cmd, index_cmd, merge_cmd, noise_cmd, pack_cmd, remote_cmd, replay_cmd, report_cmd  # noqa: F401
