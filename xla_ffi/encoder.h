// The CPU encoder: one chunk into one frame (format.h), the smallest form the codec allows.
#pragma once

#include "bitio.h"
#include "checksum.h"
#include "format.h"
#include "huffman.h"
#include "quant.h"
#include "simd.h"
#include "values.h"
#include "workspace.h"

namespace lc {

struct EncodeResult {
  int64_t nbytes;  // frame bytes written, or -(bytes needed) when over capacity
};

// Finite minimum and maximum of the chunk (+-Inf when it has no finite value).
template <int D>
LC_HD void finite_range(const uint8_t* in, uint64_t n, float* lo, float* hi) {
  float mn = u2f(0x7f800000u), mx = -mn;
  uint64_t i = 0;
#if LC_CPU_SIMD
  if (D == kF32) i = simd::range_f32_prefix((const float*)in, n, &mn, &mx);
#endif
  for (; i < n; ++i) {
    float v = Val<D>::load(in, i);
    if (v - v != 0.0f) continue;  // NaN or Inf
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  *lo = mn;
  *hi = mx;
}

// Codes (quant.h) of positions [i0, n) into codes[]; the positions whose code does not honour
// the bound go to `bad` in increasing order. Returns their count.
template <int D>
LC_HD uint64_t quantize_verify(const uint8_t* in, uint64_t n, const QuantPlan& plan,
                               uint32_t* LC_RESTRICT codes, uint32_t* LC_RESTRICT bad,
                               uint64_t i0 = 0) {
  const QuantPlan p = plan;  // a local copy: the stores below cannot alias it
  uint64_t i = i0, nbad = 0;
#if LC_CPU_SIMD
  if (D == kF32 && i0 == 0 && p.pre == 1.0f)  // the vector paths leave out the 2^64 scaling
    i = simd::quantize_f32_prefix((const float*)in, n, p.base, p.inv, p.step, p.eb_abs, p.maxf,
                                  codes, bad, &nbad);
#endif
  for (; i < n; ++i) {
    const float v = Val<D>::load(in, i);
    const float qf = quant_code(v, p);
    codes[i] = (uint32_t)(int32_t)qf;  // qf < 2^24
    if (!code_honours<D>(v, qf, p)) bad[nbad++] = (uint32_t)i;
  }
  return nbad;
}

// Byte equality; memcmp is host-only under CUDA.
LC_HD bool bytes_equal(const uint8_t* a, const uint8_t* b, size_t n) {
#if defined(__CUDA_ARCH__)
  for (size_t j = 0; j < n; ++j)
    if (a[j] != b[j]) return false;
  return true;
#else
  return memcmp(a, b, n) == 0;
#endif
}

LC_HD uint64_t row_hash(const uint8_t* p, size_t bytes) {
  uint64_t h[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
  size_t j = 0;
  for (; j + 32 <= bytes; j += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t v;
      memcpy(&v, p + j + 8 * k, 8);
      h[k] = (h[k] ^ v) * 0x100000001B3ull;
    }
  for (; j < bytes; ++j) h[0] = (h[0] ^ p[j]) * 0x100000001B3ull;
  uint64_t hh = h[0] ^ (h[1] * 31) ^ (h[2] * 961) ^ (h[3] * 29791);
  return hh ^ (hh >> 29) ^ (hh >> 47);
}

// Distinct rows of base[nrows][row_bytes] (bitwise) in first-occurrence order: writes each
// row's distinct-row number to id[] and the first row of each distinct row to first[]; returns
// how many there are. Copies nothing (rows that never repeat, as cotangents, cost no copy):
// compact_rows gathers the distinct rows where some repeat.
LC_HD uint64_t dedup_rows(const uint8_t* base, uint64_t nrows, size_t row_bytes, Workspace& w,
                          uint32_t* first, uint32_t* id) {
  for (uint32_t i = 0; i < w.hash_size; ++i) w.hash[i] = -1;
  uint64_t nu = 0;
  for (uint64_t r = 0; r < nrows; ++r) {
    const uint8_t* c = base + r * row_bytes;
    uint32_t slot = (uint32_t)row_hash(c, row_bytes) & (w.hash_size - 1);
    for (;;) {
      int32_t e = w.hash[slot];
      if (e < 0) {
        w.hash[slot] = (int32_t)nu;
        id[r] = (uint32_t)nu;
        first[nu++] = (uint32_t)r;
        break;
      }
      if (bytes_equal(base + (uint64_t)first[e] * row_bytes, c, row_bytes)) {
        id[r] = (uint32_t)e;
        break;
      }
      slot = (slot + 1) & (w.hash_size - 1);
    }
  }
  return nu;
}

LC_HD void compact_rows(const uint8_t* base, uint64_t nu, size_t row_bytes, const uint32_t* first,
                        uint8_t* compact) {
  for (uint64_t u = 0; u < nu; ++u)
    memcpy(compact + u * row_bytes, base + (uint64_t)first[u] * row_bytes, row_bytes);
}

// Encodes chunk `in` (rows*dim values of dtype D) into out[0, capacity), zero-filling the rest.
// eb is the relative (mode kRel) or absolute (kAbs) error bound. A negative, NaN or infinite
// eb, or a range the codes cannot span, gives the raw form (lossless).
template <int D>
LC_HD EncodeResult encode_chunk_t(const uint8_t* in, uint64_t rows, uint64_t dim, float eb,
                                  int mode, int codec, uint8_t* out, size_t capacity, Workspace& w) {
  const uint64_t n = rows * dim;
  const int isz = dtype_size(D);
  const size_t raw_bytes = raw_frame_bytes(rows, dim, D);

  // 0. For the dictionary forms, the distinct input rows first (bitwise: hot ids repeat whole
  //    pooled vectors): quantization then runs on those alone. `src` holds srows of them.
  const bool want_dict = codec == kCodecAuto || codec == kCodecDedup || codec == kCodecEntropy;
  const uint8_t* src = in;
  uint64_t srows = rows;
  if (want_dict && n > 0 && rows > 1) {
    srows = dedup_rows(in, rows, (size_t)dim * isz, w, w.first, w.frow);
    if (srows < rows) {
      compact_rows(in, srows, (size_t)dim * isz, w.first, w.uvals);
      src = w.uvals;
    }
  }
  const bool fdedup = src != in;
  const uint64_t ns = srows * dim;
  // 1. Range over finite values; 2. the quantization plan (quant.h).
  float vmin = 0.0f, vmax = 0.0f;
  if (n > 0) finite_range<D>(src, ns, &vmin, &vmax);
  const QuantPlan plan = plan_quant(vmin, vmax, eb, mode, codec, n, D);
  const bool quant_ok = plan.ok;
  const int bits = plan.bits;
  // 3. Quantize and verify every value (branch-free, vectorisable), then collect outliers,
  //    trying the neighbouring code for values at a rounding midpoint. Positions are in src.
  //    The fixed-rate codec on the CPU packs the codes of the first `packed` values as it goes,
  //    straight into the frame at the offset they have when n_outliers < 128 (moved later if
  //    not), keeping in w.codes only what the retry reads. Where they would not fit, neither
  //    would the fixed-rate frame: the codes are then only counted.
  uint64_t n_sout = 0, n_out = 0, packed = 0;
  const size_t psec_off = quant_header_bytes(rows, dim, 0, false, 0);
  uint8_t* psec = nullptr;
  if (quant_ok) {
    uint64_t n_bad = 0;
#if LC_CPU_SIMD
    if (D == kF32 && codec == kCodecFixed && plan.pre == 1.0f &&
        psec_off + packed_bytes(n, bits) <= capacity) {
      psec = out + psec_off;
      packed = simd::quantize_pack_f32_prefix((const float*)src, ns, plan.base, plan.inv,
                                              plan.step, plan.eb_abs, plan.maxf, bits, psec,
                                              w.codes, w.outliers, &n_bad);
    }
#endif
    n_bad += quantize_verify<D>(src, ns, plan, w.codes, w.outliers + n_bad, packed);
    for (uint64_t k = 0; k < n_bad; ++k) {  // compacts w.outliers in place
      const uint32_t i = w.outliers[k];
      float q2;
      if (retry_code<D>(Val<D>::load(src, i), (float)w.codes[i], plan, &q2)) {
        w.codes[i] = (uint32_t)q2;
        if (i < packed) set_packed(psec, i, bits, (uint32_t)q2);
        continue;
      }
      w.outliers[n_sout++] = i;
    }
    n_out = n_sout;
    if (fdedup) {  // outliers of each distinct row repeat wherever the row does
      for (uint64_t u = 0; u < srows; ++u) w.ocount[u] = 0;
      for (uint64_t k = n_sout; k-- > 0;) {
        uint32_t u = (uint32_t)(w.outliers[k] / dim);
        w.ocount[u]++;
        w.ostart[u] = (uint32_t)k;
      }
      n_out = 0;
      for (uint64_t r = 0; r < rows; ++r) n_out += w.ocount[w.frow[r]];
    }
  }
  const int pb = pos_bytes_for(n);

  // 4. Candidate sizes: raw, fixed-rate codes, dictionary of distinct code rows.
  const size_t kNone = (size_t)-1;
  const size_t fixed_bytes = quant_ok ? fixed_frame_bytes(rows, dim, bits, D, n_out) : kNone;
  size_t dict_bytes = kNone;
  SectionPlan pc = {false, 0}, pi = {false, 0};
  uint64_t n_unique = rows;
  uint32_t* dcodes = w.codes;  // the dictionary: the codes themselves while no code row repeats
  const bool allow_huff = codec == kCodecAuto || codec == kCodecEntropy;
  const HuffScratch hs = {w.freq, w.tmp, w.hist, w.sorted};
  if (want_dict && quant_ok) {
    // Distinct code rows (first-occurrence order) among the distinct input rows.
    n_unique = dedup_rows((const uint8_t*)w.codes, srows, 4 * (size_t)dim, w, w.first, w.dict_rows);
    if (n_unique < srows) {
      dcodes = (uint32_t*)w.dict_vals;
      compact_rows((const uint8_t*)w.codes, n_unique, 4 * (size_t)dim, w.first, (uint8_t*)dcodes);
    }
    for (uint64_t r = 0; r < rows; ++r) w.index[r] = w.dict_rows[fdedup ? w.frow[r] : r];
    pc = plan_section(dcodes, n_unique * dim, (int)plan.maxcode + 1, bits, allow_huff, hs,
                      w.len_a, w.code_a);
    // Indices are worth entropy coding when rows repeat (hot ids), not when most are distinct.
    if (n_unique != rows)
      pi = plan_section(w.index, rows, (int)n_unique, bits_for((uint32_t)(n_unique - 1)),
                        allow_huff && 4 * n_unique <= rows, hs, w.len_b, w.code_b);
    dict_bytes = dict_frame_bytes(rows, dim, D, n_out, n_unique, pc.bytes, pi.bytes);
  }
  const FormChoice form = choose_form(codec, quant_ok, raw_bytes, fixed_bytes, dict_bytes, capacity);
  EncodeResult res;
  if (form.bytes > capacity) {
    for (size_t i = 0; i < capacity; ++i) out[i] = 0;
    res.nbytes = -(int64_t)form.bytes;
    return res;
  }
  // 5. Write the chosen form.
  uint8_t* o = out;
  if (form.kind == kWriteRaw) {
    o += write_header(out, raw_header(rows, dim, D));
    if (n) memcpy(o, in, (size_t)n * isz);  // `in` may be null for an empty chunk
    o += (size_t)n * isz;
  } else {
    // A dictionary form with every row distinct and packed codes is the fixed-rate frame.
    const bool dict = form.kind == kWriteDict;
    const bool dedup = dict && n_unique != rows;
    FrameHeader h = quant_header(D, mode, plan, rows, dim, n_out);
    h.dedup = dedup;
    h.n_unique = n_unique;
    h.codes_huff = dict && pc.huff;
    h.index_huff = dedup && pi.huff;
    const size_t qhdr = quant_header_bytes(rows, dim, n_out, false, 0);
    const uint64_t pre = dict ? 0 : packed;  // codes packed already, moved into place
    const size_t pre_bytes = (size_t)(pre / 8 * bits);
    if (pre && out + qhdr != psec) memmove(out + qhdr, psec, pre_bytes);
    o += write_header(out, h);
    if (!dict && fdedup)  // expand the distinct rows' codes in place, last row first
      for (uint64_t r = rows; r-- > 0;) memmove(w.codes + r * dim, w.codes + (uint64_t)w.frow[r] * dim, 4 * dim);
    const uint32_t* codes = dict ? dcodes : w.codes;  // identity dictionary == codes
    const uint64_t nc = dict ? n_unique * dim : n;
    o = h.codes_huff
            ? write_huff(o, codes, nc, (int)plan.maxcode + 1, w.len_a, w.code_a, out + capacity)
            : write_packed(o + pre_bytes, codes + pre, nc - pre, bits);
    if (dedup)
      o = h.index_huff ? write_huff(o, w.index, rows, (int)n_unique, w.len_b, w.code_b, out + capacity)
                       : write_packed(o, w.index, rows, bits_for((uint32_t)(n_unique - 1)));
    if (fdedup) {  // positions of the distinct rows' outliers in every row that repeats them
      uint64_t m = 0;
      for (uint64_t r = 0; r < rows; ++r) {
        const uint32_t u = w.frow[r];
        for (uint32_t k = 0; k < w.ocount[u]; ++k)
          w.codes[m++] = (uint32_t)(r * dim + (w.outliers[w.ostart[u] + k] - (uint64_t)u * dim));
      }
    }
    const uint32_t* opos = fdedup ? w.codes : w.outliers;  // codes are written by now
    for (uint64_t k = 0; k < n_out; ++k, o += pb) put_outlier_pos(o, opos[k], pb);
    for (uint64_t k = 0; k < n_out; ++k) {
      memcpy(o, in + (size_t)opos[k] * isz, isz);
      o += isz;
    }
  }
  size_t used = (size_t)(o - out);
  for (size_t i = used; i < capacity; ++i) out[i] = 0;
  put_u32(out + kChecksumOffset, lc_checksum(out, used));
  res.nbytes = (int64_t)used;
  return res;
}

LC_HD EncodeResult encode_chunk(const uint8_t* in, uint64_t rows, uint64_t dim, int dtype,
                                float eb, int mode, int codec, uint8_t* out, size_t capacity,
                                Workspace& w) {
  if (dtype == kBF16) return encode_chunk_t<kBF16>(in, rows, dim, eb, mode, codec, out, capacity, w);
  if (dtype == kF16) return encode_chunk_t<kF16>(in, rows, dim, eb, mode, codec, out, capacity, w);
  return encode_chunk_t<kF32>(in, rows, dim, eb, mode, codec, out, capacity, w);
}

}  // namespace lc
