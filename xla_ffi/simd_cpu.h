// CPU vector kernels for the float32 hot loops of frame.h: the range scan and the
// quantize-and-verify pass. Written with GCC/Clang vector extensions in a width-generic form,
// instantiated at 16 bytes (SSE2 on the x86-64 baseline, NEON on aarch64) and, on x86-64, at
// 32 bytes under target("avx2") chosen at run time. Every lane does the scalar code's IEEE
// operations in the same order, so all widths (and the CUDA and jax.numpy paths) give
// identical codes and identical outlier decisions.
#pragma once

#include <stdint.h>
#include <string.h>

namespace lc {
namespace simd {

#define LC_INLINE inline __attribute__((always_inline))

typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

// Finite minimum and maximum of in[0, n8) (n8 a multiple of 2 * lanes); +-Inf when none.
template <typename fv, typename iv>
LC_INLINE void range_f32(const float* in, uint64_t n8, float* lo, float* hi) {
  constexpr int VB = sizeof(fv), L = VB / 4;
  const fv zero = {}, inf = zero + __builtin_inff();
  fv mn0 = inf, mn1 = inf, mx0 = -inf, mx1 = -inf;
  for (uint64_t i = 0; i < n8; i += 2 * L) {
    fv v0, v1;
    memcpy(&v0, in + i, VB);
    memcpy(&v1, in + i + L, VB);
    iv f0 = (v0 - v0) == zero;  // finite lanes: x - x == 0
    iv f1 = (v1 - v1) == zero;
    fv a0 = f0 ? v0 : inf, b0 = f0 ? v0 : -inf, a1 = f1 ? v1 : inf, b1 = f1 ? v1 : -inf;
    mn0 = a0 < mn0 ? a0 : mn0;
    mx0 = b0 > mx0 ? b0 : mx0;
    mn1 = a1 < mn1 ? a1 : mn1;
    mx1 = b1 > mx1 ? b1 : mx1;
  }
  float l = __builtin_inff(), h = -__builtin_inff();
  for (int k = 0; k < L; ++k) {
    l = mn0[k] < l ? mn0[k] : l;
    l = mn1[k] < l ? mn1[k] : l;
    h = mx0[k] > h ? mx0[k] : h;
    h = mx1[k] > h ? mx1[k] : h;
  }
  *lo = l;
  *hi = h;
}

// Quantize-and-verify of in[0, n4) (n4 a multiple of lanes), as quantize_verify_scalar in
// frame.h: codes into `codes`, failing positions appended to bad[nbad...]; returns nbad.
template <typename fv, typename iv>
LC_INLINE uint64_t quantize_f32(const float* in, uint64_t n4, float vmin, float inv, float step,
                                float eb_abs, float maxf, uint32_t* codes, uint32_t* bad,
                                uint64_t nbad) {
  constexpr int VB = sizeof(fv), L = VB / 4;
  const fv zero = {}, two23 = zero + 8388608.0f, vmn = zero + vmin, vinv = zero + inv,
           vstep = zero + step, veb = zero + eb_abs, vmax = zero + maxf;
  for (uint64_t i = 0; i < n4; i += L) {
    fv v;
    memcpy(&v, in + i, VB);
    iv fin = (v - v) == zero;
    fv t = (v - vmn) * vinv;
    fv qf = t < two23 ? (t + two23) - two23 : t;  // rint for t >= 0 (frame.h rint_nonneg)
    qf = qf >= zero ? qf : zero;
    qf = qf <= vmax ? qf : vmax;
    qf = fin ? qf : zero;
    fv rec = vmn + qf * vstep;
    fv s = v - rec, bb = s - v;  // TwoSum: s + err == v - rec exactly (frame.h within_bound)
    fv err = (v - (s - bb)) + ((-rec) - bb);
    fv a = s < zero ? -s : s;
    iv tie = s > zero ? (err <= zero) : (err >= zero);
    iv ok = fin & ((a < veb) | ((a == veb) & tie));
    iv q = __builtin_convertvector(qf, iv);
    memcpy(codes + i, &q, VB);
    iv nok = ~ok;
    uint64_t any[VB / 8], acc = 0;
    memcpy(any, &nok, VB);
    for (int k = 0; k < VB / 8; ++k) acc |= any[k];
    if (acc)  // rare: record the failing lanes in order
      for (int k = 0; k < L; ++k)
        if (!ok[k]) bad[nbad++] = (uint32_t)(i + k);
  }
  return nbad;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) inline void range_f32_avx2(const float* in, uint64_t n8, float* lo, float* hi) {
  range_f32<f32x8, i32x8>(in, n8, lo, hi);
}
__attribute__((target("avx2"))) inline uint64_t quantize_f32_avx2(
    const float* in, uint64_t n4, float vmin, float inv, float step, float eb_abs, float maxf,
    uint32_t* codes, uint32_t* bad, uint64_t nbad) {
  return quantize_f32<f32x8, i32x8>(in, n4, vmin, inv, step, eb_abs, maxf, codes, bad, nbad);
}
inline bool has_avx2() {
  static const bool v = __builtin_cpu_supports("avx2");
  return v;
}
#endif

// Dispatchers: process the largest prefix the chosen width covers; return its length.
inline uint64_t range_f32_prefix(const float* in, uint64_t n, float* lo, float* hi) {
#if defined(__x86_64__)
  if (has_avx2()) { uint64_t m = n & ~(uint64_t)15; range_f32_avx2(in, m, lo, hi); return m; }
#endif
  uint64_t m = n & ~(uint64_t)7;
  range_f32<f32x4, i32x4>(in, m, lo, hi);
  return m;
}
inline uint64_t quantize_f32_prefix(const float* in, uint64_t n, float vmin, float inv, float step,
                                    float eb_abs, float maxf, uint32_t* codes, uint32_t* bad,
                                    uint64_t* nbad) {
#if defined(__x86_64__)
  if (has_avx2()) {
    uint64_t m = n & ~(uint64_t)7;
    *nbad = quantize_f32_avx2(in, m, vmin, inv, step, eb_abs, maxf, codes, bad, 0);
    return m;
  }
#endif
  uint64_t m = n & ~(uint64_t)3;
  *nbad = quantize_f32<f32x4, i32x4>(in, m, vmin, inv, step, eb_abs, maxf, codes, bad, 0);
  return m;
}

#undef LC_INLINE
}  // namespace simd
}  // namespace lc
