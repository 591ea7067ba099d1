"""External tools the tests use beyond the C compiler (cmake, ar, make, the cross
compilers, QEMU).

A test that needs a missing tool skips on a developer machine with a one-line
reason naming the Debian package; in CI (CI=true), which installs every tool the
suite uses (.ci/run), it fails instead, so a skip cannot hide there.
"""
from __future__ import annotations

import os
import shutil

import pytest


# The Debian package of a tool, where its name is not the tool's.
PACKAGES = {
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "arm-none-eabi-objdump": "binutils-arm-none-eabi",
    "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
    "aarch64-linux-gnu-objdump": "binutils-aarch64-linux-gnu",
    "riscv64-linux-gnu-gcc": "gcc-riscv64-linux-gnu libc6-dev-riscv64-cross",
    "riscv64-linux-gnu-objdump": "binutils-riscv64-linux-gnu",
    "qemu-aarch64": "qemu-user",
    "qemu-riscv64": "qemu-user",
    "ar": "binutils",
    "objdump": "binutils",
    "readelf": "binutils",
}


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        install = f"apt-get install {PACKAGES.get(name, name)}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed, but CI installs it (.ci/run: {install})")
        pytest.skip(f"{name} is not installed ({install})")
    return path


def require_tools(*names: str) -> None:
    for name in names:
        require_tool(name)
