"""The packaging that ships ``ikdata_capture.pth``: a real wheel and a real editable install, per setuptools version.

Why this test exists: no declarative setuptools setting puts a file at the top of
site-packages, so ``setup.py`` adds the .pth through two command classes (see its
docstring). They use public interfaces only, but the editable one depends on
``editable_wheel`` leaving its wheel in ``dist_dir`` for ``run()`` to amend. This test pins
that on the lower bound of ``[build-system] requires`` and on the setuptools of the
development venv; raise the upper bound there only after it passes on a new major.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PTH = "ikdata_capture.pth"
LOWEST = "77.0.3"  # keep equal to the lower bound in pyproject.toml [build-system]


def _installed_setuptools() -> str:
    from importlib.metadata import version

    return version("setuptools")


def _run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(map(str, args))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _project_copy(dest: Path) -> Path:
    ignore = shutil.ignore_patterns(".venv", ".git", "tests", "tools", "docs", "build", "dist", "*.egg-info",
                                    "__pycache__", "demo-out", ".pytest_cache")
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def _probe(python: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["IKDATA_CAPTURE"] = '{"into": "never-written"}'
    code = ("import sys, ikdata_boot; print('ikdata_boot' in sys.modules, 'ikdata' in sys.modules, "
            "ikdata_boot.__file__)")
    # ikdata_boot was imported by the .pth before -c ran: the first word says so
    probe = ("import sys; booted = 'ikdata_boot' in sys.modules; " + code.replace(
        "'ikdata_boot' in sys.modules", "booted"))
    return _run(python, "-c", probe, cwd=python.parent, env=env).split()


@pytest.mark.slow
@pytest.mark.parametrize("setuptools_version", ["installed", LOWEST])
def test_wheel_and_editable_install_put_the_pth_in_site_packages(tmp_path, setuptools_version):
    version = _installed_setuptools() if setuptools_version == "installed" else setuptools_version
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", f"setuptools=={version}", "wheel")
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip())
    src = _project_copy(tmp_path / "src")
    line = "import os; os.environ.get('IKDATA_CAPTURE') and __import__('ikdata_boot').boot()\n"

    # A wheel: the .pth at its root, listed in RECORD; installed into site-packages; removed on uninstall.
    _run(python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", src)
    (wheel,) = (tmp_path / "dist").glob("ikdata-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert archive.read(PTH).decode() == line
        record = archive.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    assert "ikdata_boot.py" in names and "ikdata/capture/boot.py" in names
    assert any(r.startswith(f"{PTH},sha256=") for r in record.splitlines())
    _run(python, "-m", "pip", "install", "-q", "--no-deps", wheel)
    assert (site / PTH).read_text() == line
    booted, package, where = _probe(python)
    assert (booted, package) == ("True", "False") and Path(where).parent == site
    _run(python, "-m", "pip", "uninstall", "-q", "-y", "ikdata")
    assert not (site / PTH).exists()

    # An editable install: the same line, and ikdata_boot imported from the source tree.
    _run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", src)
    assert (site / PTH).read_text() == line
    booted, package, where = _probe(python)
    assert (booted, package) == ("True", "False") and Path(where) == src / "ikdata_boot.py"
    _run(python, "-m", "pip", "uninstall", "-q", "-y", "ikdata")
    assert not (site / PTH).exists()
