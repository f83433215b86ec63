// UTF-8 decoding with Python's rules, for the names the runner reports: ELF symbol names (cubin_elf.h,
// where Python's strict decode fails the whole image) and JSON texts (cupti_logic.h, where Python
// decodes with errors="replace"). Well-formed means: no overlong forms, no surrogates, nothing past
// U+10FFFF. A malformed sequence is skipped as its maximal subpart (the lead byte and the continuation
// bytes that were still acceptable), which is what Python replaces with one U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ptxrunner {

// Decode the code point at s[*i] into *cp and advance *i past it; on a malformed sequence return false
// and advance *i past its maximal subpart (at least one byte).
inline bool utf8_next(const std::string& s, size_t* i, uint32_t* cp) {
  unsigned char b0 = static_cast<unsigned char>(s[*i]);
  if (b0 < 0x80) {
    *cp = b0;
    ++*i;
    return true;
  }
  size_t n = 0;
  uint32_t c = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte (then 80..BF)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    ++*i;
    return false;
  }
  size_t k = 1;
  for (; k < n && *i + k < s.size(); ++k) {
    unsigned char b = static_cast<unsigned char>(s[*i + k]);
    if (b < lo || b > hi) break;
    lo = 0x80, hi = 0xBF;
    c = (c << 6) | (b & 0x3F);
  }
  *i += k;
  if (k < n) return false;
  *cp = c;
  return true;
}

// Whether all of s is well-formed UTF-8 (Python's bytes.decode("utf-8") would not raise).
inline bool utf8_valid(const std::string& s) {
  uint32_t cp = 0;
  for (size_t i = 0; i < s.size();)
    if (!utf8_next(s, &i, &cp)) return false;
  return true;
}

}  // namespace ptxrunner
