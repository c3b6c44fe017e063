// The CPU decoder and validator: one frame into one chunk, every field checked, a status per
// frame (format.h: Status) instead of an error.
#pragma once

#include "bitio.h"
#include "checksum.h"
#include "format.h"
#include "huffman.h"
#include "values.h"
#include "workspace.h"

namespace lc {

// Decodes frame f[0, nbytes) into out (rows*dim values of dtype D) when kWrite; checks it fully
// either way. Expected rows/dim/dtype come from the caller (the static output shape). On any
// error the output is filled with NaN and the status says why. With fixed_rate (the caller
// declares every frame raw or fixed-rate, so that the CUDA decoder needs no dictionary
// workspace), a valid header of a dictionary or Huffman form gives kUnsupportedForm.
template <bool kWrite, int D>
LC_HD int32_t decode_frame_t(const uint8_t* f, int64_t nbytes, size_t capacity, uint64_t rows,
                             uint64_t dim, uint8_t* out, Workspace& w, bool fixed_rate = false) {
  FrameHeader h;
  Reader r = {nullptr, nullptr, true};
  const uint8_t* raw = nullptr;
  int32_t st = parse_header(f, nbytes, capacity, rows, dim, D, FrameChecksum(), h, r, &raw);
  if (st == kOk && fixed_rate && h.form == kFormQuant && (h.dedup || h.codes_huff)) st = kUnsupportedForm;
  const uint64_t n = rows * dim;
  const int isz = dtype_size(D);
  if (st == kOk && h.form == kFormRaw && kWrite && n) memcpy(out, raw, (size_t)n * isz);
  if (st == kOk && h.form == kFormQuant) {
    const float base = h.base, step = h.eb_abs * 2.0f;
    const uint64_t nd = h.n_unique * dim;
    const uint32_t maxcode = h.bits ? (1u << h.bits) - 1u : 0u;
    // Values of the first kMaxHuffSymbols codes come from a table; rarer wide codes are computed.
    const uint32_t nlut = maxcode + 1u < (uint32_t)kMaxHuffSymbols ? maxcode + 1u : (uint32_t)kMaxHuffSymbols;
    float* lut = w.lut;
    for (uint32_t q = 0; q < nlut; ++q) lut[q] = Val<D>::round(base + (float)q * step);
    // Float32 frames without a dictionary decode straight into the output.
    const bool direct = kWrite && D == kF32 && !h.dedup;
    float* dv = direct ? (float*)out : w.dict_vals;
    auto emit_lut = [dv, lut](uint64_t i, uint32_t q) { dv[i] = lut[q]; };
    auto emit_code = [dv, lut, nlut, base, step](uint64_t i, uint32_t q) {
      dv[i] = q < nlut ? lut[q] : Val<D>::round(base + (float)q * step);
    };
    bool ok;
    int tb = 0, nsym = 0;
    if (h.codes_huff) {  // symbols < nsym <= nlut: always in the table
      ok = read_huff_table(r, (int)nlut, w.len_a, w.code_a, w.tmp, &tb, &nsym) &&
           read_huff_symbols(r, nd, w.tmp, tb, emit_lut, w.freq);  // freq: unused by the decoder
    } else if (maxcode < nlut && D == kF32) {  // values computed, as in the table
      ok = read_packed_f32(r, nd, h.bits, base, step, dv, emit_lut);
    } else if (maxcode < nlut) {
      ok = read_packed(r, nd, h.bits, emit_lut);
    } else {
      ok = read_packed(r, nd, h.bits, emit_code);
    }
    if (!ok) st = r.ok ? kCorrupt : kTruncated;
    uint32_t* idx = w.index;
    if (st == kOk && h.dedup) {
      const uint64_t nu = h.n_unique;
      uint32_t bad = 0;
      auto emit_idx = [idx, nu, &bad](uint64_t i, uint32_t v) {
        bad |= (uint32_t)(v >= nu);
        idx[i] = v;
      };
      if (h.index_huff) {
        ok = read_huff_table(r, nu < (uint64_t)kMaxHuffSymbols ? (int)nu : kMaxHuffSymbols, w.len_b,
                             w.code_b, w.tmp, &tb, &nsym) &&
             read_huff_symbols(r, rows, w.tmp, tb, emit_idx);
      } else {
        ok = read_packed(r, rows, bits_for((uint32_t)(nu - 1)), emit_idx);
      }
      if (!ok || bad) st = r.ok ? kCorrupt : kTruncated;
    }
    const int pb = pos_bytes_for(n);
    const uint8_t* pos = nullptr;
    const uint8_t* vals = nullptr;
    if (st == kOk) st = take_outliers(r, h.n_outliers, pb, isz, &pos, &vals);
    if (st == kOk) {
      for (uint64_t k = 0; k < h.n_outliers; ++k)
        if (outlier_pos(pos, k, pb) >= n) { st = kCorrupt; break; }
    }
    if (st == kOk && kWrite) {
      for (uint64_t rr = 0; rr < rows && !direct; ++rr) {
        const float* src = dv + (h.dedup ? (uint64_t)idx[rr] : rr) * dim;
        if (D == kF32) memcpy(out + rr * dim * 4, src, dim * 4);
        else for (uint64_t j = 0; j < dim; ++j) store_value(out, D, rr * dim + j, src[j]);
      }
      for (uint64_t k = 0; k < h.n_outliers; ++k)
        memcpy(out + (size_t)outlier_pos(pos, k, pb) * isz, vals + k * isz, isz);
    }
  }
  if (st != kOk && kWrite) {
    for (uint64_t i = 0; i < n; ++i) store_value(out, D, i, u2f(0x7fc00000u));
  }
  return st;
}

template <bool kWrite>
LC_HD int32_t decode_frame(const uint8_t* f, int64_t nbytes, size_t capacity, uint64_t rows,
                           uint64_t dim, int dtype, uint8_t* out, Workspace& w,
                           bool fixed_rate = false) {
  if (dtype == kBF16)
    return decode_frame_t<kWrite, kBF16>(f, nbytes, capacity, rows, dim, out, w, fixed_rate);
  if (dtype == kF16)
    return decode_frame_t<kWrite, kF16>(f, nbytes, capacity, rows, dim, out, w, fixed_rate);
  return decode_frame_t<kWrite, kF32>(f, nbytes, capacity, rows, dim, out, w, fixed_rate);
}

}  // namespace lc
