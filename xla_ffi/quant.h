// The quantizer of the frame format, shared by the CPU encoder (encoder.h, with its vector
// paths in simd_cpu.h doing the same operations lane by lane) and the CUDA encode kernels:
// the plan (range, bound, step, code width) and the code of one value with its neighbour retry.
// Codes q = clamp(rint((x - vmin) / (2 eb_abs)), 0, maxcode); a finite value whose
// reconstruction vmin + q * step, rounded to the dtype, is not within eb_abs tries the
// neighbouring code (a value at a rounding midpoint) and is otherwise an outlier.
#pragma once

#include "format.h"
#include "values.h"

namespace lc {

struct QuantPlan {
  float vmin, eb_abs, step, inv, maxf;
  uint32_t maxcode;
  int bits;  // code width; 0 when !ok
  bool ok;   // false: the frame is raw (lossless)
};

// The plan for a chunk of n values with finite range [vmin, vmax] (vmin > vmax: no finite
// value) and bound eb (relative in kRel, absolute in kAbs). Not ok for the raw codec, an empty
// chunk, a negative, NaN or infinite bound, or a range the codes cannot span in kMaxBits bits.
LC_HD QuantPlan plan_quant(float vmin, float vmax, float eb, int mode, int codec, uint64_t n) {
  if (n == 0 || !(vmin <= vmax)) { vmin = 0.0f; vmax = 0.0f; }  // no finite value
  vmin += 0.0f;  // +0.0 for a zero bound whatever the sign order of the scan
  vmax += 0.0f;
  QuantPlan p;
  const float range = vmax - vmin;
  p.vmin = vmin;
  p.eb_abs = mode == kRel ? eb * range : eb;
  p.step = p.eb_abs * 2.0f;
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
                   rows,       dim,   n_outliers, rows,   p.eb_abs, p.vmin};
  return h;
}

}  // namespace lc
