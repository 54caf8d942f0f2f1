"""Read a shared library's ``DT_SONAME`` from its ELF dynamic section, without running ``readelf``.

The SONAME is the name the loader records and TensorFlow asks for (``libcudart.so.11.0`` inside
``libcudart.so.11.8.89``), so it tells the CUDA major even when a file or a pip wheel's copy carries no version in its
file name. Only the headers, the dynamic section and one string are read; anything malformed yields ``None``.
"""

from __future__ import annotations

import struct

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_STRTAB, _DT_SONAME = 0, 5, 14
_MAX_DYNAMIC_BYTES = 64 * 1024
_MAX_NAME = 4096


def read_soname(path: str) -> str | None:
    """The ``DT_SONAME`` of the ELF shared object at ``path``, or ``None`` (not ELF, no SONAME, unreadable)."""
    try:
        with open(path, "rb") as handle:
            return _soname(handle)
    except (OSError, struct.error, ValueError):
        return None


def _soname(handle) -> str | None:  # type: ignore[no-untyped-def]
    ident = handle.read(16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    wide = ident[4] == 2
    order = "<" if ident[5] == 1 else ">"
    header = handle.read(48 if wide else 36)
    if wide:
        _, _, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack(order + "HHIQQQIHHH", header[:42])
        entry = struct.Struct(order + "IIQQQQQQ")  # type, flags, offset, vaddr, paddr, filesz, memsz, align
    else:
        _, _, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack(order + "HHIIIIIHHH", header[:30])
        entry = struct.Struct(order + "IIIIIIII")  # type, offset, vaddr, paddr, filesz, memsz, flags, align
    if phentsize < entry.size or phnum > 512:
        return None
    handle.seek(phoff)
    table = handle.read(phentsize * phnum)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic = None
    for index in range(phnum):
        fields = entry.unpack_from(table, index * phentsize)
        if wide:
            kind, offset, vaddr, filesz = fields[0], fields[2], fields[3], fields[5]
        else:
            kind, offset, vaddr, filesz = fields[0], fields[1], fields[2], fields[4]
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, min(filesz, _MAX_DYNAMIC_BYTES))
    if dynamic is None:
        return None
    handle.seek(dynamic[0])
    body = handle.read(dynamic[1])
    pair = struct.Struct(order + ("qQ" if wide else "iI"))
    strtab = soname = None
    for start in range(0, len(body) - pair.size + 1, pair.size):
        tag, value = pair.unpack_from(body, start)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        elif tag == _DT_SONAME:
            soname = value
    if strtab is None or soname is None:
        return None
    # DT_STRTAB is a virtual address: map it to a file offset through the PT_LOAD segment that holds it.
    for vaddr, offset, filesz in loads:
        if vaddr <= strtab < vaddr + filesz:
            handle.seek(strtab - vaddr + offset + soname)
            raw = handle.read(_MAX_NAME).split(b"\0", 1)[0]
            return raw.decode("ascii", "replace") or None
    return None
