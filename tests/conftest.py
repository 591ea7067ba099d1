"""Suite-wide settings.

Every ``xlac.load`` links a shared library into a cache folder; the suite loads
a few hundred freshly compiled objects, so it points the cache at a folder of
its own (unless XLAC_CACHE_DIR is set) instead of filling the user's ~/.cache.
"""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_library_cache(tmp_path_factory):
    if os.environ.get("XLAC_CACHE_DIR"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLAC_CACHE_DIR", str(tmp_path_factory.mktemp("xlac-cache")))
        yield
