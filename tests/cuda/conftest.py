"""The stand-in CUDA driver for the tests that run the emulated CUDA path.

``driver``: fake_libcuda.c built (fake_driver.py) and named by XLAC_CUDA_DRIVER for the
module's tests, with none of the stand-in's own switches (thread order, injected
failures, launch log) left set; a test sets those it wants with monkeypatch.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_driver import build_fake_driver  # noqa: E402

SWITCHES = ("XLAC_FAKE_CUDA_ORDER", "XLAC_FAKE_CUDA_FAIL", "XLAC_FAKE_CUDA_LOG",
            "XLAC_FAKE_CUDA_DEVICES", "XLAC_FAKE_CUDA_VERSION")


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    path = build_fake_driver(tmp_path_factory.mktemp("fake-cuda"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLAC_CUDA_DRIVER", str(path))
        for var in SWITCHES:
            mp.delenv(var, raising=False)
        yield path
