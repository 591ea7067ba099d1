"""External tools the tests use beyond the C compiler (cmake, ar, arm-none-eabi-gcc).

A test that needs a missing tool skips on a developer machine with a one-line
reason; in CI (CI=true), which installs every tool the suite uses (.ci/run), it
fails instead, so a skip cannot hide there.
"""
from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed, but CI installs it (.ci/run)")
        pytest.skip(f"{name} is not installed")
    return path
