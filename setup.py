"""Which packages install, found from the folders (pyproject.toml holds the rest).

The repository keeps its packages at the root (``hlo/``, ``emitter/``, ...) and
installs them under ``xlac.*`` (DESIGN.md's layout): ``cli/`` is ``xlac`` itself
and every other top-level folder holding an ``__init__.py`` is ``xlac.<folder>``,
with its subpackages. pyproject.toml cannot rename folders while finding them, so
this file does; nothing lists packages by hand, so a new subpackage cannot be
forgotten (a hand list once left out ``xlac.emitter.kernels`` and only editable
installs worked). C sources and headers inside a package ship as package data (the
runtime), and so does the CMake module (``cli/cmake/``, installed as ``xlac/cmake/``).
"""
import shutil
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
TOP = "cli"                              # the folder that installs as ``xlac``
NOT_INSTALLED = {"tests", "benchmarks", "examples", "docs"}


def package_dirs() -> dict[str, str]:
    roots = sorted(p.name for p in HERE.iterdir()
                   if (p / "__init__.py").is_file() and p.name not in NOT_INSTALLED)
    return {("xlac" if name == TOP else f"xlac.{name}"): name for name in roots}


def packages(dirs: dict[str, str]) -> list[str]:
    found = []
    for package, folder in dirs.items():
        found.append(package)
        found += [f"{package}.{sub}" for sub in find_packages(str(HERE / folder))]
    return found


DIRS = package_dirs()
# setuptools copies into .build/lib but never deletes there: start empty, so that a module
# deleted from the checkout cannot live on in the next wheel.
shutil.rmtree(HERE / ".build" / "lib", ignore_errors=True)
setup(
    packages=packages(DIRS),
    package_dir=DIRS,
    package_data={"": ["*.c", "*.h"], "xlac": ["cmake/*.cmake"]},
    # setuptools' own build folder, kept out of build/ (where the README puts models).
    options={"build": {"build_base": ".build"}},
)
