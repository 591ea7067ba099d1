"""The ELF relocatable objects the emitter writes: what their sections cost, which symbols
they need, and the one build attribute LLVM leaves out.

    obj = ElfObject(object_code)
    obj.footprint(".rodata.lenet.weights")   # {"code": ..., "weights": ..., ...}
    obj.undefined_symbols()                  # ["memcpy", "memset"]
    obj.symbols()                            # (defined, undefined) globals, table order
    set_arm_vfp_args(object_code)            # ARM: Tag_ABI_VFP_args = VFP registers

Only what these need is read: the section headers and the symbol table (ELF32 and
ELF64, either byte order).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

SHT_SYMTAB, SHT_NOBITS, SHT_ARM_ATTRIBUTES = 2, 8, 0x70000003
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHN_UNDEF = 0
STB_GLOBAL, STB_WEAK = 1, 2
STT_SECTION, STT_FILE = 3, 4
TAG_FILE, TAG_ABI_VFP_ARGS, VFP_ARGS_VFP_REGISTERS = 1, 28, 1


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    header_offset: int     # where its section header is in the file


class ElfObject:
    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF":
            raise ValueError("not an ELF file")
        self.data = data
        self.is64 = data[4] == 2
        self.endian = "<" if data[5] == 1 else ">"
        e = self.endian
        if self.is64:
            shoff, = struct.unpack_from(e + "Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x3A)
        else:
            shoff, = struct.unpack_from(e + "I", data, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x2E)
        raw = []
        header = e + ("IIQQQQI" if self.is64 else "IIIIIII")   # name ... link
        for k in range(shnum):
            at = shoff + k * shentsize
            name, typ, flags, _, offset, size, link = struct.unpack_from(header, data, at)
            raw.append((name, typ, flags, offset, size, link, at))
        names = raw[shstrndx]
        self.sections = [Section(k, self._string(names[3], r[0]), r[1], r[2], r[3], r[4], r[5],
                                 r[6]) for k, r in enumerate(raw)]

    def _string(self, table_offset: int, at: int) -> str:
        start = table_offset + at
        return self.data[start:self.data.index(b"\0", start)].decode("utf-8", "replace")

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def contents(self, section: Section) -> bytes:
        return self.data[section.offset:section.offset + section.size]

    def symbols(self) -> tuple[list[str], list[str]]:
        """The global and weak symbols the object defines, and those it needs, in the
        order of its symbol table."""
        defined, undefined = [], []
        fmt, size = ("IBBHQQ", 24) if self.is64 else ("IIIBBH", 16)
        for symtab in (s for s in self.sections if s.type == SHT_SYMTAB):
            strtab = self.sections[symtab.link].offset
            for at in range(symtab.offset, symtab.offset + symtab.size, size):
                fields = struct.unpack_from(self.endian + fmt, self.data, at)
                name, info, shndx = ((fields[0], fields[1], fields[3]) if self.is64
                                     else (fields[0], fields[3], fields[5]))
                if (info >> 4) not in (STB_GLOBAL, STB_WEAK) or \
                        (info & 0xF) in (STT_SECTION, STT_FILE) or not name:
                    continue
                (undefined if shndx == SHN_UNDEF else defined).append(self._string(strtab, name))
        return defined, undefined

    def undefined_symbols(self) -> list[str]:
        """Names the object needs from elsewhere (what ``nm -u`` lists), sorted; the
        linker's own _GLOBAL_OFFSET_TABLE_ (position-independent code) left out."""
        return sorted(set(self.symbols()[1]) - {"_GLOBAL_OFFSET_TABLE_"})

    def footprint(self, weights_section: str | None) -> dict[str, int]:
        """Bytes of the loaded sections by what they hold: ``code`` (executable),
        ``weights`` (the section named ``weights_section``), ``rodata`` (every other
        read-only section: constants, NAME_info, unwind tables; ``.data.rel.ro`` too,
        read-only once relocated) and ``data`` (writable: .data, .bss)."""
        out = {"code": 0, "weights": 0, "rodata": 0, "data": 0}
        for s in self.sections:
            if not s.flags & SHF_ALLOC:
                continue
            if s.flags & SHF_EXECINSTR:
                kind = "code"
            elif s.name == weights_section:
                kind = "weights"
            elif s.flags & SHF_WRITE and not s.name.startswith(".data.rel.ro"):
                kind = "data"
            else:
                kind = "rodata"
            out[kind] += s.size
        return out


def set_arm_vfp_args(data: bytes) -> bytes:
    """The object with Tag_ABI_VFP_args = VFP registers in its .ARM.attributes.

    The code of an ``...eabihf`` object is hard-float, but LLVM writes the tag only when
    the float ABI was set explicitly, which llvmlite cannot do; without it, GNU ld refuses
    to link the object into a ``-mfloat-abi=hard`` program. The section grows by two
    bytes, so its new contents go to the end of the file."""
    obj = ElfObject(data)
    section = next(s for s in obj.sections if s.type == SHT_ARM_ATTRIBUTES)
    body = bytearray(obj.contents(section))
    e = obj.endian
    at = 1                                       # after the format version 'A'
    while at < len(body):
        length, = struct.unpack_from(e + "I", body, at)
        vendor_end = body.index(b"\0", at + 4)
        if body[at + 4:vendor_end] == b"aeabi":
            sub = vendor_end + 1
            while sub < at + length:
                tag, size = body[sub], struct.unpack_from(e + "I", body, sub + 1)[0]
                if tag == TAG_FILE:
                    body[sub + size:sub + size] = bytes((TAG_ABI_VFP_ARGS, VFP_ARGS_VFP_REGISTERS))
                    struct.pack_into(e + "I", body, sub + 1, size + 2)
                    struct.pack_into(e + "I", body, at, length + 2)
                    return _replace_section(obj, section, bytes(body))
                sub += size
        at += length
    raise ValueError("no aeabi file attributes in the object")


def _replace_section(obj: ElfObject, section: Section, contents: bytes) -> bytes:
    out = bytearray(obj.data)
    offset = len(out)
    out += contents
    e = obj.endian
    if obj.is64:
        struct.pack_into(e + "QQ", out, section.header_offset + 24, offset, len(contents))
    else:
        struct.pack_into(e + "II", out, section.header_offset + 16, offset, len(contents))
    return bytes(out)
