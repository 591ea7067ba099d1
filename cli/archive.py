"""``--emit lib``: a static library of the model, its object plus the runtime objects it needs.

The archive is written here, not by running the system ``ar``: xlac makes objects
for any target without a C toolchain, and a library should need none either
(a host ``ar`` may not index another architecture's objects); the bytes are the
same on every machine (no dates or user ids, as ``ar D``); and the archive is one
more output written all-or-nothing with the header (outputs.py).

The format is the common System V / GNU one that GNU ld, lld and the Arm
toolchains read: ``!<arch>\\n``, then the symbol index member ``/`` (big-endian
count, member offsets, NUL-terminated names) that linkers search, the member
``//`` holding names longer than 15 bytes when there are any, then each member:
a 60-byte header and its bytes, padded to an even length. The index lists the
global symbols each ELF member defines, read from its symbol table. Only ELF
objects are supported (every target xlac has a triple for but Apple's and
Windows', whose archives differ).

Runtime objects: the header states the runtime functions an object needs
(``nm -u``: ``xlac_*``); when it needs any, ``xlac_runtime.c`` is compiled into
the library with the system C compiler, which serves objects for this machine
only. For another target the error says to compile that file with the target's
toolchain (``xlac_add_model`` in CMake does).
"""
from __future__ import annotations

import os
import struct
import subprocess
import tempfile
from pathlib import Path

from . import runtime_c
from .emitter.elf import ElfObject
from .hlo import XlacError

RUNTIME_SOURCE = Path(os.path.dirname(os.path.abspath(runtime_c.__file__))) / "xlac_runtime.c"

def elf_symbols(data: bytes, what: str = "the object") -> tuple[list[str], list[str]]:
    """The global symbols an ELF object defines, and those it needs (undefined)."""
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise XlacError(f"{what} is not an ELF object; --emit lib writes ELF archives only "
                        "(use -o OUT.o and the platform's archiver)")
    return ElfObject(data).symbols()


def write_archive(members: list[tuple[str, bytes]]) -> bytes:
    """An ``ar`` archive of ``(name, ELF object)`` members with its symbol index."""
    names = [n for n, _ in members]
    if len(set(names)) != len(names):
        raise XlacError(f"archive members need distinct names: {names}")
    long_names = bytearray()
    header_names = []
    for n in names:
        if len(n) <= 15:
            header_names.append(f"{n}/")
        else:
            header_names.append(f"/{len(long_names)}")
            long_names += f"{n}/\n".encode()
    long_names += b"\n" * (len(long_names) & 1)     # as GNU ar: padding inside the member
    symbols = [(s, k) for k, (n, data) in enumerate(members)
               for s in elf_symbols(data, f"archive member '{n}'")[0]]
    index_size = 4 + 4 * len(symbols) + sum(len(s.encode()) + 1 for s, _ in symbols)
    offset = 8 + 60 + _even(index_size)
    if long_names:
        offset += 60 + _even(len(long_names))
    member_offsets = []
    for _, data in members:
        member_offsets.append(offset)
        offset += 60 + _even(len(data))
    if offset >= 1 << 32:
        raise XlacError("the library would exceed 4 GiB, the most a System V archive index "
                        "addresses; use -o OUT.o")
    index = struct.pack(">I", len(symbols))
    index += b"".join(struct.pack(">I", member_offsets[k]) for _, k in symbols)
    index += b"".join(s.encode() + b"\0" for s, _ in symbols)
    index += b"\0" * (len(index) & 1)      # as GNU ar: padding inside the member
    out = bytearray(b"!<arch>\n")
    out += _member("/", index, mode="0")
    if long_names:
        out += _member("//", bytes(long_names), plain=True)
    for header_name, (_, data) in zip(header_names, members):
        out += _member(header_name, data)
    return bytes(out)


def _even(n: int) -> int:
    return n + (n & 1)


def _member(name: str, data: bytes, mode: str = "644", plain: bool = False) -> bytes:
    if plain:        # the long-name table: name and size only
        header = f"{name:<16}{'':<12}{'':<6}{'':<6}{'':<8}{len(data):<10}`\n"
    else:
        header = f"{name:<16}{'0':<12}{'0':<6}{'0':<6}{mode:<8}{len(data):<10}`\n"
    return header.encode() + data + (b"\n" if len(data) & 1 else b"")


def static_library(name: str, object_code: bytes, is_host: bool, triple: str) -> bytes:
    """The archive of NAME's object, with the runtime object when the object needs it."""
    members = [(f"{name}.o", object_code)]
    _, needed = elf_symbols(object_code)
    runtime = sorted(s for s in needed if s.startswith("xlac_"))
    if runtime:
        if not is_host:
            raise XlacError(f"the model needs {', '.join(runtime)} from xlac_runtime.c, which "
                            f"xlac compiles for this machine only; use -o OUT.o and compile "
                            f"{RUNTIME_SOURCE} with the toolchain for {triple} (xlac_add_model "
                            "in CMake does)")
        members.append(("xlac_runtime.o", compile_runtime()))
        if any(s.startswith("xlac_cuda_") for s in runtime):
            # A CUDA object's entries call the driver through xlac_cuda.c (link with -ldl).
            cuda = RUNTIME_SOURCE.with_name("xlac_cuda.c")
            members.append(("xlac_cuda.o", compile_runtime(cuda)))
    return write_archive(members)


def compile_runtime(source: Path = RUNTIME_SOURCE) -> bytes:
    """A runtime source (xlac_runtime.c) compiled for this machine by the system C
    compiler ($CC, else cc)."""
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory(prefix="xlac-runtime-") as folder:
        out = Path(folder) / f"{source.stem}.o"
        cmd = [cc, "-std=c99", "-O2", "-fPIC", "-c", str(source), "-o", str(out)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise XlacError(f"cannot run the C compiler '{cc}' to compile the runtime for the "
                            f"library: {e.strerror or e}") from None
        if done.returncode != 0:
            first = next((line for line in done.stderr.splitlines() if line.strip()), "")
            raise XlacError(f"compiling {source} failed: {first.strip()}")
        return out.read_bytes()
