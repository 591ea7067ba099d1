"""Writing a compile's output files together: all of them or none.

Each file is first written in full to a temporary name in its own folder (so the
final rename stays on one file system and is atomic), and only when every
temporary file is complete are they renamed into place. A failure while writing
removes the temporary files and leaves any previous outputs untouched. A failure
between two renames (rare: both names are in folders we just wrote to) removes
the files already renamed, so no half-updated pair (new OUT.o, old OUT.h) is left.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from .hlo import XlacError


def _os_reason(e: OSError) -> str:
    return e.strerror or str(e)


def _write_temp(path: Path, data: bytes) -> Path:
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        # os.open applies the umask, as opening the final name directly would.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise XlacError(f"cannot write '{path}': {_os_reason(e)}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError as e:
        temp.unlink(missing_ok=True)
        raise XlacError(f"cannot write '{path}': {_os_reason(e)}") from None
    return temp


def write_files(files: dict[Path, bytes]) -> None:
    """Write every ``path -> data`` of ``files``, all or none (see the module docstring)."""
    temps: dict[Path, Path] = {}
    try:
        for path, data in files.items():
            if path.is_dir():
                raise XlacError(f"cannot write '{path}': it is a folder")
            temps[path] = _write_temp(path, data)
    except BaseException:
        for temp in temps.values():
            temp.unlink(missing_ok=True)
        raise
    renamed: list[Path] = []
    try:
        for path, temp in temps.items():
            os.replace(temp, path)
            renamed.append(path)
    except OSError as e:
        for path in renamed:
            path.unlink(missing_ok=True)
        for path, temp in temps.items():
            if path not in renamed:
                temp.unlink(missing_ok=True)
        raise XlacError(f"cannot write '{path}': {_os_reason(e)}") from None
