"""Build hook: ship ``ikdata_capture.pth`` at the top of site-packages (all other settings live in pyproject.toml).

The .pth line imports the top-level module ``ikdata_boot`` (standard library only) in
every Python process that starts with ``IKDATA_CAPTURE`` set, and costs one environ
lookup in every other: that is how ``ikdata capture -- CMD`` reaches every child
process (spawn, fork, forkserver, subprocess).

No declarative setting puts a file at the top of site-packages, so two command
classes do it, each through public interfaces only (``cmdclass``, a command's
``run``, ``build_lib``, ``get_outputs`` and the ``dist_dir`` option):

- a wheel (``pip install .``, ``pip wheel .``): ``build_py`` also writes the .pth into
  ``build_lib``, whose contents form the wheel's root;
- an editable install (``pip install -e .``, PEP 660): setuptools builds the editable
  wheel from its own strategies and ignores what build commands write, so after
  ``editable_wheel`` has written the wheel into ``dist_dir`` the .pth is added to it,
  with its RECORD line. (coverage.py ships ``a1_coverage.pth`` the same way.)

Pinned by ``tests/capture/test_boot_packaging.py`` (a real ``pip wheel`` and ``pip install -e``
in a temporary venv); the setuptools range in ``[build-system]`` is the one that test covers.
"""

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "ikdata_capture.pth"  # sorts after __editable__*.pth, so an editable install's finder is there first
# One line; site.py executes lines that start with "import". Costs one environ lookup when capture is off.
PTH_LINE = "import os; os.environ.get('IKDATA_CAPTURE') and __import__('ikdata_boot').boot()\n"


class BuildPyWithPth(build_py):
    """``build_py`` that also writes the .pth beside the packages (a wheel's root)."""

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


class EditableWheelWithPth(editable_wheel):
    """``editable_wheel`` that adds the .pth to the editable wheel it has just written."""

    def run(self):
        super().run()
        name = self.distribution.get_name().replace("-", "_")
        wheels = sorted(Path(self.dist_dir).glob(f"{name}-*.editable-*.whl"), key=os.path.getmtime)
        if not wheels:
            raise RuntimeError(f"no editable wheel of {name} found in {self.dist_dir}; "
                               f"cannot add {PTH_NAME} (see setup.py)")
        add_to_wheel(wheels[-1], PTH_NAME, PTH_LINE.encode())


def add_to_wheel(wheel: Path, name: str, data: bytes) -> None:
    """Rewrite ``wheel`` with one more file at its root, listed in its RECORD."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    tmp = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        records = [i for i in src.infolist() if i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise RuntimeError(f"{wheel}: expected one .dist-info/RECORD, found {len(records)}")
        for item in src.infolist():
            if item.filename == name:
                continue
            payload = src.read(item.filename)
            if item is records[0]:
                payload = b"".join(line + b"\n" for line in payload.splitlines()
                                   if not line.startswith(name.encode() + b","))
                payload += f"{name},sha256={digest},{len(data)}\n".encode()
            dst.writestr(item, payload)
        dst.writestr(name, data)
    os.replace(tmp, wheel)


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
