// CPU vector kernels for the float32 hot loops of the CPU codec (encoder.h, decoder.h, bitio.h,
// checksum.h): range scan, quantize-and-verify
// (fused with bit-packing for the fixed-rate form), unpack-and-dequantize, checksum. The exact
// code is written with GCC/Clang vector extensions in a width-generic form (SSE2 on the x86-64
// baseline, NEON on aarch64); on x86-64, AVX2 + BMI2 and AVX-512 kernels chosen at run time
// take fast routes and hand every vector they cannot prove to the exact code. Every lane does
// the scalar code's IEEE operations in the same order, so all levels (and the CUDA and
// jax.numpy paths) give identical codes, outlier decisions and frames. The build keeps
// -ffp-contract=off; the AVX-512 arithmetic also uses explicit-rounding intrinsics, which GCC
// never fuses into FMAs (avx512f implies FMA), so its frames do not depend on that flag.
#pragma once

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

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

// Quantize-and-verify of in[0, n4) (n4 a multiple of lanes), as quantize_verify in
// encoder.h (quant.h's quant_code and code_honours): codes into `codes`, failing positions appended to bad[nbad...]; returns nbad.
template <typename fv, typename iv>
LC_INLINE uint64_t quantize_f32(const float* in, uint64_t n4, float vmin, float inv, float step,
                                float eb_abs, float maxf, uint32_t* codes, uint32_t* bad,
                                uint64_t nbad, uint64_t pos0 = 0) {
  constexpr int VB = sizeof(fv), L = VB / 4;
  const fv zero = {}, two23 = zero + 8388608.0f, vmn = zero + vmin, vinv = zero + inv,
           vstep = zero + step, veb = zero + eb_abs, vmax = zero + maxf;
  for (uint64_t i = 0; i < n4; i += L) {
    fv v;
    memcpy(&v, in + i, VB);
    iv fin = (v - v) == zero;
    fv t = (v - vmn) * vinv;
    fv qf = t < two23 ? (t + two23) - two23 : t;  // rint for t >= 0 (values.h rint_nonneg)
    qf = qf >= zero ? qf : zero;
    qf = qf <= vmax ? qf : vmax;
    qf = fin ? qf : zero;
    fv rec = vmn + qf * vstep;
    fv s = v - rec, bb = s - v;  // TwoSum: s + err == v - rec exactly (values.h within_bound)
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
        if (!ok[k]) bad[nbad++] = (uint32_t)(pos0 + i + k);
  }
  return nbad;
}

// Checksum partial sum over 32-bit words [0, nw) (word 1 read as zero), as lc_checksum in
// format.h: sum of fmix32(w_i ^ i * 0x9E3779B9). nw a multiple of lanes.
template <typename uv>
LC_INLINE uint32_t checksum_words(const uint8_t* f, uint64_t nw) {
  constexpr int VB = sizeof(uv), L = VB / 4;
  uv acc = {}, key, step = {};  // key = i * 0x9E3779B9, stepped by addition
  for (int k = 0; k < L; ++k) key[k] = (uint32_t)k * 0x9E3779B9u;
  step += (uint32_t)L * 0x9E3779B9u;
  for (uint64_t i = 0; i < nw; i += L, key += step) {
    uv x;
    memcpy(&x, f + 4 * i, VB);
    if (i == 0) x[1] = 0;  // the checksum field
    x ^= key;
    x ^= x >> 16; x *= 0x85ebca6bu; x ^= x >> 13; x *= 0xc2b2ae35u; x ^= x >> 16;
    acc += x;
  }
  uint32_t h = 0;
  for (int k = 0; k < L; ++k) h += acc[k];
  return h;
}

#if defined(__x86_64__)
// AVX2 + BMI2 kernels (Haswell and later). The hot paths take a fast route that is provably
// equivalent to the exact scalar decisions and fall back to the exact vector code per vector
// when a lane needs it (non-finite value, |x - x_hat| at or above eb_abs): rare on real data.
#define LC_AVX2 __attribute__((target("avx2,bmi,bmi2")))
typedef uint32_t u32x8 __attribute__((vector_size(32)));

LC_AVX2 inline void range_f32_avx2(const float* in, uint64_t n32, float* lo, float* hi) {
  // vminps/vmaxps return the second operand when the first is NaN, so NaN is skipped for free;
  // infinities are not, and a chunk holding one takes the masked scan instead.
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  __m256 mn0 = inf, mn1 = inf, mx0 = _mm256_sub_ps(_mm256_setzero_ps(), inf), mx1 = mx0;
  __m256 mn2 = inf, mn3 = inf, mx2 = mx0, mx3 = mx0;
  for (uint64_t i = 0; i < n32; i += 32) {
    __m256 v0 = _mm256_loadu_ps(in + i), v1 = _mm256_loadu_ps(in + i + 8);
    __m256 v2 = _mm256_loadu_ps(in + i + 16), v3 = _mm256_loadu_ps(in + i + 24);
    mn0 = _mm256_min_ps(v0, mn0); mx0 = _mm256_max_ps(v0, mx0);
    mn1 = _mm256_min_ps(v1, mn1); mx1 = _mm256_max_ps(v1, mx1);
    mn2 = _mm256_min_ps(v2, mn2); mx2 = _mm256_max_ps(v2, mx2);
    mn3 = _mm256_min_ps(v3, mn3); mx3 = _mm256_max_ps(v3, mx3);
  }
  mn0 = _mm256_min_ps(_mm256_min_ps(mn0, mn1), _mm256_min_ps(mn2, mn3));
  mx0 = _mm256_max_ps(_mm256_max_ps(mx0, mx1), _mm256_max_ps(mx2, mx3));
  float a[8], b[8], l = __builtin_inff(), h = -__builtin_inff();
  _mm256_storeu_ps(a, mn0);
  _mm256_storeu_ps(b, mx0);
  for (int k = 0; k < 8; ++k) { l = a[k] < l ? a[k] : l; h = b[k] > h ? b[k] : h; }
  if (l == -__builtin_inff() || h == __builtin_inff()) {
    range_f32<f32x8, i32x8>(in, n32, lo, hi);
    return;
  }
  *lo = l;
  *hi = h;
}

// Fast route per 8 values: q = round(t) by vcvtps2dq (nearest-even under the default MXCSR, as
// values.h's rint_nonneg), x_hat = base + q * step, and the test |fl(x - x_hat)| < eb_abs, which
// implies |x - x_hat| <= eb_abs exactly (rounding is monotone and eb_abs is a float). For
// finite x in [vmin, vmax] no clamp is needed (base <= vmin, so 0 <= t <= rint((vmax - base) *
// inv) = maxcode, rounding is monotone); a vector with any other lane (non-finite x fails the test: its difference is
// NaN or Inf) is redone by the exact code: TwoSum tie test, clamps, non-finite x -> code 0.
struct QuantAvx2 {
  __m256 vmn, vinv, vstep, veb, absm;
  float vmin, inv, step, eb_abs, maxf;
  LC_AVX2 QuantAvx2(float vmin_, float inv_, float step_, float eb_abs_, float maxf_)
      : vmn(_mm256_set1_ps(vmin_)), vinv(_mm256_set1_ps(inv_)), vstep(_mm256_set1_ps(step_)),
        veb(_mm256_set1_ps(eb_abs_)), absm(_mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))),
        vmin(vmin_), inv(inv_), step(step_), eb_abs(eb_abs_), maxf(maxf_) {}
  // Codes of in[i, i + 8); a vector the fast test does not clear is redone exactly, its codes
  // stored to codes[i, i + 8) and its failing positions appended to bad.
  LC_AVX2 LC_INLINE __m256i codes8(const float* in, uint64_t i, uint32_t* codes, uint32_t* bad,
                                   uint64_t& nbad) const {
    __m256 v = _mm256_loadu_ps(in + i);
    __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(v, vmn), vinv));
    __m256 rec = _mm256_add_ps(vmn, _mm256_mul_ps(_mm256_cvtepi32_ps(q), vstep));
    __m256 a = _mm256_and_ps(_mm256_sub_ps(v, rec), absm);
    if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(a, veb, _CMP_LT_OQ)) != 0xff, 0)) {
      nbad = quantize_f32<f32x8, i32x8>(in + i, 8, vmin, inv, step, eb_abs, maxf, codes + i, bad,
                                        nbad, i);
      q = _mm256_loadu_si256((const __m256i*)(codes + i));
    }
    return q;
  }
};

LC_INLINE uint64_t byte_mask(int bits) { return 0x0101010101010101ull * ((1u << bits) - 1u); }

// Four groups of 8 codes, one per byte of w[k], packed to B bits each by pext.
LC_AVX2 LC_INLINE uint8_t* pext_store4(uint8_t* o, const uint64_t* w, uint64_t mask, int bits) {
  for (int k = 0; k < 4; ++k) {
    uint64_t p = _pext_u64(w[k], mask);
    memcpy(o, &p, 8);
    o += bits;
  }
  return o;
}

// Bit-packing of 32 codes < 2^B, B in 1..8, LSB first (8 codes become B bytes): narrowed to
// bytes, then pext gathers the low B bits of 8 bytes at a time. Stores 8 bytes per group (the
// extra ones are overwritten by the next group), so callers leave >= 64 codes to the scalar tail.
LC_AVX2 LC_INLINE uint8_t* pack32_avx2(uint8_t* o, __m256i c0, __m256i c1, __m256i c2, __m256i c3,
                                       uint64_t mask, int bits) {
  __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));  // in order
  uint64_t w[4];
  _mm256_storeu_si256((__m256i*)w, b);
  return pext_store4(o, w, mask, bits);
}

LC_AVX2 inline uint64_t quantize_f32_avx2(const float* in, uint64_t n8, float vmin, float inv,
                                          float step, float eb_abs, float maxf, uint32_t* codes,
                                          uint32_t* bad, uint64_t nbad) {
  const QuantAvx2 qz(vmin, inv, step, eb_abs, maxf);
  for (uint64_t i = 0; i < n8; i += 8)
    _mm256_storeu_si256((__m256i*)(codes + i), qz.codes8(in, i, codes, bad, nbad));
  return nbad;
}

// Quantize-and-verify fused with bit-packing into sec (B <= 8): the codes never go to memory,
// except those of vectors the exact code redid (in codes[], where the caller's retry of failing
// positions reads them).
LC_AVX2 inline uint64_t quantize_pack_f32_avx2(const float* in, uint64_t n32, float vmin, float inv,
                                               float step, float eb_abs, float maxf, int bits,
                                               uint8_t* sec, uint32_t* codes, uint32_t* bad,
                                               uint64_t nbad) {
  const QuantAvx2 qz(vmin, inv, step, eb_abs, maxf);
  const uint64_t mask = byte_mask(bits);
  for (uint64_t i = 0; i < n32; i += 32) {
    __m256i c0 = qz.codes8(in, i, codes, bad, nbad), c1 = qz.codes8(in, i + 8, codes, bad, nbad);
    __m256i c2 = qz.codes8(in, i + 16, codes, bad, nbad), c3 = qz.codes8(in, i + 24, codes, bad, nbad);
    sec = pack32_avx2(sec, c0, c1, c2, c3, mask, bits);
  }
  return nbad;
}

LC_AVX2 inline void pack_codes_avx2(uint8_t* o, const uint32_t* c, uint64_t n32, int bits) {
  const uint64_t mask = byte_mask(bits);
  for (uint64_t i = 0; i < n32; i += 32) {
    const __m256i* v = (const __m256i*)(c + i);
    o = pack32_avx2(o, _mm256_loadu_si256(v), _mm256_loadu_si256(v + 1), _mm256_loadu_si256(v + 2),
                    _mm256_loadu_si256(v + 3), mask, bits);
  }
}

// The inverse for float32 output: pdep spreads B bytes into 8 codes, x_hat = base + q * step
// (the decoder's value table, computed). Loads 8 bytes per group: the caller leaves >= 64 codes.
LC_AVX2 inline void unpack_dequant_avx2(const uint8_t* p, uint64_t n8, int bits, float base,
                                        float step, float* out) {
  const uint64_t mask = byte_mask(bits);
  const __m256 vb = _mm256_set1_ps(base), vs = _mm256_set1_ps(step);
  for (uint64_t i = 0; i < n8; i += 8, p += bits) {
    uint64_t w;
    memcpy(&w, p, 8);
    __m256i q = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)_pdep_u64(w, mask)));
    _mm256_storeu_ps(out + i, _mm256_add_ps(vb, _mm256_mul_ps(_mm256_cvtepi32_ps(q), vs)));
  }
}

// The same without pdep, for CPUs that run it in microcode (has_fast_pdep): 32-bit lane k
// gets the two bytes that hold code k by a byte shuffle of the 8 loaded bytes, then a shift by
// its bit offset and a mask. Same codes, same arithmetic, so the same values.
LC_AVX2 inline void unpack_dequant_shuffle_avx2(const uint8_t* p, uint64_t n8, int bits,
                                                float base, float step, float* out) {
  alignas(32) uint8_t ctl[32];
  alignas(32) uint32_t sh[8];
  for (int k = 0; k < 8; ++k) {  // pshufb indexes within each 128-bit half; both hold the bytes
    const int o = k * bits, b0 = o >> 3;
    ctl[4 * k] = (uint8_t)b0;
    ctl[4 * k + 1] = b0 + 1 < 8 ? (uint8_t)(b0 + 1) : 0x80;  // 0x80: a zero byte
    ctl[4 * k + 2] = ctl[4 * k + 3] = 0x80;
    sh[k] = (uint32_t)(o & 7);
  }
  const __m256i vctl = _mm256_load_si256((const __m256i*)ctl);
  const __m256i vsh = _mm256_load_si256((const __m256i*)sh);
  const __m256i vmask = _mm256_set1_epi32((1 << bits) - 1);
  const __m256 vb = _mm256_set1_ps(base), vs = _mm256_set1_ps(step);
  for (uint64_t i = 0; i < n8; i += 8, p += bits) {
    uint64_t w;
    memcpy(&w, p, 8);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)w), vctl);
    __m256i q = _mm256_and_si256(_mm256_srlv_epi32(v, vsh), vmask);
    _mm256_storeu_ps(out + i, _mm256_add_ps(vb, _mm256_mul_ps(_mm256_cvtepi32_ps(q), vs)));
  }
}

LC_AVX2 inline uint32_t checksum_words_avx2(const uint8_t* f, uint64_t nw) {
  return checksum_words<u32x8>(f, nw);
}

// AVX-512 (F, BW, VL, DQ) versions of the same kernels, 16 lanes. GCC 12's AVX-512 headers
// trip -Wuninitialized on their own _mm512_undefined_* placeholders (GCC bug 105593).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define LC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,bmi,bmi2")))
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

LC_AVX512 inline void range_f32_avx512(const float* in, uint64_t n64, float* lo, float* hi) {
  const __m512 inf = _mm512_set1_ps(__builtin_inff()), ninf = _mm512_set1_ps(-__builtin_inff());
  __m512 mn0 = inf, mn1 = inf, mn2 = inf, mn3 = inf, mx0 = ninf, mx1 = ninf, mx2 = ninf, mx3 = ninf;
  for (uint64_t i = 0; i < n64; i += 64) {
    __m512 v0 = _mm512_loadu_ps(in + i), v1 = _mm512_loadu_ps(in + i + 16);
    __m512 v2 = _mm512_loadu_ps(in + i + 32), v3 = _mm512_loadu_ps(in + i + 48);
    mn0 = _mm512_min_ps(v0, mn0); mx0 = _mm512_max_ps(v0, mx0);
    mn1 = _mm512_min_ps(v1, mn1); mx1 = _mm512_max_ps(v1, mx1);
    mn2 = _mm512_min_ps(v2, mn2); mx2 = _mm512_max_ps(v2, mx2);
    mn3 = _mm512_min_ps(v3, mn3); mx3 = _mm512_max_ps(v3, mx3);
  }
  float a[16], b[16], l = __builtin_inff(), h = -__builtin_inff();
  _mm512_storeu_ps(a, _mm512_min_ps(_mm512_min_ps(mn0, mn1), _mm512_min_ps(mn2, mn3)));
  _mm512_storeu_ps(b, _mm512_max_ps(_mm512_max_ps(mx0, mx1), _mm512_max_ps(mx2, mx3)));
  for (int k = 0; k < 16; ++k) { l = a[k] < l ? a[k] : l; h = b[k] > h ? b[k] : h; }
  if (l == -__builtin_inff() || h == __builtin_inff()) {  // an infinity: the masked scan
    range_f32<f32x16, i32x16>(in, n64, lo, hi);
    return;
  }
  *lo = l;
  *hi = h;
}

// The exact code for 16 values, out of line under the AVX2 target: inlined into an AVX-512
// function (avx512f implies FMA in GCC) its multiply-adds could be fused where a build lacks
// -ffp-contract=off, and the frames would then differ between levels.
LC_AVX2 __attribute__((noinline)) inline uint64_t quantize_exact16(
    const float* in, float vmin, float inv, float step, float eb_abs, float maxf, uint32_t* codes,
    uint32_t* bad, uint64_t nbad, uint64_t pos0) {
  return quantize_f32<f32x8, i32x8>(in, 16, vmin, inv, step, eb_abs, maxf, codes, bad, nbad, pos0);
}

struct QuantAvx512 {
  __m512 vmn, vinv, vstep, veb;
  float vmin, inv, step, eb_abs, maxf;
  LC_AVX512 QuantAvx512(float vmin_, float inv_, float step_, float eb_abs_, float maxf_)
      : vmn(_mm512_set1_ps(vmin_)), vinv(_mm512_set1_ps(inv_)), vstep(_mm512_set1_ps(step_)),
        veb(_mm512_set1_ps(eb_abs_)), vmin(vmin_), inv(inv_), step(step_), eb_abs(eb_abs_),
        maxf(maxf_) {}
  // QuantAvx2::codes8 for 16 values, with the rounding explicit (nearest-even).
  LC_AVX512 LC_INLINE __m512i codes16(const float* in, uint64_t i, uint32_t* codes, uint32_t* bad,
                                      uint64_t& nbad) const {
    constexpr int rn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m512 v = _mm512_loadu_ps(in + i);
    __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_round_ps(_mm512_sub_round_ps(v, vmn, rn), vinv, rn), rn);
    __m512 rec = _mm512_add_round_ps(vmn, _mm512_mul_round_ps(_mm512_cvtepi32_ps(q), vstep, rn), rn);
    __m512 a = _mm512_abs_ps(_mm512_sub_round_ps(v, rec, rn));
    if (__builtin_expect(_mm512_cmp_ps_mask(a, veb, _CMP_LT_OQ) != 0xffff, 0)) {
      nbad = quantize_exact16(in + i, vmin, inv, step, eb_abs, maxf, codes + i, bad, nbad, i);
      q = _mm512_loadu_si512(codes + i);
    }
    return q;
  }
};

// pack32_avx2 for two vectors of 16 codes.
LC_AVX512 LC_INLINE uint8_t* pack32_avx512(uint8_t* o, __m512i c0, __m512i c1, uint64_t mask,
                                           int bits) {
  __m128i b0 = _mm512_cvtepi32_epi8(c0), b1 = _mm512_cvtepi32_epi8(c1);
  const uint64_t w[4] = {(uint64_t)_mm_cvtsi128_si64(b0), (uint64_t)_mm_extract_epi64(b0, 1),
                         (uint64_t)_mm_cvtsi128_si64(b1), (uint64_t)_mm_extract_epi64(b1, 1)};
  return pext_store4(o, w, mask, bits);
}

LC_AVX512 inline uint64_t quantize_f32_avx512(const float* in, uint64_t n16, float vmin, float inv,
                                              float step, float eb_abs, float maxf,
                                              uint32_t* codes, uint32_t* bad, uint64_t nbad) {
  const QuantAvx512 qz(vmin, inv, step, eb_abs, maxf);
  for (uint64_t i = 0; i < n16; i += 16) _mm512_storeu_si512(codes + i, qz.codes16(in, i, codes, bad, nbad));
  return nbad;
}

LC_AVX512 inline uint64_t quantize_pack_f32_avx512(const float* in, uint64_t n32, float vmin,
                                                   float inv, float step, float eb_abs, float maxf,
                                                   int bits, uint8_t* sec, uint32_t* codes,
                                                   uint32_t* bad, uint64_t nbad) {
  const QuantAvx512 qz(vmin, inv, step, eb_abs, maxf);
  const uint64_t mask = byte_mask(bits);
  for (uint64_t i = 0; i < n32; i += 32) {
    __m512i c0 = qz.codes16(in, i, codes, bad, nbad), c1 = qz.codes16(in, i + 16, codes, bad, nbad);
    sec = pack32_avx512(sec, c0, c1, mask, bits);
  }
  return nbad;
}

LC_AVX512 inline void pack_codes_avx512(uint8_t* o, const uint32_t* c, uint64_t n32, int bits) {
  const uint64_t mask = byte_mask(bits);
  for (uint64_t i = 0; i < n32; i += 32)
    o = pack32_avx512(o, _mm512_loadu_si512(c + i), _mm512_loadu_si512(c + i + 16), mask, bits);
}

LC_AVX512 inline void unpack_dequant_avx512(const uint8_t* p, uint64_t n16, int bits, float base,
                                            float step, float* out) {
  const uint64_t mask = byte_mask(bits);
  const __m512 vb = _mm512_set1_ps(base), vs = _mm512_set1_ps(step);
  for (uint64_t i = 0; i < n16; i += 16, p += 2 * bits) {
    uint64_t w0, w1;
    memcpy(&w0, p, 8);
    memcpy(&w1, p + bits, 8);
    __m128i b = _mm_set_epi64x((long long)_pdep_u64(w1, mask), (long long)_pdep_u64(w0, mask));
    constexpr int rn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // not fusable to FMA
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    _mm512_storeu_ps(out + i, _mm512_add_round_ps(vb, _mm512_mul_round_ps(q, vs, rn), rn));
  }
}

LC_AVX512 inline uint32_t checksum_words_avx512(const uint8_t* f, uint64_t nw) {
  return checksum_words<u32x16>(f, nw);
}

#undef LC_AVX512
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Widest kernel set this CPU runs, capped by the environment variable JLC_SIMD ("sse2",
// "avx2", "avx512"), which lets tests and benchmarks compare the paths on one machine.
enum Level { kSse2 = 0, kAvx2 = 1, kAvx512 = 2 };
inline int detect_level() {
  int l = kSse2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2")) l = kAvx2;
  if (l == kAvx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    l = kAvx512;
  const char* cap = getenv("JLC_SIMD");
  if (cap && !strcasecmp(cap, "sse2")) l = kSse2;
  if (cap && !strcasecmp(cap, "avx2") && l > kAvx2) l = kAvx2;
  return l;
}
inline int level() {
  static const int v = detect_level();
  return v;
}
inline bool has_avx2() { return level() >= kAvx2; }
inline bool has_avx512() { return level() >= kAvx512; }

// Whether pdep/pext are fast here. AMD family 17h (Zen, Zen+, Zen 2: EPYC Naples and Rome, the
// hosts of DGX A100) and Hygon 18h run them in microcode, tens to hundreds of cycles each:
// there the pext packing and pdep unpacking made the fixed-rate form 2.6x (compress) and 5x
// (decompress) slower than the portable shift-and-mask code on a Zen 2 EPYC, so the bit
// packing takes that code and the unpacking a byte shuffle (the rest of the AVX2 kernels stay).
// JLC_PDEP=0/1 overrides the detection, which lets tests run both routes on one machine.
inline bool detect_fast_pdep() {
  const char* force = getenv("JLC_PDEP");
  if (force && (!strcmp(force, "0") || !strcmp(force, "1"))) return force[0] == '1';
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return true;
  const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;     // AuthenticAMD
  const bool hygon = b == 0x6f677948u && d == 0x6e65476eu && c == 0x656e6975u;   // HygonGenuine
  if (!(amd || hygon) || !__get_cpuid(1, &a, &b, &c, &d)) return true;
  unsigned family = (a >> 8) & 0xfu;
  if (family == 0xfu) family += (a >> 20) & 0xffu;
  return family != 0x17u && family != 0x18u;
}
inline bool has_fast_pdep() {
  static const bool v = has_avx2() && detect_fast_pdep();
  return v;
}
#undef LC_AVX2
#endif

// Dispatchers: process the largest prefix the chosen width covers; return its length.
inline uint64_t range_f32_prefix(const float* in, uint64_t n, float* lo, float* hi) {
#if defined(__x86_64__)
  if (has_avx512()) { uint64_t m = n & ~(uint64_t)63; range_f32_avx512(in, m, lo, hi); return m; }
  if (has_avx2()) { uint64_t m = n & ~(uint64_t)31; range_f32_avx2(in, m, lo, hi); return m; }
#endif
  uint64_t m = n & ~(uint64_t)7;
  range_f32<f32x4, i32x4>(in, m, lo, hi);
  return m;
}
inline uint64_t quantize_f32_prefix(const float* in, uint64_t n, float vmin, float inv, float step,
                                    float eb_abs, float maxf, uint32_t* codes, uint32_t* bad,
                                    uint64_t* nbad) {
#if defined(__x86_64__)
  if (has_avx512()) {
    uint64_t m = n & ~(uint64_t)15;
    *nbad = quantize_f32_avx512(in, m, vmin, inv, step, eb_abs, maxf, codes, bad, 0);
    return m;
  }
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
// Quantize-and-verify fused with bit-packing into sec, for 1 <= bits <= 8: the vector path's
// prefix (a multiple of 32 leaving >= 64 values; 0 where there is none). Of the prefix's codes
// only those of vectors holding a failing position are in codes[].
inline uint64_t quantize_pack_f32_prefix(const float* in, uint64_t n, float vmin, float inv,
                                         float step, float eb_abs, float maxf, int bits,
                                         uint8_t* sec, uint32_t* codes, uint32_t* bad,
                                         uint64_t* nbad) {
  *nbad = 0;
#if defined(__x86_64__)
  if (bits >= 1 && bits <= 8 && n >= 96 && has_fast_pdep()) {
    uint64_t m = (n - 64) & ~(uint64_t)31;
    *nbad = has_avx512()
                ? quantize_pack_f32_avx512(in, m, vmin, inv, step, eb_abs, maxf, bits, sec, codes, bad, 0)
                : quantize_pack_f32_avx2(in, m, vmin, inv, step, eb_abs, maxf, bits, sec, codes, bad, 0);
    return m;
  }
#endif
  (void)in; (void)n; (void)vmin; (void)inv; (void)step; (void)eb_abs; (void)maxf; (void)bits;
  (void)sec; (void)codes; (void)bad;
  return 0;
}
// Codes packed by the vector path (a multiple of 32; 0 where there is none for this width).
inline uint64_t pack_codes_prefix(uint8_t* o, const uint32_t* c, uint64_t count, int bits) {
#if defined(__x86_64__)
  if (bits >= 1 && bits <= 8 && count >= 96 && has_fast_pdep()) {
    uint64_t m = (count - 64) & ~(uint64_t)31;
    if (has_avx512()) pack_codes_avx512(o, c, m, bits);
    else pack_codes_avx2(o, c, m, bits);
    return m;
  }
#endif
  (void)o; (void)c; (void)count; (void)bits;
  return 0;
}
// Codes unpacked to float32 values base + q * step by the vector path (a multiple of 8).
inline uint64_t unpack_dequant_prefix(const uint8_t* p, uint64_t count, int bits, float base,
                                      float step, float* out) {
#if defined(__x86_64__)
  if (bits >= 1 && bits <= 8 && count >= 80 && has_avx512() && has_fast_pdep()) {
    uint64_t m = (count - 64) & ~(uint64_t)15;
    unpack_dequant_avx512(p, m, bits, base, step, out);
    return m;
  }
  if (bits >= 1 && bits <= 8 && count >= 72 && has_avx2()) {
    uint64_t m = (count - 64) & ~(uint64_t)7;
    if (has_fast_pdep()) unpack_dequant_avx2(p, m, bits, base, step, out);
    else unpack_dequant_shuffle_avx2(p, m, bits, base, step, out);
    return m;
  }
#endif
  (void)p; (void)count; (void)bits; (void)base; (void)step; (void)out;
  return 0;
}
// Checksum sum over words [0, m) for the returned m <= nw.
inline uint64_t checksum_prefix(const uint8_t* f, uint64_t nw, uint32_t* sum) {
#if defined(__x86_64__)
  if (has_avx512()) { uint64_t m = nw & ~(uint64_t)15; *sum = checksum_words_avx512(f, m); return m; }
  if (has_avx2()) { uint64_t m = nw & ~(uint64_t)7; *sum = checksum_words_avx2(f, m); return m; }
#endif
  typedef uint32_t u32x4 __attribute__((vector_size(16)));
  uint64_t m = nw & ~(uint64_t)3;
  *sum = checksum_words<u32x4>(f, m);
  return m;
}

#undef LC_INLINE
}  // namespace simd
}  // namespace lc
