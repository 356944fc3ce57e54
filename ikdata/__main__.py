"""``python -m ikdata``: the same as the ``ikdata`` command."""

from ikdata.cli import main

main()
