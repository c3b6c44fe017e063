// The frame checksum (format.h: checksum_seed + the sum of checksum_word over the frame's
// 32-bit words), with the CPU vector kernels summing the bulk of the words.
#pragma once

#include "format.h"
#include "simd.h"

namespace lc {

LC_HD uint32_t lc_checksum(const uint8_t* f, size_t n) {
  uint32_t h = checksum_seed(n);
  size_t i = 0;
#if LC_CPU_SIMD
  uint32_t part = 0;
  i = (size_t)simd::checksum_prefix(f, n / 4, &part);
  h += part;
#endif
  for (; i < (n + 3) / 4; ++i) h += checksum_word(f, n, i);
  return h;
}

// lc_checksum as the checksum argument of parse_header.
struct FrameChecksum {
  LC_HD uint32_t operator()(const uint8_t* f, size_t n) const { return lc_checksum(f, n); }
};

}  // namespace lc
