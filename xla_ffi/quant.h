// The quantizer of the frame format, shared by the CPU encoder (encoder.h, with its vector
// paths in simd_cpu.h doing the same operations lane by lane) and the CUDA encode kernels:
// the plan (range, bound, step, code width) and the code of one value with its neighbour retry.
// Codes q = clamp(rint((x - vmin) / step), 0, maxcode) with step = 2 h; a finite value whose
// reconstruction vmin + q * step, rounded to the dtype, is not within eb_abs tries the
// neighbouring code (a value at a rounding midpoint) and is otherwise an outlier.
// The bound eb_abs holds as the user states it: in REL mode eb * (max - min) rounded toward
// zero (rel_bound), in ABS mode eb. The half step h is eb_abs for float32; for bfloat16 and
// float16 it leaves room for the decoder's rounding of x_hat to the half type (half_step).
#pragma once

#include "format.h"
#include "values.h"

namespace lc {

struct QuantPlan {
  float vmin, eb_abs, half, step, inv, maxf;  // eb_abs: the bound; half: step / 2 (stored)
  uint32_t maxcode;
  int bits;  // code width; 0 when !ok
  bool ok;   // false: the frame is raw (lossless)
};

// eb * (vmax - vmin), never above the exact product, in float32 arithmetic only (the jax.numpy
// reference repeats it): the range rounded toward zero (TwoSum gives vmax - vmin = r + er
// exactly), then the product rounded toward zero (Dekker's split gives eb * r = p + ep exactly).
// At most two float32 steps below the exact product (three outside Dekker's range).
LC_HD float prev_toward_zero(float v, bool step) {  // for v >= 0
  return step && v > 0.0f && is_finite_bits(f2u(v)) ? u2f(f2u(v) - 1u) : v;
}
LC_HD float rel_bound(float eb, float vmin, float vmax) {
  float r = vmax - vmin;
  const float bb = r - vmax;
  r = prev_toward_zero(r, (vmax - (r - bb)) + ((-vmin) - bb) < 0.0f);
  const float p = eb * r;
  const float c = 4097.0f;  // 2^12 + 1 splits a float32 into two 12-bit halves
  float t = c * eb;
  const float ah = t - (t - eb), al = eb - ah;
  t = c * r;
  const float bh = t - (t - r), bl = r - bh;
  const float ep = ((ah * bh - p) + ah * bl + al * bh) + al * bl;  // exact: eb * r - p
  // Dekker's split is exact without overflow or underflow in its partial products; outside
  // that range (or with a non-finite term) the product steps down anyway.
  const bool in_range = p >= 0x1p-60f && r <= 0x1p100f && eb <= 0x1p100f;
  return prev_toward_zero(p, !(ep >= 0.0f) || !in_range);
}

// The half step h <= eb_abs of a chunk of `dtype` values in [vmin, vmax]: x_hat = vmin + q * 2h
// is rounded to the dtype by the decoder. In a binade with ulp u and at its border with the next
// (ulp 2u), x and every rounded x_hat lie on the grid of u and a rounded x_hat moves by at most
// u/2 below the border and u above it, so consecutive rounded x_hat are at most 2h + 1.5u apart
// and every x is within eb_abs of one when h < (floor(eb_abs / u) + 1/4) u, or + 1/2 in the
// top binade, where no coarser one follows (2h + u apart; u > 2 eb_abs: no
// limit; u < eb_abs / 512: the 2^-10 margin covers it, together with the float32 rounding of
// vmin + q * step). The smallest such h over the
// binades the reconstructions reach, never below kHalfStepFloor * eb_abs (the code width the
// fixed-rate capacity allows; values it cannot honour become outliers). eb_abs for float32.
LC_HD float half_step(float eb_abs, float vmin, float vmax, int dtype) {
  if (dtype == kF32 || !(eb_abs > 0.0f) || !is_finite_bits(f2u(eb_abs))) return eb_abs;
  const int mbits = dtype == kBF16 ? 7 : 10, emin = dtype == kBF16 ? -126 : -14;
  const float amin = vmin < 0.0f ? -vmin : vmin, amax = vmax < 0.0f ? -vmax : vmax;
  const float top = (amin > amax ? amin : amax) + eb_abs;  // largest |x_hat|
  const float bot = vmin <= 0.0f && vmax >= 0.0f ? 0.0f : (amin < amax ? amin : amax) - eb_abs;
  const int kbot = bot > 0.0f && exponent_of(bot) > emin ? exponent_of(bot) : emin;
  const int kstart = exponent_of(2.0f * eb_abs) + mbits;  // binades with ulp <= 2 eb_abs
  const int ktop = exponent_of(top);
  int k = ktop < kstart ? ktop : kstart;
  float best = eb_abs;
  for (; k >= kbot && k - mbits >= -126; --k) {
    const float u = pow2f(k - mbits);
    if (u < eb_abs * (1.0f / 512.0f)) break;
    const float span = (floor_nonneg(eb_abs / u) + (k == ktop ? 0.5f : 0.25f)) * u;
    best = span < best ? span : best;
  }
  const float h = best * (1.0f - 1.0f / 1024.0f), lo = eb_abs * kHalfStepFloor;
  return h > lo ? h : lo;
}

// The plan for a chunk of n values with finite range [vmin, vmax] (vmin > vmax: no finite
// value) and bound eb (relative in kRel, absolute in kAbs). Not ok for the raw codec, an empty
// chunk, a negative, NaN or infinite bound, or a range the codes cannot span in kMaxBits bits.
// dtype: the chunk's values (kF32, kBF16, kF16).
LC_HD QuantPlan plan_quant(float vmin, float vmax, float eb, int mode, int codec, uint64_t n,
                           int dtype) {
  if (n == 0 || !(vmin <= vmax)) { vmin = 0.0f; vmax = 0.0f; }  // no finite value
  vmin += 0.0f;  // +0.0 for a zero bound whatever the sign order of the scan
  vmax += 0.0f;
  QuantPlan p;
  const float range = vmax - vmin;
  p.vmin = vmin;
  p.eb_abs = mode == kRel ? rel_bound(eb, vmin, vmax) : eb;
  p.half = half_step(p.eb_abs, vmin, vmax, dtype);
  p.step = p.half * 2.0f;
  const bool constant = range == 0.0f;
  bool ok = codec != kCodecRaw && n > 0 && eb >= 0.0f && is_finite_bits(f2u(eb)) &&
            is_finite_bits(f2u(p.eb_abs));
  p.inv = 0.0f;
  uint32_t maxcode = 0;
  if (ok && !constant) {
    ok = is_finite_bits(f2u(p.step)) && p.step > 0.0f;
    if (ok) {
      p.inv = 1.0f / p.step;
      float mc = rint_nonneg(range * p.inv);
      ok = is_finite_bits(f2u(p.inv)) && mc < (float)(1u << kMaxBits);
      if (ok) maxcode = (uint32_t)mc;
    }
  }
  p.ok = ok;
  p.maxcode = maxcode;
  p.maxf = (float)maxcode;
  p.bits = ok ? bits_for(maxcode) : 0;
  return p;
}

// The code of v as a float (0 for NaN and +-Inf), branch-free.
LC_HD float quant_code(float v, const QuantPlan& p) {
  const bool fin = v - v == 0.0f;
  float qf = rint_nonneg((v - p.vmin) * p.inv);
  qf = qf >= 0.0f ? qf : 0.0f;  // NaN and -Inf give 0
  qf = qf <= p.maxf ? qf : p.maxf;
  return fin ? qf : 0.0f;
}

// Whether code qf reconstructs v within the bound (false for non-finite v), branch-free.
template <int D>
LC_HD bool code_honours(float v, float qf, const QuantPlan& p) {
  const bool fin = v - v == 0.0f;
  return fin & within_bound(v, Val<D>::round(p.vmin + qf * p.step), p.eb_abs);
}

// For a finite v whose code qf failed: the neighbouring code towards v into *q2 when it
// honours the bound (true), else false (v is an outlier).
template <int D>
LC_HD bool retry_code(float v, float qf, const QuantPlan& p, float* q2) {
  if (!(v - v == 0.0f)) return false;
  const float rec = Val<D>::round(p.vmin + qf * p.step);
  const float q = qf + (v > rec ? 1.0f : -1.0f);
  *q2 = q;
  return q >= 0.0f && q <= p.maxf && within_bound(v, Val<D>::round(p.vmin + q * p.step), p.eb_abs);
}

// Header of a quantized frame made with plan p (no dictionary, bit-packed codes: the caller
// sets dedup, n_unique and the Huffman flags of a dictionary form).
LC_HD FrameHeader quant_header(int dtype, int mode, const QuantPlan& p, uint64_t rows,
                               uint64_t dim, uint64_t n_outliers) {
  FrameHeader h = {kFormQuant, dtype, mode,     p.bits,   false,    false,   false,
                   rows,       dim,   n_outliers, rows,   p.half,   p.vmin};
  return h;
}

}  // namespace lc
