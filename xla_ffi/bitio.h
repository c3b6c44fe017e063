// Bit streams of the frame format: LSB-first bit writer and reader, and the bit-packed
// sections (count codes of `bits` bits, LSB first, padded to a byte), written and read with
// compile-time widths where they are common and by the CPU vector kernels where there are some.
#pragma once

#include "format.h"
#include "simd.h"

namespace lc {

// LSB-first bit writer into a buffer the caller sized exactly; stores whole 32-bit words, which
// are always inside the frame being written.
struct BitWriter {
  uint8_t* p;
  uint64_t acc;
  int nacc;
  LC_HD void put(uint32_t v, int n) {  // n <= 32
    acc |= (uint64_t)v << nacc;
    nacc += n;
    if (nacc >= 32) { put_u32(p, (uint32_t)acc); p += 4; acc >>= 32; nacc -= 32; }
  }
  LC_HD uint8_t* flush() {
    while (nacc > 0) { *p++ = (uint8_t)acc; acc >>= 8; nacc -= 8; }
    acc = 0; nacc = 0;
    return p;
  }
};

// LSB-first bit reader over [p, end); reading past the end yields zeros and sets overrun.
struct BitReader {
  const uint8_t* p;
  const uint8_t* end;
  uint64_t acc;
  int nacc;
  bool overrun;
  // Branchless refill (F. Giesen, "Reading bits in far too many ways", variant 4): bytes
  // loaded beyond the whole ones consumed are loaded again at the same position later.
  LC_HD void refill() {
    if (end - p >= 8) {
      uint64_t w;
      memcpy(&w, p, 8);  // little-endian hosts and devices only (x86-64, aarch64, CUDA)
      acc |= w << nacc;
      p += (63 - nacc) >> 3;
      nacc |= 56;
      return;
    }
    while (nacc <= 56 && p < end) { acc |= (uint64_t)(*p++) << nacc; nacc += 8; }
  }
  LC_HD uint32_t peek(int n) { if (nacc < n) refill(); return (uint32_t)(acc & ((1ull << n) - 1)); }
  LC_HD void skip(int n) {
    if (n > nacc) { overrun = true; acc = 0; nacc = 0; return; }
    acc >>= n; nacc -= n;
  }
  LC_HD uint32_t get(int n) { uint32_t v = peek(n); skip(n); return v; }
};

// ---------------------------------------------------------------- bit-packed sections
// Packs count codes of `bits` bits LSB first. Widths up to 16 go 8 codes (bits bytes) at a
// time with the width a compile-time constant; wider ones through the generic writer.
template <int B>
LC_HD uint8_t* pack_fixed(uint8_t* o, const uint32_t* c, uint64_t count) {
  uint64_t i = 0;
  for (; i + 8 <= count; i += 8, o += B) {
    uint64_t lo = 0, hi = 0;
    for (int k = 0; k < 8; ++k) {
      int s = k * B;
      if (s < 64) lo |= (uint64_t)c[i + k] << s;
      if (s + B > 64) hi |= (uint64_t)c[i + k] >> (s < 64 ? 64 - s : 0) << (s < 64 ? 0 : s - 64);
    }
    uint8_t tmp[16];
    memcpy(tmp, &lo, 8);
    memcpy(tmp + 8, &hi, 8);
    memcpy(o, tmp, B);
  }
  BitWriter bw = {o, 0, 0};
  for (; i < count; ++i) bw.put(c[i], B);
  return bw.flush();
}
LC_HD uint8_t* write_packed(uint8_t* o, const uint32_t* c, uint64_t count, int bits) {
#if LC_CPU_SIMD
  const uint64_t m = simd::pack_codes_prefix(o, c, count, bits);  // whole bytes: m % 8 == 0
  o += m / 8 * bits;
  c += m;
  count -= m;
#endif
  switch (bits) {
    case 0: return o;
    case 1: return pack_fixed<1>(o, c, count);
    case 2: return pack_fixed<2>(o, c, count);
    case 3: return pack_fixed<3>(o, c, count);
    case 4: return pack_fixed<4>(o, c, count);
    case 5: return pack_fixed<5>(o, c, count);
    case 6: return pack_fixed<6>(o, c, count);
    case 7: return pack_fixed<7>(o, c, count);
    case 8: return pack_fixed<8>(o, c, count);
    case 9: return pack_fixed<9>(o, c, count);
    case 10: return pack_fixed<10>(o, c, count);
    case 11: return pack_fixed<11>(o, c, count);
    case 12: return pack_fixed<12>(o, c, count);
    default: break;
  }
  BitWriter bw = {o, 0, 0};
  for (uint64_t i = 0; i < count; ++i) bw.put(c[i], bits);
  return bw.flush();
}

// Replaces code i (bits <= 8, so within two bytes) of a bit-packed section.
LC_HD void set_packed(uint8_t* sec, uint64_t i, int bits, uint32_t q) {
  const uint64_t b = i * (uint64_t)bits;
  const uint32_t mask = ((1u << bits) - 1u) << (b % 8);
  uint32_t v = (uint32_t)sec[b / 8] | ((uint32_t)sec[b / 8 + 1] << 8);
  v = (v & ~mask) | (q << (b % 8));
  sec[b / 8] = (uint8_t)v;
  sec[b / 8 + 1] = (uint8_t)(v >> 8);
}

// Unpacks count codes of width B and calls emit(i, code).
template <int B, typename EmitFn>
LC_HD void unpack_fixed(const uint8_t* p, uint64_t count, EmitFn& emit) {
  uint64_t i = 0;
  const uint32_t mask = (1u << B) - 1u;
  for (; i + 8 <= count; i += 8, p += B) {
    uint8_t tmp[16] = {0};
    memcpy(tmp, p, B);
    uint64_t lo, hi;
    memcpy(&lo, tmp, 8);
    memcpy(&hi, tmp + 8, 8);
    for (int k = 0; k < 8; ++k) {
      int s = k * B;
      uint64_t v = s < 64 ? (lo >> s) : 0;
      if (s > 0 && s < 64 && s + B > 64) v |= hi << (64 - s);
      if (s >= 64) v = hi >> (s - 64);
      emit(i + k, (uint32_t)v & mask);
    }
  }
  BitReader br = {p, p + packed_bytes(count - i, B), 0, 0, false};
  for (; i < count; ++i) emit(i, br.get(B));
}

template <typename EmitFn>
LC_HD bool read_packed(Reader& r, uint64_t count, int bits, EmitFn& emit) {
  const uint8_t* sp = r.take(packed_bytes(count, bits));
  if (!sp) return false;
  switch (bits) {
    case 0: for (uint64_t i = 0; i < count; ++i) emit(i, 0u); return true;
    case 1: unpack_fixed<1>(sp, count, emit); return true;
    case 2: unpack_fixed<2>(sp, count, emit); return true;
    case 3: unpack_fixed<3>(sp, count, emit); return true;
    case 4: unpack_fixed<4>(sp, count, emit); return true;
    case 5: unpack_fixed<5>(sp, count, emit); return true;
    case 6: unpack_fixed<6>(sp, count, emit); return true;
    case 7: unpack_fixed<7>(sp, count, emit); return true;
    case 8: unpack_fixed<8>(sp, count, emit); return true;
    default: break;
  }
  BitReader br = {sp, sp + packed_bytes(count, bits), 0, 0, false};
  for (uint64_t i = 0; i < count; ++i) emit(i, br.get(bits));
  return !br.overrun;
}

// read_packed into float32 values base + q * step, the bulk by the vector path where there is one.
template <typename EmitFn>
LC_HD bool read_packed_f32(Reader& r, uint64_t count, int bits, float base, float step, float* out,
                           EmitFn& emit) {
#if LC_CPU_SIMD
  if (packed_bytes(count, bits) <= (size_t)(r.end - r.p)) {
    const uint64_t m = simd::unpack_dequant_prefix(r.p, count, bits, base, step, out);
    if (m) {
      r.p += m / 8 * bits;
      auto shifted = [&emit, m](uint64_t i, uint32_t q) { emit(m + i, q); };
      return read_packed(r, count - m, bits, shifted);
    }
  }
#endif
  (void)base; (void)step; (void)out;
  return read_packed(r, count, bits, emit);
}

}  // namespace lc
