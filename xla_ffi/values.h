// Values of the three dtypes as float32: bfloat16/float16 conversions by integer arithmetic
// (round to nearest even, the same on the CPU, the GPU and in jax.numpy), per-dtype load,
// store and rounding, and the exact error-bound test the quantizer and the decoder share.
#pragma once

#include "format.h"

namespace lc {

LC_HD float bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }
LC_HD uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
LC_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  if (exp == 0x1f) return u2f(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return u2f(sign);
    float v = (float)man * (1.0f / 16777216.0f);  // man * 2^-24, exact
    return (sign ? -v : v);
  }
  return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}
LC_HD uint16_t f32_to_f16(float f) {  // round to nearest even, overflow to Inf
  uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (a < 0x38800000u) {                                     // below 2^-14: subnormal
    if (a < 0x33000000u) return (uint16_t)sign;               // below 2^-25: zero
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;                                // 14 + (113 - e) - 1
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u;  // rebias exponent by -112
  uint32_t keep = r >> 13, rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (keep & 1u))) ++keep;
  return (uint16_t)(sign | keep);
}

LC_HD float load_value(const uint8_t* p, int dtype, size_t i) {
  if (dtype == kF32) { float f; memcpy(&f, p + 4 * i, 4); return f; }
  uint16_t h; memcpy(&h, p + 2 * i, 2);
  return dtype == kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
// Round a float32 to the output dtype and back, as the decoder stores it.
LC_HD float round_to_dtype(float f, int dtype) {
  if (dtype == kF32) return f;
  return dtype == kBF16 ? bf16_to_f32(f32_to_bf16(f)) : f16_to_f32(f32_to_f16(f));
}
LC_HD void store_value(uint8_t* p, int dtype, size_t i, float f) {
  if (dtype == kF32) { memcpy(p + 4 * i, &f, 4); return; }
  uint16_t h = dtype == kBF16 ? f32_to_bf16(f) : f32_to_f16(f);
  memcpy(p + 2 * i, &h, 2);
}

// |x - y| <= eb decided exactly in float32 (TwoSum gives the rounding error of x - y), so the
// CPU, CUDA and jax.numpy reference agree bit for bit. False for non-finite x, y or eb.
LC_HD bool within_bound(float x, float y, float eb) {
  float s = x - y;
  float bb = s - x;
  float err = (x - (s - bb)) + ((-y) - bb);
  float a = s < 0.0f ? -s : s;
  bool tie_ok = s > 0.0f ? err <= 0.0f : err >= 0.0f;  // exact |x - y| == eb or just below
  return (a < eb) | ((a == eb) & tie_ok);              // branch-free: the caller vectorises
}

// ---------------------------------------------------------------- value access per dtype
template <int D> struct Val;
template <> struct Val<kF32> {
  static LC_HD float load(const uint8_t* p, uint64_t i) { float f; memcpy(&f, p + 4 * i, 4); return f; }
  static LC_HD float round(float f) { return f; }
};
template <> struct Val<kBF16> {
  static LC_HD float load(const uint8_t* p, uint64_t i) { uint16_t h; memcpy(&h, p + 2 * i, 2); return bf16_to_f32(h); }
  static LC_HD float round(float f) { return bf16_to_f32(f32_to_bf16(f)); }
};
template <> struct Val<kF16> {
  static LC_HD float load(const uint8_t* p, uint64_t i) { uint16_t h; memcpy(&h, p + 2 * i, 2); return f16_to_f32(h); }
  static LC_HD float round(float f) { return f16_to_f32(f32_to_f16(f)); }
};

// The unbiased exponent e of a float32 with |f| in [2^e, 2^(e+1)) (-127 for zero and
// subnormals, 128 for Inf and NaN).
LC_HD int exponent_of(float f) { return (int)((f2u(f) >> 23) & 0xffu) - 127; }
// 2^e as a float32 for -126 <= e <= 127.
LC_HD float pow2f(int e) { return u2f((uint32_t)(e + 127) << 23); }

// Round half to even for v >= 0 without libm (the x86-64 baseline has no roundss): below 2^23,
// adding 2^23 leaves no fraction bits, so the FPU's round-to-nearest-even does it. == rintf(v).
LC_HD float rint_nonneg(float v) { return v < 8388608.0f ? (v + 8388608.0f) - 8388608.0f : v; }

}  // namespace lc
