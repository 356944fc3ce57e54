"""Build hook: ship ``ikdata_capture.pth`` at the top of site-packages (all settings live in pyproject.toml).

The .pth file makes every Python process call ``ikdata.capture.boot.boot()`` when,
and only when, ``IKDATA_CAPTURE`` is set: that is how ``ikdata capture -- CMD``
reaches every child process (spawn, fork, forkserver, subprocess). A normal
install gets it through ``build_py``; an editable install (``pip install -e .``)
through the editable wheel, which does not use ``build_py``'s outputs.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "ikdata_capture.pth"
# One line; site.py executes lines that start with "import". Costs one environ lookup when capture is off.
PTH_LINE = ("import os; os.environ.get('IKDATA_CAPTURE') and "
            "__import__('ikdata.capture.boot').capture.boot.boot()\n")


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):
            with open(os.path.join(self.build_lib, PTH_NAME), "w") as stream:
                stream.write(PTH_LINE)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            outputs.append(os.path.join(self.build_lib, PTH_NAME))
        return outputs


class _StrategyWithPth:
    """Wraps setuptools' editable strategy: the editable wheel also carries the .pth file."""

    def __init__(self, strategy):
        self._strategy = strategy

    def __call__(self, wheel, files, mapping):
        result = self._strategy(wheel, files, mapping)
        wheel.writestr(PTH_NAME, PTH_LINE)
        return result

    def __enter__(self):
        self._strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self._strategy.__exit__(*exc)


class EditableWheelWithPth(editable_wheel):
    def _select_strategy(self, *args, **kwargs):
        return _StrategyWithPth(super()._select_strategy(*args, **kwargs))


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
