"""The folder of shared libraries ``xlac.load`` links, and its bounds.

Every new object loaded links one library (``NAME-<hash>.so``), so the folder
would grow without end (2.6 GB was seen on one machine). After each new link it
keeps the most recently used libraries, at most ``XLAC_CACHE_MAX_ENTRIES`` of
them and ``XLAC_CACHE_MAX_BYTES`` bytes in all (defaults below), and removes the
rest; a library counts as used when it is linked or loaded (its mtime). A library
used in the last minute is never removed: another process may be about to open
it. ``xlac cache clear`` removes every library, ``xlac cache`` says what is there.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .hlo import XlacError

DEFAULT_MAX_ENTRIES = 100
DEFAULT_MAX_BYTES = 1 << 30
GRACE_SECONDS = 60.0
# A link that died half-way leaves its temporary file; one this old is abandoned.
STALE_TEMP_SECONDS = 3600.0

# Only files of these names are ours to remove: XLAC_CACHE_DIR may point anywhere.
_LIBRARY = re.compile(r"[A-Za-z][A-Za-z0-9_]*-[0-9a-f]{24}\.so")
_TEMP = re.compile(r"\.[A-Za-z][A-Za-z0-9_]*-[0-9a-f]{24}\.so\.\d+\.\d+\.tmp")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def cache_dir() -> Path:
    """Where linked libraries are kept: $XLAC_CACHE_DIR, else the user cache folder."""
    if os.environ.get("XLAC_CACHE_DIR"):
        return Path(os.environ["XLAC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xlac" / "lib"


@dataclass(frozen=True)
class Limits:
    max_entries: int
    max_bytes: int


def limits() -> Limits:
    """The bounds from the environment: a count, and bytes with an optional K/M/G suffix."""
    entries = os.environ.get("XLAC_CACHE_MAX_ENTRIES", "").strip()
    if entries and not entries.isdigit():
        raise XlacError(f"XLAC_CACHE_MAX_ENTRIES must be a number of libraries, got '{entries}'")
    size = os.environ.get("XLAC_CACHE_MAX_BYTES", "").strip().upper()
    m = re.fullmatch(r"(\d+)([KMG]?)I?B?", size)
    if size and m is None:
        raise XlacError(f"XLAC_CACHE_MAX_BYTES must be bytes such as 500M or 2G, got '{size}'")
    return Limits(int(entries) if entries else DEFAULT_MAX_ENTRIES,
                  int(m.group(1)) * _UNITS[m.group(2)] if size else DEFAULT_MAX_BYTES)


@dataclass(frozen=True)
class Entry:
    path: Path
    size: int
    used: float        # mtime: when it was last linked or loaded


def entries(folder: Path) -> list[Entry]:
    """The libraries in ``folder``, most recently used first."""
    found = []
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    for name in names:
        if _LIBRARY.fullmatch(name):
            try:
                st = os.stat(folder / name)
            except FileNotFoundError:       # removed by another process meanwhile
                continue
            found.append(Entry(folder / name, st.st_size, st.st_mtime))
    return sorted(found, key=lambda e: e.used, reverse=True)


def mark_used(library: Path) -> None:
    try:
        os.utime(library)
    except OSError:          # a read-only cache still serves its libraries
        pass


def prune(folder: Path, bounds: Limits | None = None, now: float | None = None) -> list[Entry]:
    """Remove the least recently used libraries beyond ``bounds`` (and abandoned
    temporary files); returns the libraries removed."""
    bounds = bounds or limits()
    now = time.time() if now is None else now
    removed, count, total = [], 0, 0
    for e in entries(folder):
        count, total = count + 1, total + e.size
        if (count <= bounds.max_entries and total <= bounds.max_bytes) \
                or now - e.used < GRACE_SECONDS:
            continue
        if _remove(e.path):
            removed.append(e)
            count, total = count - 1, total - e.size
    for name in os.listdir(folder):
        path = folder / name
        if _TEMP.fullmatch(name) and _age(path, now) > STALE_TEMP_SECONDS:
            _remove(path)
    return removed


def clear(folder: Path) -> list[Entry]:
    """Remove every library in ``folder``; returns them."""
    return [e for e in entries(folder) if _remove(e.path)]


def _age(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _remove(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
    except OSError as e:
        raise XlacError(f"cannot remove '{path}' from the xlac cache: {e.strerror or e}") from None
