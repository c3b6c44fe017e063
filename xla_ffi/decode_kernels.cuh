// CUDA decode kernels (decompress and frame status), the same statuses and values as the CPU
// decoder (decoder.h), checked in the same order:
//  * decode_fast_kernel: one block per frame parses the header (format.h's parse_header, the
//    checksum computed in parallel first), and decodes raw and fixed-rate frames; frames with a
//    dictionary or Huffman sections are handed (parsed header in scratch) to
//  * decode_dict_kernel: section headers are read by one thread with format.h's bounds-checked
//    Reader, the decode table is filled by all threads, each thread decodes whole Huffman
//    segments with huffman.h's segment cursor (offsets: a block scan of the u16 segment
//    lengths), packed codes are unpacked one per thread, dictionary rows are expanded in
//    parallel and outliers scattered.
#pragma once

#include "cuda_common.cuh"
#include "format.h"
#include "huffman.h"
#include "values.h"
#include "workspace.h"

namespace lc {
namespace gpu {

// ---------------------------------------------------------------- decoding
enum Kind : int { kKindError = 0, kKindRaw = 1, kKindFixed = 2, kKindGeneric = 3 };

struct FastFrame {
  int kind;
  int32_t status;
  int bits;
  float base, step;
  uint64_t n_out;
  size_t src_off, pos_off, val_off;  // raw values / packed codes (generic: first section);
                                     // outlier positions; values
  uint64_t n_unique;                 // generic frames: dictionary rows and section flags
  bool dedup, codes_huff, index_huff;
};

// A checksum the block computed beforehand, as parse_header's checksum argument.
struct KnownChecksum {
  uint32_t value;
  __device__ uint32_t operator()(const uint8_t*, size_t) const { return value; }
};

// lc::parse_header with the block's checksum, then what tells raw and fixed-rate frames (decoded
// by decode_fast_kernel) from the others: a fixed-rate frame's sections are located and checked
// as the CPU decoder does (codes, outlier positions and values, nothing after them).
template <int D>
__device__ FastFrame fast_parse(const uint8_t* f, int64_t nbytes, size_t cap, uint64_t rows,
                                uint64_t dim, uint32_t checksum) {
  FastFrame F = {};
  F.kind = kKindError;
  lc::FrameHeader h;
  lc::Reader r = {nullptr, nullptr, true};
  const uint8_t* raw = nullptr;
  int32_t st = lc::parse_header(f, nbytes, cap, rows, dim, D, KnownChecksum{checksum}, h, r, &raw);
  if (st == lc::kOk && h.form == lc::kFormRaw) {
    F.kind = kKindRaw;
    F.src_off = (size_t)(raw - f);
  } else if (st == lc::kOk && (h.dedup || h.codes_huff)) {
    F.kind = kKindGeneric;
    F.n_unique = h.n_unique;
    F.dedup = h.dedup;
    F.codes_huff = h.codes_huff;
    F.index_huff = h.index_huff;
    F.src_off = (size_t)(r.p - f);
  } else if (st == lc::kOk) {
    const uint8_t* sp = r.take(lc::packed_bytes(rows * dim, h.bits));
    const uint8_t* pos = nullptr;
    const uint8_t* vals = nullptr;
    st = lc::take_outliers(r, h.n_outliers, lc::pos_bytes_for(rows * dim), Dev<D>::kSize, &pos, &vals);
    if (st == lc::kOk) {
      F.kind = kKindFixed;
      F.src_off = (size_t)(sp - f);
      F.pos_off = (size_t)(pos - f);
      F.val_off = (size_t)(vals - f);
    }
  }
  if (F.kind == kKindFixed || F.kind == kKindGeneric) {
    F.bits = h.bits;
    F.base = h.base;
    F.step = h.eb_abs * 2.0f;
    F.n_out = h.n_outliers;
  }
  F.status = st;
  return F;
}

struct DecodeShared {
  uint32_t words[kTileWords + 8];  // one tile of packed codes, aligned (+1 word read past it,
                                   // up to 16-byte granules on the full-tile path)
  uint32_t red[kWarps];
  FastFrame frame;
};

// One block per frame: header, checksum, and the whole decode of raw and fixed-rate frames;
// every frame's parsed header goes to info[c], and frames with a dictionary or Huffman sections
// (kind kKindGeneric) are left to decode_dict_kernel. Without info (nullptr: the caller
// declared every frame fixed-rate or raw, the one launch of such a decompress) those frames get
// status kUnsupportedForm and NaN values, as lc::decode_frame with fixed_rate on the CPU.
// A frame's values may be spread over `parts` blocks (few chunks, many SMs): part k of frame c
// (work item c * parts + k) writes the values of tiles k, k + parts, ... and the outliers that
// fall in them; every part checks the header, checksum and positions itself (the frame is
// re-read from L2), part 0 writes the status and the parsed header.
template <int D, bool kWrite>
__global__ void __launch_bounds__(kThreads, kDecodeMinBlocks)
decode_fast_kernel(const uint8_t* __restrict__ frames, const int32_t* __restrict__ nbytes,
                   int64_t batch, size_t cap, uint64_t rows, uint64_t dim, uint8_t* __restrict__ x,
                   int32_t* __restrict__ status, FastFrame* __restrict__ info, int64_t parts) {
  __shared__ DecodeShared sh;
  const int tid = threadIdx.x;
  const uint64_t n = rows * dim;
  constexpr int isz = Dev<D>::kSize;
  for (int64_t w = blockIdx.x; w < batch * parts; w += gridDim.x) {
    // 32-bit division: parts > 1 only when the chunks are fewer than the resident blocks.
    const int64_t c = parts == 1 ? w : (int64_t)((uint32_t)w / (uint32_t)parts);
    const uint64_t part = (uint64_t)(w - c * parts);
    const uint8_t* f = frames + (size_t)c * cap;
    const int64_t nb = nbytes[c];
    uint8_t* out = kWrite ? x + (size_t)c * n * isz : nullptr;
    uint32_t cs = 0;
    if (nb >= lc::kHeaderFixed + 2 && (uint64_t)nb <= cap) cs = block_checksum(f, (size_t)nb, sh.red);
    if (tid == 0) sh.frame = fast_parse<D>(f, nb, cap, rows, dim, cs);
    __syncthreads();
    const FastFrame F = sh.frame;
    int32_t st = F.status;
    if (info != nullptr && tid == 0 && part == 0) info[c] = F;
    if (F.kind == kKindGeneric && info != nullptr) {
      __syncthreads();
      continue;
    }
    if (F.kind == kKindGeneric) st = lc::kUnsupportedForm;
    const int pb = lc::pos_bytes_for(n);
    bool increasing = true;
    if (F.kind == kKindFixed) {
      bool bad;
      check_positions(f + F.pos_off, F.n_out, pb, n, &bad, &increasing);
      if (bad) st = lc::kCorrupt;
    }
    if (tid == 0 && part == 0) status[c] = st;
    // Part `part` writes units part, part + parts, ... of `unit` values: tiles, or half tiles
    // when the parts outnumber the tiles (indices in 32 bits: chunks are < 2^31 values).
    const uint32_t n32 = (uint32_t)n, tiles = (n32 + kTile - 1) / kTile;
    const uint32_t unit = (uint64_t)parts > tiles ? (uint32_t)kUnit : (uint32_t)kTile;
    const uint32_t step = (uint32_t)parts * unit;
    if (kWrite && st != lc::kOk) {
      for (uint32_t t0 = (uint32_t)part * unit; t0 < n32; t0 += step) {
        const uint32_t t1 = n32 - t0 > unit ? t0 + unit : n32;
        for (uint32_t i = t0 + tid; i < t1; i += kThreads) Dev<D>::store(out, i, lc::u2f(0x7fc00000u));
      }
    } else if (kWrite && F.kind == kKindRaw) {
      for (uint32_t t0 = (uint32_t)part * unit; t0 < n32; t0 += step) {
        const uint32_t t1 = n32 - t0 > unit ? t0 + unit : n32;
        block_copy(out + (size_t)t0 * isz, f + F.src_off + (size_t)t0 * isz, (size_t)(t1 - t0) * isz);
      }
    } else if (kWrite && F.kind == kKindFixed) {
      const int bits = F.bits;
      const uint32_t mask = bits ? (1u << bits) - 1u : 0u;
      const uint8_t* sp = f + F.src_off;
      const uint32_t packed = (uint32_t)lc::packed_bytes(n, bits);
      for (uint32_t base = (uint32_t)part * unit; base < n32; base += step) {
        if (part != 0) LC_GPU_PATH(kPathDecodeMultiBlock);
        if (unit != (uint32_t)kTile) LC_GPU_PATH(kPathDecodeHalf);
        // Stage the unit's packed bytes as aligned words (bytes outside the section read as 0).
        const uint32_t rstart = base / kGroup * 4 * (uint32_t)bits;  // whole groups before
        uint32_t len = packed - rstart;
        if (len > unit / 8 * (uint32_t)bits) len = unit / 8 * (uint32_t)bits;
        const uint8_t* region = sp + rstart;
        // Full units: the 16-byte granules that cover the unit, when they lie inside the frame's
        // bytes, all loads issued before the stores to shared memory (bytes of neighbouring
        // sections around the unit are staged too and never extracted).
        const unsigned gshift = (unsigned)((uintptr_t)region & 15);
        const uint8_t* g0 = region - gshift;  // pointer arithmetic: the loads stay global (LDG)
        const uint32_t ngran = (gshift + len + 15) / 16;
        unsigned shift;
        if (n32 - base >= unit && g0 >= f && g0 + 16 * ngran <= f + nb) {
          LC_GPU_PATH(kPathDecodeVec);
          constexpr int kMaxGran = (kTileWords * 4 + 30) / 16 / kThreads + 1;
          const uint4* src = reinterpret_cast<const uint4*>(g0);
          // Two rounds of up to 4 loads a thread (64 bytes in flight, 8 KiB a block).
#pragma unroll
          for (int r = 0; r < kMaxGran; r += 4) {
            uint4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
              if (r + k < kMaxGran && (uint32_t)((r + k) * kThreads + tid) < ngran)
                v[k] = src[(r + k) * kThreads + tid];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const uint32_t m = (uint32_t)((r + k) * kThreads + tid);
              if (r + k < kMaxGran && m < ngran) {
                sh.words[4 * m] = v[k].x;
                sh.words[4 * m + 1] = v[k].y;
                sh.words[4 * m + 2] = v[k].z;
                sh.words[4 * m + 3] = v[k].w;
              }
            }
          }
          shift = gshift;
          if (tid == 0) sh.words[4 * ngran] = 0;
        } else {
          LC_GPU_PATH(kPathDecodeScalar);
          const uint8_t* a0 = (const uint8_t*)((uintptr_t)region & ~(uintptr_t)3);
          shift = (unsigned)(region - a0);
          const uint32_t nwords = (shift + len + 3) / 4;
          for (uint32_t m = tid; m < nwords; m += kThreads)
            sh.words[m] = load_word_guarded(a0 + 4 * m, region, region + len);
          if (tid == 0) sh.words[nwords] = 0;
        }
        __syncthreads();
        const uint32_t lim = n32 - base < unit ? n32 - base : unit;
#pragma unroll 8
        for (int j = 0; j < kGroup; ++j) {
          const uint32_t L = (uint32_t)(j * kThreads + tid);
          if (L < lim) {
            const uint32_t bo = shift * 8 + L * (uint32_t)bits;
            const uint64_t v = sh.words[bo >> 5] | ((uint64_t)sh.words[(bo >> 5) + 1] << 32);
            const uint32_t q = (uint32_t)(v >> (bo & 31)) & mask;
            Dev<D>::store(out, base + L, lc::Val<D>::round(F.base + (float)q * F.step));
          }
        }
        __syncthreads();
      }
      scatter_outliers<D>(out, f + F.pos_off, f + F.val_off, F.n_out, pb, increasing, part,
                          (uint64_t)parts, unit);
    }
    __syncthreads();
  }
}


// ---------------------------------------------------------------- dictionary forms: decoder
struct DictDecShared {
  uint32_t table[lc::kMaxHuffSymbols];  // Huffman decode table: (symbol << 8) | length
  uint16_t code[lc::kMaxHuffSymbols];
  uint8_t len[lc::kMaxHuffSymbols];
  uint32_t red[kWarps];
  uint64_t red64[kWarps];
  FastFrame F;
  lc::Reader r;  // the frame's reader, used by thread 0 only
  const uint8_t* p0;
  const uint8_t* p1;
  int nsym, tb, ok;
};

// Decoded code q of dictionary value i: its value, into the output (no dictionary) or into the
// dictionary values dv (in the dtype, as lc::decode_frame_t's lut).
template <int D, bool kWrite>
struct EmitValue {
  uint8_t* out;
  uint8_t* dv;
  float base, step;
  __device__ void operator()(uint64_t i, uint32_t q) {
    if (!kWrite) return;
    const float v = lc::Val<D>::round(base + (float)q * step);
    Dev<D>::store(out ? out : dv, i, v);
  }
};
struct EmitIndex {
  uint32_t* idx;
  uint64_t nu;
  uint32_t bad;
  __device__ void operator()(uint64_t i, uint32_t v) {
    bad |= (uint32_t)(v >= nu);
    idx[i] = v;
  }
};

// One section of `count` symbols at the reader (lc::read_huff_table + lc::read_huff_symbols, or
// lc::read_packed), by the block; emit(i, symbol) for each. Returns the status
// lc::decode_frame_t gives when the section fails (kTruncated when the reader ran out, kCorrupt
// for a bad code table or a segment that does not decode to its declared length), or kOk.
// Every Huffman segment is decoded by one thread with huffman.h's segment cursor; a bit past the
// stream's last byte reads as zero, as on the CPU.
template <class Emit>
__device__ int32_t decode_section(uint64_t count, bool huff, int max_nsym, int bits, Emit& emit,
                                  DictDecShared& sh) {
  const int tid = threadIdx.x;
  if (!huff) {
    const size_t bytes = lc::packed_bytes(count, bits);
    if (tid == 0) sh.p0 = sh.r.take(bytes);
    __syncthreads();
    const uint8_t* sp = sh.p0;
    if (!sp) return lc::kTruncated;
    const uint32_t mask = (uint32_t)((1ull << bits) - 1u);
    for (uint64_t i = tid; i < count; i += kThreads) {
      uint32_t q = 0;
      if (bits) {
        const uint64_t b = i * (uint64_t)bits;
        const size_t by = (size_t)(b >> 3);
        uint64_t v = 0;
        for (int k = 0; k < 5; ++k)  // bits + 7 <= 38: index sections reach 31 bits
          if (by + k < bytes) v |= (uint64_t)sp[by + k] << (8 * k);
        q = (uint32_t)(v >> (b & 7)) & mask;
      }
      emit(i, q);
    }
    return lc::kOk;
  }
  if (tid == 0) {  // lc::read_huff_table
    lc::Reader& r = sh.r;
    const uint64_t nsym = r.varint((uint64_t)max_nsym);
    const uint8_t* nib = nullptr;
    if (r.ok && nsym >= 1) nib = r.take((size_t)(nsym + 1) / 2);
    sh.p0 = nib;
    sh.nsym = (int)nsym;
  }
  __syncthreads();
  const uint8_t* nib = sh.p0;
  const int nsym = sh.nsym;
  if (!nib) return sh.r.ok ? lc::kCorrupt : lc::kTruncated;
  for (int s = tid; s < nsym; s += kThreads) sh.len[s] = (uint8_t)((nib[s / 2] >> (4 * (s & 1))) & 15);
  __syncthreads();
  const uint64_t nseg = lc::segments_for(count);
  if (tid == 0) {
    int ml = 0;
    const bool ok = lc::huff_codes(sh.len, nsym, sh.code, &ml) && ml != 0;
    sh.ok = ok ? 1 : 0;
    sh.tb = ml;
    sh.p1 = ok ? sh.r.take(2 * (size_t)nseg) : nullptr;
  }
  __syncthreads();
  if (!sh.ok) return lc::kCorrupt;
  const uint8_t* seg = sh.p1;
  if (!seg) return lc::kTruncated;
  const int tb = sh.tb;
  uint64_t part = 0;
  for (uint64_t k = tid; k < nseg; k += kThreads) part += (uint32_t)seg[2 * k] | ((uint32_t)seg[2 * k + 1] << 8);
  const uint64_t total = block_sum64(part, sh.red64);
  const size_t bytes = (size_t)((total + 7) / 8);
  if (tid == 0) sh.p0 = sh.r.take(bytes);
  const uint32_t size = 1u << tb;
  for (uint32_t i = tid; i < size; i += kThreads) sh.table[i] = 0;
  __syncthreads();
  const uint8_t* sp = sh.p0;
  if (!sp) return lc::kTruncated;
  // lc::huff_table: the codes are prefix-free (huff_codes checked Kraft), so symbols fill
  // disjoint entries.
  for (int s = tid; s < nsym; s += kThreads) {
    const int l = sh.len[s];
    if (l)
      for (uint32_t i = sh.code[s]; i < size; i += 1u << l) sh.table[i] = ((uint32_t)s << 8) | (uint32_t)l;
  }
  __syncthreads();
  const uint64_t mask = size - 1;
  uint32_t bad = 0;
  uint64_t off = 0;  // bit offset of segment k0
  for (uint64_t k0 = 0; k0 < nseg; k0 += kThreads) {
    const uint64_t k = k0 + tid;
    const uint32_t L = k < nseg ? (uint32_t)seg[2 * k] | ((uint32_t)seg[2 * k + 1] << 8) : 0u;
    uint32_t tot;
    const uint32_t ex = block_scan(L, sh.red, &tot);
    if (k < nseg) {
      const uint64_t s0 = k * lc::kSeg, s1 = s0 + lc::kSeg < count ? s0 + lc::kSeg : count;
      lc::SegCursor cur = lc::seg_cursor(sp, bytes, off + ex, s0, s1);
      const bool ok = lc::seg_finish(cur, sh.table, tb, mask, emit) && cur.bits == L;
      bad |= ok ? 0u : 1u;
    }
    off += tot;
  }
  return __syncthreads_or(bad) ? lc::kCorrupt : lc::kOk;
}

// Workspace of one block of decode_dict_kernel: dictionary values (in the dtype), row indices.
LC_HD size_t dict_dec_ws_bytes(uint64_t rows, uint64_t dim, int dtype) {
  return lc::align16((size_t)(rows * dim) * lc::dtype_size(dtype)) + lc::align16(4 * rows);
}

// Frames with a dictionary or Huffman sections (info[c].kind == kKindGeneric): the rest of
// lc::decode_frame_t, one block per frame, same checks in the same order. Workspace per block:
// dictionary values (in the dtype) and row indices (dict_dec_ws_bytes).
template <int D, bool kWrite>
__global__ void __launch_bounds__(kThreads)
decode_dict_kernel(const uint8_t* __restrict__ frames, const int32_t* __restrict__ nbytes,
                   int64_t batch, size_t cap, uint64_t rows, uint64_t dim, uint8_t* __restrict__ x,
                   int32_t* __restrict__ status, const FastFrame* __restrict__ info, uint8_t* ws,
                   size_t ws_stride) {
  __shared__ DictDecShared sh;
  const int tid = threadIdx.x;
  const uint64_t n = rows * dim;
  constexpr int isz = Dev<D>::kSize;
  uint8_t* wb = ws + (size_t)blockIdx.x * ws_stride;
  uint8_t* dv = wb;
  uint32_t* idx = reinterpret_cast<uint32_t*>(wb + lc::align16((size_t)n * isz));
  for (int64_t c = blockIdx.x; c < batch; c += gridDim.x) {
    if (info[c].kind != kKindGeneric) continue;
    const uint8_t* f = frames + (size_t)c * cap;
    uint8_t* out = kWrite ? x + (size_t)c * n * isz : nullptr;
    if (tid == 0) {
      sh.F = info[c];
      sh.r.p = f + sh.F.src_off;
      sh.r.end = f + nbytes[c];
      sh.r.ok = true;
    }
    __syncthreads();
    const FastFrame F = sh.F;
    const uint64_t nu = F.n_unique, nd = nu * dim;
    const uint32_t maxcode = F.bits ? (1u << F.bits) - 1u : 0u;
    const int nlut = maxcode + 1u < (uint32_t)lc::kMaxHuffSymbols ? (int)maxcode + 1 : lc::kMaxHuffSymbols;
    // Codes: without a dictionary straight into the output.
    EmitValue<D, kWrite> ev = {F.dedup ? nullptr : out, dv, F.base, F.step};
    int32_t st = decode_section(nd, F.codes_huff, nlut, F.bits, ev, sh);
    __syncthreads();
    if (st == lc::kOk && F.dedup) {
      EmitIndex ei = {idx, nu, 0u};
      st = decode_section(rows, F.index_huff, nu < (uint64_t)lc::kMaxHuffSymbols ? (int)nu : lc::kMaxHuffSymbols,
                          lc::bits_for((uint32_t)(nu - 1)), ei, sh);
      if (__syncthreads_or(ei.bad) && st == lc::kOk) st = lc::kCorrupt;
    }
    const int pb = lc::pos_bytes_for(n);
    const uint8_t* pos = nullptr;
    const uint8_t* vals = nullptr;
    bool increasing = true;
    if (st == lc::kOk) {
      if (tid == 0) sh.ok = lc::take_outliers(sh.r, F.n_out, pb, isz, &sh.p0, &sh.p1);
      __syncthreads();
      st = sh.ok;
      pos = sh.p0;
      vals = sh.p1;
      if (st == lc::kOk) {
        bool bad;
        check_positions(pos, F.n_out, pb, n, &bad, &increasing);
        if (bad) st = lc::kCorrupt;
      }
    }
    if (kWrite && st == lc::kOk) {
      if (F.dedup) {  // expand the dictionary rows
        const uint32_t n32 = (uint32_t)n, d32 = (uint32_t)dim;  // chunks are < 2 GiB
        for (uint32_t i = tid; i < n32; i += kThreads) {
          const uint32_t r = i / d32;
          const size_t k = (size_t)idx[r] * d32 + (i - r * d32);
          if (isz == 4) reinterpret_cast<uint32_t*>(out)[i] = reinterpret_cast<const uint32_t*>(dv)[k];
          else reinterpret_cast<uint16_t*>(out)[i] = reinterpret_cast<const uint16_t*>(dv)[k];
        }
        __syncthreads();
      }
      scatter_outliers<D>(out, pos, vals, F.n_out, pb, increasing);
    } else if (kWrite) {
      for (uint64_t i = tid; i < n; i += kThreads) Dev<D>::store(out, i, lc::u2f(0x7fc00000u));
    }
    if (tid == 0) status[c] = st;
    __syncthreads();
  }
}

}  // namespace gpu
}  // namespace lc
