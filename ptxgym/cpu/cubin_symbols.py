"""The functions a cubin defines, read from its ELF symbol table (no tools, no trust in the image).

A loaded CUDA module is an ELF image; its kernels (and any non-inlined device functions) are ``STT_FUNC``
symbols of ``.symtab``, named as the compiler mangled them, the names CUPTI's kernel records and
cuobjdump's SASS census use. The in-band kernel census (``evaluation/trusted/census.py``) uses this to
see which loaded modules define which kernels. The image may come from a candidate's process, so every
offset is bounds-checked and anything malformed reads as ``None`` ("could not be read"), never raises.
"""

from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB = 2
_STT_FUNC = 2
_MAX_SYMBOLS = 1 << 20


def elf_functions(image: bytes) -> list[str] | None:
    """Names of the ``STT_FUNC`` symbols of a 64-bit little-endian ELF image; None if it is not one."""
    try:
        return _functions(memoryview(image))
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return None


def _functions(img: memoryview) -> list[str] | None:
    if len(img) < 64 or bytes(img[:4]) != _ELF_MAGIC or img[4] != 2 or img[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", img, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", img, 0x3A)
    if shentsize < 64 or shnum == 0 or shoff + shnum * shentsize > len(img):
        return None
    sections = [struct.unpack_from("<IIQQQQIIQQ", img, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for sec in sections:
        if sec[1] != _SHT_SYMTAB:
            continue
        offset, size, link, entsize = sec[4], sec[5], sec[6], sec[9] or 24
        if entsize < 24 or link >= shnum or offset + size > len(img) or size // entsize > _MAX_SYMBOLS:
            return None
        str_off, str_size = sections[link][4], sections[link][5]
        if str_off + str_size > len(img):
            return None
        strtab = bytes(img[str_off : str_off + str_size])
        for k in range(size // entsize):
            st_name, st_info = struct.unpack_from("<IB", img, offset + k * entsize)
            if st_info & 0xF != _STT_FUNC or st_name >= len(strtab):
                continue
            end = strtab.find(b"\0", st_name)
            names.append(strtab[st_name : end if end >= 0 else len(strtab)].decode("utf-8"))
    return names
