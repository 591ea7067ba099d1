#!/bin/sh
# Downloads the wheels the GPU machine lacks (it has no cffi and no network) into
# gpu-wheels/ at the repository root; benchmarks/gpu.sh installs them there with
# `python3 -m pip install --no-index gpu-wheels/*.whl`. Run here, before the GPU run:
#
#     sh benchmarks/gpu_wheels.sh
#
# gpu-wheels/ is ignored by git (.gitignore) and travels with the working tree as an
# ignored folder (the run's carry list).
set -eu
cd "$(dirname "$0")/.."
python3 -m pip download cffi pycparser --python-version 3.12 --only-binary=:all: \
    --platform manylinux2014_x86_64 -d gpu-wheels
# setuptools for `pip install -e .` there, installed only where the GPU machine's venv
# lacks it (torch on Python 3.12 requires it, so it should be there): kept apart, so that
# gpu-wheels/*.whl never replaces the venv's own.
python3 -m pip download "setuptools>=64" --python-version 3.12 --only-binary=:all: \
    --no-deps -d gpu-wheels/fallback
ls -l gpu-wheels gpu-wheels/fallback
