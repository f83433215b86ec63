// The functions a cubin defines, read from its ELF symbol table: the runner's port of
// ptxgym/cpu/cubin_symbols.py (elf_functions), with the same checks and the same answers.
//
// The image may come from the candidate's process, so every offset is bounds-checked (in 64-bit
// arithmetic that cannot wrap) and anything malformed reads as "no answer" (Python's None), never as a
// crash: a 64-bit little-endian ELF, section headers inside the image, each SHT_SYMTAB's entries and its
// linked string table inside the image, at most 2^20 symbols per table, names valid UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "utf8.h"

namespace ptxrunner {

namespace cubin_elf_detail {

constexpr uint32_t kShtSymtab = 2;
constexpr unsigned kSttFunc = 2;
constexpr uint64_t kMaxSymbols = uint64_t(1) << 20;

// Little-endian unsigned integer of `width` bytes at p (the caller has bounds-checked it).
inline uint64_t le(const unsigned char* p, int width) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// a + b <= limit, without wrapping.
inline bool fits(uint64_t a, uint64_t b, uint64_t limit) { return a <= limit && b <= limit - a; }

struct Section {
  uint64_t type, offset, size, link, entsize;
};

}  // namespace cubin_elf_detail

// Names of the STT_FUNC symbols of a 64-bit little-endian ELF image, in symbol-table order; nullopt if
// the image is not one or is malformed (as elf_functions returns None).
inline std::optional<std::vector<std::string>> elf_functions(const unsigned char* img, size_t len) {
  using namespace cubin_elf_detail;
  if (len < 64 || std::memcmp(img, "\x7f" "ELF", 4) != 0 || img[4] != 2 || img[5] != 1) return std::nullopt;
  uint64_t shoff = le(img + 0x28, 8), shentsize = le(img + 0x3A, 2), shnum = le(img + 0x3C, 2);
  if (shentsize < 64 || shnum == 0 || shoff > len || shnum * shentsize > len - shoff) return std::nullopt;
  std::vector<Section> sections;
  for (uint64_t i = 0; i < shnum; ++i) {
    const unsigned char* s = img + shoff + i * shentsize;  // Elf64_Shdr: name, type, flags, addr, offset,
    sections.push_back({le(s + 4, 4), le(s + 24, 8), le(s + 32, 8), le(s + 40, 4), le(s + 56, 8)});
  }  // size, link, info, addralign, entsize
  std::vector<std::string> names;
  for (const Section& sec : sections) {
    if (sec.type != kShtSymtab) continue;
    uint64_t entsize = sec.entsize ? sec.entsize : 24;
    if (entsize < 24 || sec.link >= shnum || !fits(sec.offset, sec.size, len) ||
        sec.size / entsize > kMaxSymbols)
      return std::nullopt;
    const Section& strtab = sections[sec.link];
    if (!fits(strtab.offset, strtab.size, len)) return std::nullopt;
    const char* str = reinterpret_cast<const char*>(img + strtab.offset);
    for (uint64_t k = 0; k < sec.size / entsize; ++k) {
      const unsigned char* sym = img + sec.offset + k * entsize;  // Elf64_Sym: st_name, st_info, ...
      uint64_t st_name = le(sym, 4);
      if ((sym[4] & 0xF) != kSttFunc || st_name >= strtab.size) continue;
      const void* nul = std::memchr(str + st_name, '\0', strtab.size - st_name);
      size_t end = nul ? static_cast<size_t>(static_cast<const char*>(nul) - str) : strtab.size;
      std::string name(str + st_name, end - st_name);
      if (!utf8_valid(name)) return std::nullopt;
      names.push_back(std::move(name));
    }
  }
  return names;
}

}  // namespace ptxrunner
