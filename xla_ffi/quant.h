// The quantizer of the frame format, shared by the CPU encoder (encoder.h, with its vector
// paths in simd_cpu.h doing the same operations lane by lane) and the CUDA encode kernels:
// the plan (range, bound, step, code width) and the code of one value with its neighbour retry.
// Codes q = clamp(rint((x - base) / step), 0, maxcode) with step = 2 h and base the chunk's
// minimum vmin or, where the range contains zero, the multiple of the step just below it
// (zero_on_grid); a finite value whose reconstruction base + q * step, rounded to the dtype, is
// not within eb_abs tries the neighbouring code (a value at a rounding midpoint) and is otherwise
// an outlier.
// The bound eb_abs holds as the user states it: in REL mode eb * (max - min) rounded toward
// zero (rel_bound), in ABS mode eb. The half step h is eb_abs for float32; for bfloat16 and
// float16 it leaves room for the decoder's rounding of x_hat to the half type (half_step).
#pragma once

#include "format.h"
#include "values.h"

namespace lc {

struct QuantPlan {
  float base, eb_abs, half, step, inv, maxf;  // eb_abs: the bound; half: step / 2 (stored);
  // base: the reconstruction of code 0 (stored): vmin, or zero_on_grid's multiple of the step
  float pre;  // 1, or 2^64 for a step below float32's normal range (set_inverse)
  uint32_t maxcode;
  int bits;  // code width; 0 when !ok
  bool ok;   // false: the frame is raw (lossless)
};

// eb * (vmax - vmin), never above the exact product, in float32 arithmetic only (the jax.numpy
// reference repeats it): the range rounded toward zero (TwoSum gives vmax - vmin = r + er
// exactly), then the product rounded toward zero (Dekker's split gives eb * r = p + ep exactly).
// Less than three float32 steps below the exact product (four outside Dekker's range): the
// range's rounding costs up to eb * ulp(r), under two steps of the product, its own one more.
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
// is rounded to the dtype by the decoder. With v = 2^-24 (float32 rounding), T = max(|vmin|,
// |vmax|), R = vmax - vmin <= 2T, s = 2h, and U the spacing of the dtype's values in the binade of
// T + eb_abs (the largest spacing near any x_hat; rounding moves an x_hat by at most U/2):
//   h = (eb_abs - U/2) (1 - 2^-8) when U <= 3/4 eb_abs, else kHalfStepFloor * eb_abs,
// and never below kHalfStepFloor * eb_abs (63/128; it bounds the code width of the fixed-rate
// capacity, rel_bits_for). Either way no value is an outlier (REL bounds >= 2^-11; float32
// arithmetic outside the subnormal range):
// (1) h = (eb_abs - U/2)(1 - 2^-8). The rounded x_hat y_q are nondecreasing in q, y_0 = vmin, and
// y_q is within U/2 + d of the exact vmin + q s, d <= v (3T + 2s) its float32 error (d <= 2^-11
// eb_abs: U >= 2^-11 T and U <= eb_abs). So y_(q+1) - y_q <= s + U + 2d <= 2 eb_abs, and a
// value between two of them is within eb_abs of one; a value above the top y (vmin + maxcode s
// is within s/2 + 3vR of vmax) is within h + U/2 + 3vR + d <= eb_abs of it. The encoder's code
// rint((x - vmin) / s) is the lower or upper of the two y around x (s >= 5/3 U leaves room for
// the rounding), and if it misses, the neighbour retry takes the other.
// (2) h = kHalfStepFloor * eb_abs, s <= (1 - 2^-6) eb_abs. The code q = rint((x - vmin) * inv),
// clamped to [0, maxcode], is within 1/2 + 3vR/s of (x - vmin) / s, so vmin + q s evaluated in
// float32 is some d with |d - x| <= D = s/2 + v (4R + T + 2s). (a) If eb_abs >= 2^-13 T, then
// D <= eb_abs / 2 (as 9vT + 2v eb_abs <= 2^-7 eb_abs), and as x is a dtype value, d's rounding
// RN(d) to the dtype is no farther from d than x: |RN(d) - x| <= 2D <= eb_abs. (b) Else, in REL
// mode with eb >= 2^-11, R < T/2: every value has |x| >= T/2, so the dtype's values next to x
// are at least 2^-12 T away (11 significant bits at most) while D < 2^-14 T + 4vT < 2^-13 T:
// RN(d) = x. So the first code honours the bound (within_bound decides exactly).
// With zero_on_grid's base b (vmin - s < b <= vmin, up to b's rounding, and maxcode at most one
// more, of the same width, y_0 and the top y finite) the same holds: (1) y_0 = b <= vmin leaves
// no value below the lowest y, the x_hat that values take are within h of them as before (so U is
// unchanged), and T, R grow by at most s, which moves d by under 2^-20 eb_abs; (2)(a) the same
// with D's T, R grown by s; (2)(b) does not arise, as a range that contains zero has R >= T.
// A grid aligned to the top binade's spacing (step the largest multiple of U <= 2 eb_abs, no
// rounding at all) has the same worst case, a step of one U when eb_abs is just below U, and
// needs another stored base; no floor can give a narrower capacity (format.h kHalfStepFloor).
// Where the top x_hat would round to Inf (float16 near 65504), plan_quant shrinks the step to
// range / maxcode (it rounded up): (2) holds for any smaller step; in (1) the gaps only shrink,
// the top x_hat is vmax, and the step stays >= 3/4 of h's (or the codes are just 0 and 1).
// eb_abs for float32.
LC_HD float half_step(float eb_abs, float vmin, float vmax, int dtype) {
  if (dtype == kF32 || !(eb_abs > 0.0f) || !is_finite_bits(f2u(eb_abs))) return eb_abs;
  const int mbits = dtype == kBF16 ? 7 : 10, emin = dtype == kBF16 ? -126 : -14;
  const float amin = vmin < 0.0f ? -vmin : vmin, amax = vmax < 0.0f ? -vmax : vmax;
  const int k = exponent_of((amin > amax ? amin : amax) + eb_abs);  // the top binade
  const int e = (k > emin ? k : emin) - mbits;
  const float u = pow2f(e > -126 ? e : -126);  // U, or above it (bfloat16 subnormals)
  const float h = (eb_abs - 0.5f * u) * (1.0f - 1.0f / 256.0f), lo = eb_abs * kHalfStepFloor;
  return u <= 0.75f * eb_abs && h > lo ? h : lo;
}

// inv = 1 / (step * pre). A step below float32's normal range (a chunk of subnormal values:
// a table that is barely used) would make 1 / step overflow and the chunk go raw, overflowing
// a fixed-rate capacity. Then the codes come from (x - vmin) * 2^64 and step * 2^64 instead
// (quant_code): powers of two, so both scalings are exact and the codes are the same as the
// unscaled ones would be; the stored step and the decoder do not change.
LC_HD void set_inverse(QuantPlan& p) {
  p.pre = p.step < 0x1p-126f ? 0x1p64f : 1.0f;
  p.inv = 1.0f / (p.step * p.pre);
}

// Zero on the grid. A chunk whose range contains zero (vmin < 0 <= vmax) is coded from the
// base -k * step at or just below vmin instead of from vmin, so that zero is a reconstruction
// (the decoder's base + k * step is -fl(k s) + fl(k s) = 0: no FMA) and the values that crowd
// around zero, the bulk of a gradient or a pooled embedding, get errors of mean about zero.
// From vmin, every one of them would share the same offset, up to h: a per-chunk bias that does
// not average out over a training run. The codes span at most one step more; where that would
// widen the code (maxcode 2^b - 1 from vmin: the frame and the fixed-rate capacity keep their
// size), the base would not be below vmin or the bottom or top x_hat of a half type would round
// to Inf (a minimum near -65504 in float16), the base stays vmin. Returns the largest code
// from the chosen base.
LC_HD float zero_on_grid(QuantPlan& p, float vmin, float vmax, float mc, int dtype) {
  if (!(vmin < 0.0f && vmax >= 0.0f)) return mc;
  float k = rint_nonneg(-vmin * p.pre * p.inv);
  float b = -(k * p.step);
  if (b > vmin) {
    k += 1.0f;
    b = -(k * p.step);
  }
  const float mc2 = rint_nonneg((vmax - b) * p.pre * p.inv);
  if (!(b <= vmin && mc2 <= mc + 1.0f && bits_for((uint32_t)mc2) == bits_for((uint32_t)mc)) ||
      !is_finite_bits(f2u(round_to_dtype(b, dtype))) ||
      !is_finite_bits(f2u(round_to_dtype(b + mc2 * p.step, dtype))))
    return mc;
  p.base = b;
  return mc2;
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
  p.base = vmin;
  p.eb_abs = mode == kRel ? rel_bound(eb, vmin, vmax) : eb;
  p.half = half_step(p.eb_abs, vmin, vmax, dtype);
  p.step = p.half * 2.0f;
  const bool constant = range == 0.0f;
  bool ok = codec != kCodecRaw && n > 0 && eb >= 0.0f && is_finite_bits(f2u(eb)) &&
            is_finite_bits(f2u(p.eb_abs));
  p.inv = 0.0f;
  p.pre = 1.0f;
  uint32_t maxcode = 0;
  if (ok && !constant) {
    ok = is_finite_bits(f2u(p.step)) && p.step > 0.0f;
    if (ok) {
      set_inverse(p);
      float mc = rint_nonneg(range * p.pre * p.inv);
      ok = is_finite_bits(f2u(p.inv)) && mc < (float)(1u << kMaxBits);
      // Half types: the top code's x_hat (up to vmax + h) may round past the dtype's largest
      // value to Inf (float16 near 65504). Then the step shrinks to range / maxcode, which puts
      // the top x_hat at vmax; half_step's proof holds for the smaller step, the code width stays.
      if (ok && dtype != kF32 && mc > 0.0f &&
          !is_finite_bits(f2u(round_to_dtype(vmin + mc * p.step, dtype)))) {
        p.half = range / mc * 0.5f;
        p.step = p.half * 2.0f;
        set_inverse(p);
      } else if (ok) {
        mc = zero_on_grid(p, vmin, vmax, mc, dtype);
      }
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
  float qf = rint_nonneg((v - p.base) * p.pre * p.inv);
  qf = qf >= 0.0f ? qf : 0.0f;  // NaN and -Inf give 0
  qf = qf <= p.maxf ? qf : p.maxf;
  return fin ? qf : 0.0f;
}

// Whether code qf reconstructs v within the bound (false for non-finite v), branch-free.
template <int D>
LC_HD bool code_honours(float v, float qf, const QuantPlan& p) {
  const bool fin = v - v == 0.0f;
  return fin & within_bound(v, Val<D>::round(p.base + qf * p.step), p.eb_abs);
}

// For a finite v whose code qf failed: the neighbouring code towards v into *q2 when it
// honours the bound (true), else false (v is an outlier).
template <int D>
LC_HD bool retry_code(float v, float qf, const QuantPlan& p, float* q2) {
  if (!(v - v == 0.0f)) return false;
  const float rec = Val<D>::round(p.base + qf * p.step);
  const float q = qf + (v > rec ? 1.0f : -1.0f);
  *q2 = q;
  return q >= 0.0f && q <= p.maxf && within_bound(v, Val<D>::round(p.base + q * p.step), p.eb_abs);
}

// Header of a quantized frame made with plan p (no dictionary, bit-packed codes: the caller
// sets dedup, n_unique and the Huffman flags of a dictionary form).
LC_HD FrameHeader quant_header(int dtype, int mode, const QuantPlan& p, uint64_t rows,
                               uint64_t dim, uint64_t n_outliers) {
  FrameHeader h = {kFormQuant, dtype, mode,     p.bits,   false,    false,   false,
                   rows,       dim,   n_outliers, rows,   p.half,   p.base};
  return h;
}

}  // namespace lc
