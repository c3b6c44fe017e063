// CUDA XLA FFI handlers for the jax_lossy_comm codec: compress, decompress, frame status.
//
// Same operands, attributes and frame format as codec_cpu.cc: a frame made here decodes on the
// CPU to the same values and the reverse (the codec core is frame.h; -fmad=false keeps the float
// operations of both sides identical). Leading dimensions of the input are a batch of
// independent chunks [rows, dim]; every kernel takes the whole batch in one launch, one thread
// block per chunk at a time (a grid-stride loop over chunks, the grid sized to the occupancy and
// to the scratch budget), everything parallel across the block.
//
// Compress:
//  * "fixed" and "raw" (encode_fixed_kernel): finite min/max reduction, quantize + verify of
//    every value, bit-packing of 32-value groups (32 * b bits = 4b bytes, so groups never share a
//    byte), staged in shared memory and stored as aligned words; outliers (rare) are compacted in
//    order with a block-wide scan; the frame checksum is a block reduction. Raw is a parallel copy.
//  * "auto", "dedup", "entropy" (encode_dict_kernel), the same frames as lc::encode_chunk_t:
//    1. range and quantization of every value into a code array in scratch, outlier positions
//       compacted in order (warp ballots + a block scan);
//    2. distinct code rows: each thread hashes whole code rows and inserts them into a hash table
//       (shared memory up to 2048 rows, else scratch; atomicCAS, then atomicMin keeps the
//       smallest equal row), so every row learns
//       its first occurrence; a block scan over "first occurrence" flags numbers the dictionary
//       in first-occurrence order (what frame.h gets from its serial dedup of the distinct input
//       rows: equal input rows have equal codes, so both orders agree);
//    3. each section is planned as frame.h's plan_section: histogram with shared atomics, keys
//       (freq << 16 | symbol) bitonic-sorted by the block, then frame.h's huff_lengths /
//       huff_codes by one thread on the sorted frequencies (so lengths are the CPU's by
//       construction), total bits by a block reduction;
//    4. the smallest form is written: every section is an LSB-first bit stream produced tile by
//       tile: each thread takes kRun symbols, a block scan of their bit counts gives each its
//       bit offset, threads OR their bits into shared words, whole words go out aligned and the
//       partial last word carries into the next tile; Huffman segment lengths (kSeg symbols) fall
//       out of the same scan.
// Decompress / frame status (decode_fast_kernel, then decode_dict_kernel): one block per frame
// validates the header, checks the checksum in parallel and decodes raw and fixed-rate frames;
// frames with a dictionary or Huffman sections are handed (parsed header in scratch) to the
// second kernel: section headers are read by one thread with frame.h's bounds-checked Reader,
// the decode table is filled by all threads, each thread decodes whole Huffman segments with
// frame.h's segment cursor (offsets: a block scan of the u16 segment lengths), packed codes are
// unpacked one per thread, dictionary rows are expanded in parallel and outliers scattered.
// Statuses are the ones of lc::decode_frame_t, checked in the same order.
// Scratch memory comes from XLA's allocator (ScratchAllocator), kernels run on XLA's stream,
// byte counts and statuses stay on the device; no synchronisation, no host round trip.
// tests/cuda_emu runs the kernels on the CPU (LC_CUDA_EMULATION): host side left out there.
#if !defined(LC_CUDA_EMULATION)
#include <cuda_runtime.h>
#endif

#include <cstdint>
#include <string>

#include "frame.h"
#if !defined(LC_CUDA_EMULATION)
// XLA's FFI headers (jaxlib) warn under nvcc (missing returns after exhaustive switches,
// always_inline on non-inline functions): silenced for these headers only.
#if defined(__NVCC__)
#pragma nv_diag_suppress 940
#pragma nv_diag_suppress 2473
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wreturn-type"
#pragma GCC diagnostic ignored "-Wattributes"
#endif
#include "ffi_args.h"
#include "xla/ffi/api/ffi.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#if defined(__NVCC__)
#pragma nv_diag_default 940
#pragma nv_diag_default 2473
#endif

namespace ffi = xla::ffi;
#endif

namespace {

constexpr int kThreads = 128;                           // threads per block
constexpr int kGroup = 32;                              // values one thread packs
constexpr int kTile = kThreads * kGroup;                // values per tile (4096)
constexpr int kTileWords = kThreads * lc::kMaxBits;     // packed words of a tile at 24 bits
constexpr int kWarps = kThreads / 32;
// Dictionary forms.
constexpr int kRun = 16;                                // symbols one thread writes per tile
constexpr int kRunTile = kThreads * kRun;               // symbols per stream tile (2 segments)
// Bit-packed index sections take up to 31 bits a symbol (rows < 2^31), codes at most 24.
constexpr int kMaxStreamBits = 31;
constexpr int kStageWords = (kRunTile * kMaxStreamBits + 31) / 32 + 3;
constexpr int kSortShared = 1024;                       // sort keys in shared memory up to this
// Resident blocks of the dictionary encoder per SM the compiler must allow: 4 keeps it at 128
// registers without spills (sm_90, nvcc 13); 6 spills about 50 bytes; measure on a GPU.
constexpr int kDictMinBlocks = 4;
constexpr size_t kDictEncodeScratch = size_t(1) << 29;  // bytes of encoder workspaces, at most
constexpr size_t kDictDecodeScratch = size_t(1) << 28;  // bytes of decoder workspaces, at most
constexpr size_t kNoSeg = ~(size_t)0;
static_assert(kRunTile % lc::kSeg == 0 && lc::kSeg % kRun == 0, "stream tiles hold whole segments");
static_assert(kGroup * kWarps == kThreads, "one outlier mask per thread");
static_assert((1 << lc::kMaxHuffLen) == lc::kMaxHuffSymbols, "decode table size");

// ---------------------------------------------------------------- typed values
template <int D> struct Dev;
template <> struct Dev<lc::kF32> {
  static constexpr int kSize = 4;
  static __device__ __forceinline__ float load(const uint8_t* p, uint64_t i) {
    return reinterpret_cast<const float*>(p)[i];
  }
  static __device__ __forceinline__ void store(uint8_t* p, uint64_t i, float f) {
    reinterpret_cast<float*>(p)[i] = f;
  }
};
template <> struct Dev<lc::kBF16> {
  static constexpr int kSize = 2;
  static __device__ __forceinline__ float load(const uint8_t* p, uint64_t i) {
    return lc::bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
  }
  static __device__ __forceinline__ void store(uint8_t* p, uint64_t i, float f) {
    reinterpret_cast<uint16_t*>(p)[i] = lc::f32_to_bf16(f);
  }
};
template <> struct Dev<lc::kF16> {
  static constexpr int kSize = 2;
  static __device__ __forceinline__ float load(const uint8_t* p, uint64_t i) {
    return lc::f16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
  }
  static __device__ __forceinline__ void store(uint8_t* p, uint64_t i, float f) {
    reinterpret_cast<uint16_t*>(p)[i] = lc::f32_to_f16(f);
  }
};

// ---------------------------------------------------------------- block primitives
__device__ __forceinline__ uint32_t block_sum(uint32_t v, uint32_t* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  uint32_t s = 0;
  for (int k = 0; k < kWarps; ++k) s += red[k];
  __syncthreads();
  return s;
}

// Exclusive prefix sum over the block; *total gets the sum of all.
__device__ __forceinline__ uint32_t block_scan(uint32_t v, uint32_t* red, uint32_t* total) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  uint32_t x = v;
  for (int o = 1; o < 32; o <<= 1) {
    uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) red[wid] = x;
  __syncthreads();
  uint32_t off = 0, tot = 0;
  for (int k = 0; k < kWarps; ++k) {
    if (k < wid) off += red[k];
    tot += red[k];
  }
  __syncthreads();
  *total = tot;
  return off + x - v;
}

__device__ __forceinline__ void block_minmax(float& mn, float& mx, float* rmin, float* rmax) {
  for (int o = 16; o > 0; o >>= 1) {
    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  }
  if ((threadIdx.x & 31) == 0) { rmin[threadIdx.x >> 5] = mn; rmax[threadIdx.x >> 5] = mx; }
  __syncthreads();
  mn = rmin[0];
  mx = rmax[0];
  for (int k = 1; k < kWarps; ++k) { mn = fminf(mn, rmin[k]); mx = fmaxf(mx, rmax[k]); }
  __syncthreads();
}

// lc::lc_checksum(f, n) computed by the whole block.
__device__ __forceinline__ uint32_t block_checksum(const uint8_t* f, size_t n, uint32_t* red) {
  uint32_t s = 0;
  const size_t words = (n + 3) / 4;
  for (size_t i = threadIdx.x; i < words; i += kThreads) s += lc::checksum_word(f, n, i);
  s = block_sum(s, red);
  return lc::fmix32((uint32_t)n * 0x27d4eb2fu + 0x165667b1u) + s;
}

// The 32-bit word at a (4-aligned), with bytes outside [lo, hi) read as zero and never touched.
__device__ __forceinline__ uint32_t load_word_guarded(const uint8_t* a, const uint8_t* lo,
                                                      const uint8_t* hi) {
  if (a >= lo && a + 4 <= hi) return *reinterpret_cast<const uint32_t*>(a);
  uint32_t v = 0;
  for (int b = 0; b < 4; ++b)
    if (a + b >= lo && a + b < hi) v |= (uint32_t)a[b] << (8 * b);
  return v;
}

// dst[0, len) = src[0, len) by the block, any alignment of either; aligned word stores.
__device__ void block_copy(uint8_t* dst, const uint8_t* src, size_t len) {
  size_t head = (4 - ((uintptr_t)dst & 3)) & 3;
  if (head > len) head = len;
  const size_t nw = (len - head) >> 2, tail = head + (nw << 2);
  for (size_t k = threadIdx.x; k < head; k += kThreads) dst[k] = src[k];
  for (size_t k = tail + threadIdx.x; k < len; k += kThreads) dst[k] = src[k];
  const uint8_t* s0 = src + head;  // source of dst word 0
  const uint8_t* a0 = (const uint8_t*)((uintptr_t)s0 & ~(uintptr_t)3);
  const unsigned sh = 8u * (unsigned)(s0 - a0);
  const uint8_t* end = src + len;
  uint32_t* dw = reinterpret_cast<uint32_t*>(dst + head);
  for (size_t m = threadIdx.x; m < nw; m += kThreads) {
    const uint8_t* a = a0 + 4 * m;
    uint32_t lo = load_word_guarded(a, src, end);
    uint32_t hi = sh ? load_word_guarded(a + 4, src, end) : 0u;
    dw[m] = __funnelshift_r(lo, hi, sh);
  }
}

// out[off, off + len) = bytes of the shared words src (clipped to capacity), aligned stores.
// src must have one readable word past the copied bytes.
__device__ void smem_to_frame(uint8_t* out, size_t cap, size_t off, size_t len,
                              const uint32_t* src) {
  if (off >= cap || len == 0) return;
  if (len > cap - off) len = cap - off;
  uint8_t* dst = out + off;
  const uint8_t* sb = reinterpret_cast<const uint8_t*>(src);
  size_t head = (4 - ((uintptr_t)dst & 3)) & 3;
  if (head > len) head = len;
  const size_t nw = (len - head) >> 2, tail = head + (nw << 2);
  if (threadIdx.x < head) dst[threadIdx.x] = sb[threadIdx.x];
  for (size_t k = tail + threadIdx.x; k < len; k += kThreads) dst[k] = sb[k];
  uint32_t* dw = reinterpret_cast<uint32_t*>(dst + head);
  const unsigned sh = 8u * (unsigned)head;
  for (size_t m = threadIdx.x; m < nw; m += kThreads) dw[m] = __funnelshift_r(src[m], src[m + 1], sh);
}

__device__ __forceinline__ void block_zero(uint8_t* p, size_t len) {
  for (size_t k = threadIdx.x; k < len; k += kThreads) p[k] = 0;
}

__device__ __forceinline__ uint64_t block_sum64(uint64_t v, uint64_t* red) {
  unsigned long long s = v;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  uint64_t t = 0;
  for (int k = 0; k < kWarps; ++k) t += red[k];
  __syncthreads();
  return t;
}

// ---------------------------------------------------------------- frame pieces
// Finite minimum and maximum of the chunk (min/max are exact in any order; 16-byte loads for
// float32), +-Inf when it has no finite value; the same for every thread of the block.
template <int D>
__device__ void chunk_range(const uint8_t* in, uint64_t n, float* rmin, float* rmax, float* lo,
                            float* hi) {
  const int tid = threadIdx.x;
  float mn = lc::u2f(0x7f800000u), mx = -mn;
  uint64_t i0 = 0;
  if (D == lc::kF32 && ((uintptr_t)in & 15) == 0) {
    const float4* in4 = reinterpret_cast<const float4*>(in);
    const uint64_t n4 = n / 4;
#pragma unroll 4
    for (uint64_t k = tid; k < n4; k += kThreads) {
      const float4 q = in4[k];
      const float v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (v[e] - v[e] == 0.0f) { mn = v[e] < mn ? v[e] : mn; mx = v[e] > mx ? v[e] : mx; }
    }
    i0 = n4 * 4;
  }
#pragma unroll 8
  for (uint64_t i = i0 + tid; i < n; i += kThreads) {
    const float v = Dev<D>::load(in, i);
    if (v - v == 0.0f) { mn = v < mn ? v : mn; mx = v > mx ? v : mx; }
  }
  block_minmax(mn, mx, rmin, rmax);
  *lo = mn;
  *hi = mx;
}

// Overflow: a zero frame and nbytes = -(bytes needed), as lc::encode_chunk.
__device__ void emit_overflow(uint8_t* out, size_t cap, size_t total, int32_t* nb) {
  block_zero(out, cap);
  if (threadIdx.x == 0) *nb = total > (size_t)INT32_MAX ? INT32_MIN : -(int32_t)total;
  __syncthreads();
}

// Zero tail, checksum and byte count of a frame of `total` bytes whose other bytes are written.
__device__ void finish_frame(uint8_t* out, size_t cap, size_t total, int32_t* nb, uint32_t* red) {
  block_zero(out + total, cap - total);
  __syncthreads();
  const uint32_t cs = block_checksum(out, total, red);
  if (threadIdx.x == 0) { lc::put_u32(out + 4, cs); *nb = (int32_t)total; }
  __syncthreads();
}

// Raw form: header and the values verbatim (the caller checked that it fits).
template <int D>
__device__ void emit_raw(const uint8_t* in, uint64_t rows, uint64_t dim, uint8_t* out, size_t cap,
                         int32_t* nb, uint32_t* red) {
  const size_t hdr = lc::header_bytes(rows, dim), len = (size_t)(rows * dim) * Dev<D>::kSize;
  if (threadIdx.x == 0) {
    out[0] = lc::kMagic;
    out[1] = (uint8_t)((lc::kVersion << 4) | lc::kFormRaw);
    out[2] = (uint8_t)D;
    out[3] = 0;
    lc::put_u32(out + 4, 0);
    size_t o = lc::kHeaderFixed;
    o += lc::put_varint(out + o, rows);
    lc::put_varint(out + o, dim);
  }
  block_copy(out + hdr, in, len);
  finish_frame(out, cap, hdr + len, nb, red);
}

// Header of a quantized frame up to n_outliers (and n_unique with a dictionary); thread 0.
__device__ void put_quant_header(uint8_t* out, int dtype, int mode, int flags, int bits,
                                 uint64_t rows, uint64_t dim, float eb_abs, float vmin,
                                 uint64_t n_out, uint64_t n_unique) {
  out[0] = lc::kMagic;
  out[1] = (uint8_t)((lc::kVersion << 4) | lc::kFormQuant);
  out[2] = (uint8_t)(dtype | (mode == lc::kAbs ? 4 : 0) | flags);
  out[3] = (uint8_t)bits;
  lc::put_u32(out + 4, 0);
  size_t o = lc::kHeaderFixed;
  o += lc::put_varint(out + o, rows);
  o += lc::put_varint(out + o, dim);
  lc::put_u32(out + o, lc::f2u(eb_abs)); o += 4;
  lc::put_u32(out + o, lc::f2u(vmin)); o += 4;
  o += lc::put_varint(out + o, n_out);
  if (flags & lc::kFlagDedup) lc::put_varint(out + o, n_unique);
}

// Outlier positions (pb bytes each) and values (verbatim) of the positions outl[0, n_out).
template <int D>
__device__ void write_outliers(const uint8_t* in, const uint32_t* outl, uint64_t n_out, int pb,
                               uint8_t* out, size_t pos_off, size_t val_off) {
  constexpr int isz = Dev<D>::kSize;
  for (uint64_t k = threadIdx.x; k < n_out; k += kThreads) {
    const uint32_t pos = outl[k];
    for (int b = 0; b < pb; ++b) out[pos_off + k * pb + b] = (uint8_t)(pos >> (8 * b));
    for (int b = 0; b < isz; ++b) out[val_off + k * isz + b] = in[(size_t)pos * isz + b];
  }
}

__device__ __forceinline__ uint32_t get_pos(const uint8_t* pos, uint64_t k, int pb) {
  uint32_t q = 0;
  for (int b = 0; b < pb; ++b) q |= (uint32_t)pos[k * pb + b] << (8 * b);
  return q;
}

// Outlier values copied to their positions (checked < n). A valid frame has increasing
// positions: one thread each; otherwise frame order by one thread (a repeated position keeps the
// last value, as on the CPU).
template <int D>
__device__ void scatter_outliers(uint8_t* out, const uint8_t* pos, const uint8_t* vals,
                                 uint64_t n_out, int pb, bool increasing) {
  constexpr int isz = Dev<D>::kSize;
  const int tid = threadIdx.x;
  if (increasing || tid == 0) {
    const uint64_t k0 = increasing ? (uint64_t)tid : 0, step = increasing ? kThreads : 1;
    for (uint64_t k = k0; k < n_out; k += step) {
      const uint32_t q = get_pos(pos, k, pb);
      for (int b = 0; b < isz; ++b) out[(size_t)q * isz + b] = vals[k * isz + b];
    }
  }
  __syncthreads();
}

// Checks outlier positions against n: *bad when one is out of range, *increasing when they are
// strictly increasing. Block-wide (every thread must call it).
__device__ void check_positions(const uint8_t* pos, uint64_t n_out, int pb, uint64_t n, bool* bad,
                                bool* increasing) {
  uint32_t b = 0, dec = 0;
  for (uint64_t k = threadIdx.x; k < n_out; k += kThreads) {
    const uint32_t q = get_pos(pos, k, pb);
    b |= (uint32_t)(q >= n);
    if (k + 1 < n_out && get_pos(pos, k + 1, pb) <= q) dec = 1;
  }
  *bad = __syncthreads_or(b) != 0;
  *increasing = __syncthreads_or(dec) == 0;
}

// ---------------------------------------------------------------- quantization
// Mirrors lc::encode_chunk_t (frame.h), steps 1-3, operation for operation: any change there
// must be made here too (tests/test_cuda.py compares CPU and GPU frames byte for byte).
struct QuantPlan {
  float vmin, eb_abs, step, inv, maxf;
  int bits;
  bool ok;
};

__device__ __forceinline__ QuantPlan plan_quant(float vmin, float vmax, float eb, int mode,
                                                int codec, uint64_t n) {
  if (n == 0 || !(vmin <= vmax)) { vmin = 0.0f; vmax = 0.0f; }  // no finite value
  vmin += 0.0f;
  vmax += 0.0f;
  QuantPlan p;
  const float range = vmax - vmin;
  p.vmin = vmin;
  p.eb_abs = mode == lc::kRel ? eb * range : eb;
  p.step = p.eb_abs * 2.0f;
  const bool constant = range == 0.0f;
  bool ok = codec != lc::kCodecRaw && n > 0 && eb >= 0.0f && lc::is_finite_bits(lc::f2u(eb)) &&
            lc::is_finite_bits(lc::f2u(p.eb_abs));
  p.inv = 0.0f;
  uint32_t maxcode = 0;
  if (ok && !constant) {
    ok = lc::is_finite_bits(lc::f2u(p.step)) && p.step > 0.0f;
    if (ok) {
      p.inv = 1.0f / p.step;
      float mc = lc::rint_nonneg(range * p.inv);
      ok = lc::is_finite_bits(lc::f2u(p.inv)) && mc < (float)(1u << lc::kMaxBits);
      if (ok) maxcode = (uint32_t)mc;
    }
  }
  p.ok = ok;
  p.maxf = (float)maxcode;
  p.bits = ok ? lc::bits_for(maxcode) : 0;
  return p;
}

// Code of one value; *ok false makes it an outlier (the code is still written, as on the CPU).
template <int D>
__device__ __forceinline__ uint32_t quantize_one(float v, const QuantPlan& p, bool* ok) {
  const bool fin = v - v == 0.0f;
  float qf = lc::rint_nonneg((v - p.vmin) * p.inv);
  qf = qf >= 0.0f ? qf : 0.0f;
  qf = qf <= p.maxf ? qf : p.maxf;
  qf = fin ? qf : 0.0f;
  const float rec = lc::Val<D>::round(p.vmin + qf * p.step);
  bool good = fin & lc::within_bound(v, rec, p.eb_abs);
  if (!good && fin) {  // x at a rounding midpoint: the neighbouring code may honour the bound
    const float q2 = qf + (v > rec ? 1.0f : -1.0f);
    if (q2 >= 0.0f && q2 <= p.maxf &&
        lc::within_bound(v, lc::Val<D>::round(p.vmin + q2 * p.step), p.eb_abs)) {
      *ok = true;
      return (uint32_t)q2;
    }
  }
  *ok = good;
  return (uint32_t)(int32_t)qf;
}

struct EncodeShared {
  uint32_t codes[kTile + kTile / 32];  // one tile of codes, row-padded (bit 31: outlier)
  uint32_t packed[kTileWords + 1];     // the tile's packed codes (+1 word read by funnel shift)
  uint32_t red[kWarps];
  float rmin[kWarps], rmax[kWarps];
  uint64_t n_out;
};

// Quantizes the chunk tile by tile and writes the packed codes at out[codes_off, ...) (clipped to
// cap). With `record`, outlier positions go to outl[] in increasing order and sh.n_out counts them.
template <int D>
__device__ void quantize_pack(const uint8_t* in, uint64_t n, const QuantPlan& p, uint8_t* out,
                              size_t cap, size_t codes_off, uint32_t* outl, bool record,
                              EncodeShared& sh) {
  const int tid = threadIdx.x, bits = p.bits;
  const size_t packed = lc::packed_bytes(n, bits);
  const size_t tile_bytes = (size_t)(kTile / 8) * bits;
  for (uint64_t base = 0; base < n; base += kTile) {
#pragma unroll 8
    for (int j = 0; j < kGroup; ++j) {
      const int L = j * kThreads + tid;  // coalesced loads
      const uint64_t i = base + L;
      uint32_t e = 0;
      if (i < n) {
        bool ok;
        uint32_t q = quantize_one<D>(Dev<D>::load(in, i), p, &ok);
        e = q | (ok ? 0u : 0x80000000u);
      }
      sh.codes[L + (L >> 5)] = e;
    }
    __syncthreads();
    // Thread tid packs values [32 tid, 32 tid + 32) of the tile into `bits` words.
    const uint32_t* mine = sh.codes + tid * (kGroup + 1);
    uint32_t* dst = sh.packed + tid * bits;
    uint32_t cnt = 0;
    uint64_t acc = 0;
    int nacc = 0, w = 0;
#pragma unroll 8
    for (int k = 0; k < kGroup; ++k) {
      const uint32_t e = mine[k];
      cnt += e >> 31;
      if (bits) {
        acc |= (uint64_t)(e & 0x7fffffffu) << nacc;
        nacc += bits;
        if (nacc >= 32) { dst[w++] = (uint32_t)acc; acc >>= 32; nacc -= 32; }
      }
    }
    if (record && __syncthreads_or(cnt != 0)) {
      uint32_t tot;
      const uint32_t ex = block_scan(cnt, sh.red, &tot);
      uint64_t o = sh.n_out + ex;
      const uint64_t g0 = base + (uint64_t)tid * kGroup;
      if (cnt)
        for (int k = 0; k < kGroup; ++k)
          if (mine[k] >> 31) outl[o++] = (uint32_t)(g0 + k);
      __syncthreads();  // every thread has read sh.n_out
      if (tid == 0) sh.n_out += tot;
    }
    __syncthreads();  // packed words complete
    const size_t rstart = (size_t)(base / kTile) * tile_bytes;
    size_t len = packed - rstart;
    if (len > tile_bytes) len = tile_bytes;
    smem_to_frame(out, cap, codes_off + rstart, len, sh.packed);
    __syncthreads();  // before the next tile reuses the shared buffers
  }
}

// Fixed-rate (codec "fixed") and raw (codec "raw", or data that cannot be quantized) frames,
// identical to lc::encode_chunk for those codecs.
template <int D>
__global__ void __launch_bounds__(kThreads)
encode_fixed_kernel(const uint8_t* __restrict__ x, const float* __restrict__ ebs, int64_t batch,
                    uint64_t rows, uint64_t dim, int mode, int codec, uint8_t* __restrict__ frames,
                    size_t cap, int32_t* __restrict__ nbytes, uint8_t* ws, size_t ws_stride) {
  __shared__ EncodeShared sh;
  const int tid = threadIdx.x;
  const uint64_t n = rows * dim;
  constexpr int isz = Dev<D>::kSize;
  const size_t hdr = lc::header_bytes(rows, dim);
  uint32_t* outl = reinterpret_cast<uint32_t*>(ws + (size_t)blockIdx.x * ws_stride);
  for (int64_t c = blockIdx.x; c < batch; c += gridDim.x) {
    const uint8_t* in = x + (size_t)c * n * isz;
    uint8_t* out = frames + (size_t)c * cap;
    // 1. Range over finite values.
    float mn, mx;
    chunk_range<D>(in, n, sh.rmin, sh.rmax, &mn, &mx);
    const QuantPlan p = plan_quant(mn, mx, ebs[c], mode, codec, n);
    const size_t raw = hdr + (size_t)n * isz;
    bool use_raw = !p.ok;
    size_t codes_off = hdr + 8 + 1, pos_off = 0, val_off = 0, total = raw;
    uint64_t n_out = 0;
    const int pb = lc::pos_bytes_for(n);
    if (p.ok) {
      // 2. Quantize, verify and pack; the codes section follows a one-byte outlier count
      //    unless the count needs more, in which case the codes are written again further on.
      if (tid == 0) sh.n_out = 0;
      __syncthreads();
      quantize_pack<D>(in, n, p, out, cap, codes_off, outl, true, sh);
      n_out = sh.n_out;
      const int nv = lc::varint_size(n_out);
      if (nv != 1) {
        codes_off = hdr + 8 + nv;
        quantize_pack<D>(in, n, p, out, cap, codes_off, outl, false, sh);
      }
      pos_off = codes_off + lc::packed_bytes(n, p.bits);
      val_off = pos_off + (size_t)n_out * pb;
      total = val_off + (size_t)n_out * isz;
      if (total > cap && raw <= cap) use_raw = true;  // as the CPU: raw when only raw fits
    }
    if (use_raw) total = raw;
    if (total > cap) {
      emit_overflow(out, cap, total, nbytes + c);
      continue;
    }
    if (use_raw) {
      emit_raw<D>(in, rows, dim, out, cap, nbytes + c, sh.red);
      continue;
    }
    // 3. Header, outlier section, zero tail, checksum.
    if (tid == 0) put_quant_header(out, D, mode, 0, p.bits, rows, dim, p.eb_abs, p.vmin, n_out, 0);
    write_outliers<D>(in, outl, n_out, pb, out, pos_off, val_off);
    finish_frame(out, cap, total, nbytes + c, sh.red);
  }
}

// ---------------------------------------------------------------- dictionary forms: encoder
// Workspace of one block of encode_dict_kernel, in scratch memory.
struct DictWs {
  uint32_t* codes;    // [n] quantization code of every value
  uint32_t* outl;     // [n] outlier positions, increasing
  int32_t* table;     // [hs] hash table of code rows (when too large for shared memory)
  uint32_t* rep;      // [rows] hash slot of each row, then the smallest row with its codes
  uint32_t* dnum;     // [rows] dictionary number of each first-occurrence row
  uint32_t* index;    // [rows] dictionary number of each row
  uint32_t* drow;     // [rows] first row of each dictionary entry
  uint64_t* keys;     // [kMaxHuffSymbols] sort keys of large alphabets; huff_lengths' `sorted`
  uint32_t* fsorted;  // [kMaxHuffSymbols] frequencies in ascending key order
  uint32_t* A;        // [kMaxHuffSymbols] huff_lengths' scratch
  uint32_t* enc_a;    // [kMaxHuffSymbols] codes section: code | length << 16 per symbol
  uint32_t* enc_b;    // [kMaxHuffSymbols] index section
  uint16_t* symof;    // [kMaxHuffSymbols] symbol of each sorted key
  uint16_t* code;     // [kMaxHuffSymbols] canonical codes
  uint8_t* lsorted;   // [kMaxHuffSymbols] lengths in key order
  uint8_t* len;       // [kMaxHuffSymbols] lengths by symbol
  uint32_t hs;        // hash table size (a power of two >= 2 rows)
};

LC_HD size_t dict_ws_bytes(uint64_t rows, uint64_t dim) {
  const uint64_t n = rows * dim, S = lc::kMaxHuffSymbols;
  return lc::align16(4 * n) * 2 + lc::align16(4 * (size_t)lc::hash_size_for(rows)) +
         lc::align16(4 * rows) * 4 + lc::align16(8 * S) + lc::align16(4 * S) * 4 +
         lc::align16(2 * S) * 2 + lc::align16(S) * 2;
}

LC_HD DictWs carve_dict_ws(uint8_t* base, uint64_t rows, uint64_t dim) {
  const uint64_t n = rows * dim, S = lc::kMaxHuffSymbols;
  DictWs w;
  size_t o = 0;
  w.hs = lc::hash_size_for(rows);
  w.codes = (uint32_t*)(base + o); o += lc::align16(4 * n);
  w.outl = (uint32_t*)(base + o); o += lc::align16(4 * n);
  w.table = (int32_t*)(base + o); o += lc::align16(4 * (size_t)w.hs);
  w.rep = (uint32_t*)(base + o); o += lc::align16(4 * rows);
  w.dnum = (uint32_t*)(base + o); o += lc::align16(4 * rows);
  w.index = (uint32_t*)(base + o); o += lc::align16(4 * rows);
  w.drow = (uint32_t*)(base + o); o += lc::align16(4 * rows);
  w.keys = (uint64_t*)(base + o); o += lc::align16(8 * S);
  w.fsorted = (uint32_t*)(base + o); o += lc::align16(4 * S);
  w.A = (uint32_t*)(base + o); o += lc::align16(4 * S);
  w.enc_a = (uint32_t*)(base + o); o += lc::align16(4 * S);
  w.enc_b = (uint32_t*)(base + o); o += lc::align16(4 * S);
  w.symof = (uint16_t*)(base + o); o += lc::align16(2 * S);
  w.code = (uint16_t*)(base + o); o += lc::align16(2 * S);
  w.lsorted = base + o; o += lc::align16(S);
  w.len = base + o; o += lc::align16(S);
  return w;
}

struct DictShared {
  uint32_t hist[lc::kMaxHuffSymbols];  // histogram; then the code table of the section written
  union {
    uint32_t masks[kThreads];          // outlier flags of one quantization tile, 32 per word
    uint32_t stage[kStageWords];       // bit-stream words of one stream tile
    uint64_t keys[kSortShared];        // Huffman sort keys of small alphabets
  } u;
  static_assert(kStageWords <= 2 * kSortShared, "the stream stage stays within the union");
  uint32_t seg_start[kRunTile / lc::kSeg + 1];
  uint32_t red[kWarps];
  uint64_t red64[kWarps];
  float rmin[kWarps], rmax[kWarps];
  uint64_t n_out;
  int flag;
};

// Codes of every value into codes[] and the outlier positions, increasing, into outl[];
// sh.n_out counts them. Warp w's ballot of iteration j flags values 32 (j * kWarps + w) + lane of
// the tile, so thread t then owns the flags of values [32 t, 32 t + 32) for the ordered scan.
template <int D>
__device__ void quantize_codes(const uint8_t* in, uint64_t n, const QuantPlan& p, uint32_t* codes,
                               uint32_t* outl, DictShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) sh.n_out = 0;
  __syncthreads();
  for (uint64_t base = 0; base < n; base += kTile) {
#pragma unroll 4
    for (int j = 0; j < kGroup; ++j) {
      const uint64_t i = base + (uint64_t)j * kThreads + tid;
      bool bad = false;
      if (i < n) {
        bool ok;
        codes[i] = quantize_one<D>(Dev<D>::load(in, i), p, &ok);
        bad = !ok;
      }
      const uint32_t m = __ballot_sync(0xffffffffu, bad);
      if (lane == 0) sh.u.masks[j * kWarps + warp] = m;
    }
    __syncthreads();
    uint32_t m = sh.u.masks[tid];
    const uint32_t cnt = (uint32_t)__popc(m);
    if (__syncthreads_or(cnt != 0)) {
      uint32_t tot;
      const uint32_t ex = block_scan(cnt, sh.red, &tot);
      uint64_t o = sh.n_out + ex;
      const uint64_t g0 = base + 32 * (uint64_t)tid;
      while (m) {
        outl[o++] = (uint32_t)(g0 + (uint32_t)(__ffs((int)m) - 1));
        m &= m - 1;
      }
      __syncthreads();  // every thread has read sh.n_out
      if (tid == 0) sh.n_out += tot;
    }
    __syncthreads();
  }
}

__device__ __forceinline__ uint32_t code_row_hash(const uint32_t* row, uint32_t dim) {
  uint32_t h = 0x9E3779B9u ^ dim;
  for (uint32_t j = 0; j < dim; ++j) h = (h ^ row[j]) * 0x01000193u + (h >> 15);
  return lc::fmix32(h);
}

__device__ __forceinline__ bool code_rows_equal(const uint32_t* a, const uint32_t* b, uint32_t dim) {
  for (uint32_t j = 0; j < dim; ++j)
    if (a[j] != b[j]) return false;
  return true;
}

// Distinct code rows in first-occurrence order: w.index[r] (dictionary number of row r) and
// w.drow[d] (first row of entry d); returns how many. Lock-free: a row claims an empty slot of
// its hash chain with atomicCAS or, finding an equal row there, lowers it to itself with
// atomicMin, so each slot ends with the smallest row of one distinct code row.
// The table lives in shared memory (`smem`, kMaxHuffSymbols words, idle at this point) when it
// fits (rows <= 2048), else in scratch (atomics at L2, read back past L1 with __ldcg).
__device__ uint32_t dedup_code_rows(const DictWs& w, uint32_t rows, uint32_t dim, uint32_t* red,
                                    uint32_t* smem) {
  const int tid = threadIdx.x;
  const uint32_t mask = w.hs - 1;
  const bool shared_table = w.hs <= (uint32_t)lc::kMaxHuffSymbols;
  int32_t* table = shared_table ? reinterpret_cast<int32_t*>(smem) : w.table;
  for (uint32_t k = tid; k < w.hs; k += kThreads) table[k] = -1;
  __syncthreads();
  for (uint32_t r = tid; r < rows; r += kThreads) {
    const uint32_t* row = w.codes + (size_t)r * dim;
    uint32_t slot = code_row_hash(row, dim) & mask;
    for (;;) {
      const int e = atomicCAS(&table[slot], -1, (int)r);
      if (e < 0) break;
      if (code_rows_equal(w.codes + (size_t)e * dim, row, dim)) {
        atomicMin(&table[slot], (int)r);
        break;
      }
      slot = (slot + 1) & mask;
    }
    w.rep[r] = slot;
  }
  __syncthreads();
  // Same rows per thread as above and below: rep[r] is only touched by its own thread here.
  for (uint32_t r = tid; r < rows; r += kThreads)
    w.rep[r] = (uint32_t)(shared_table ? table[w.rep[r]] : __ldcg(&table[w.rep[r]]));
  uint32_t nu = 0;
  for (uint32_t base = 0; base < rows; base += kThreads) {
    const uint32_t r = base + tid;
    const bool first = r < rows && w.rep[r] == r;
    uint32_t tot;
    const uint32_t ex = block_scan(first ? 1u : 0u, red, &tot);
    if (first) {
      w.dnum[r] = nu + ex;
      w.drow[nu + ex] = r;
    }
    nu += tot;
  }
  __syncthreads();
  for (uint32_t r = tid; r < rows; r += kThreads) w.index[r] = w.dnum[w.rep[r]];
  __syncthreads();
  return nu;
}

// Symbol sources of the sections, read sequentially from any start.
struct DictCodes {  // codes of dictionary entry d = codes of row drow[d], entry after entry
  const uint32_t* codes;
  const uint32_t* drow;
  uint32_t dim;
  const uint32_t* row;
  uint32_t d, j;
  __device__ void seek(uint64_t i) {
    d = (uint32_t)(i / dim);
    j = (uint32_t)(i - (uint64_t)d * dim);
    row = codes + (size_t)drow[d] * dim;
  }
  __device__ uint32_t next() {
    if (j == dim) { j = 0; ++d; row = codes + (size_t)drow[d] * dim; }
    return row[j++];
  }
};
struct Flat {  // sym[i]
  const uint32_t* sym;
  const uint32_t* q;
  __device__ void seek(uint64_t i) { q = sym + i; }
  __device__ uint32_t next() { return *q++; }
};

// Ascending sort of keys[0, P) (P a power of two) by the block.
__device__ void block_bitonic(uint64_t* keys, uint32_t P) {
  for (uint32_t k = 2; k <= P; k <<= 1)
    for (uint32_t j = k >> 1; j > 0; j >>= 1) {
      for (uint32_t i = threadIdx.x; i < P; i += kThreads) {
        const uint32_t l = i ^ j;
        if (l > i) {
          const uint64_t a = keys[i], b = keys[l];
          if ((a > b) == ((i & k) == 0)) { keys[i] = b; keys[l] = a; }
        }
      }
      __syncthreads();
    }
}

// lc::plan_section by the block: Huffman code table (code | length << 16) into enc[] and the
// section size, Huffman when smaller than bit-packing at `bits` bits. The lengths are frame.h's:
// huff_lengths runs on the frequencies in ascending (freq, symbol) order, which its own sort
// leaves as they are (keys are distinct), and the lengths go back to their symbols.
template <class Cur>
__device__ lc::SectionPlan plan_section_dev(Cur cur, uint64_t count, int nsym, int bits,
                                            bool allow_huff, uint32_t* enc, DictShared& sh,
                                            const DictWs& w) {
  lc::SectionPlan p = {false, lc::packed_bytes(count, bits)};
  if (!allow_huff || count == 0 || nsym < 2 || nsym > lc::kMaxHuffSymbols) return p;
  const int tid = threadIdx.x;
  for (int s = tid; s < nsym; s += kThreads) sh.hist[s] = 0;
  __syncthreads();
  for (uint64_t i0 = (uint64_t)tid * kRun; i0 < count; i0 += kRunTile) {
    cur.seek(i0);
    const uint64_t m = count - i0 < (uint64_t)kRun ? count - i0 : (uint64_t)kRun;
    for (uint64_t k = 0; k < m; ++k) atomicAdd(&sh.hist[cur.next()], 1u);
  }
  __syncthreads();
  uint32_t P = 2;
  while (P < (uint32_t)nsym) P <<= 1;
  uint64_t* keys = P <= (uint32_t)kSortShared ? sh.u.keys : w.keys;
  uint32_t used = 0;
  for (uint32_t k = tid; k < P; k += kThreads) {
    const uint32_t f = k < (uint32_t)nsym ? sh.hist[k] : 0u;
    keys[k] = f ? ((uint64_t)f << 16) | k : ~(uint64_t)0;
    used += f != 0;
  }
  const uint32_t n_used = block_sum(used, sh.red);
  block_bitonic(keys, P);
  for (uint32_t k = tid; k < n_used; k += kThreads) {
    w.fsorted[k] = (uint32_t)(keys[k] >> 16);
    w.symof[k] = (uint16_t)(keys[k] & 0xffffu);
  }
  for (int s = tid; s < nsym; s += kThreads) w.len[s] = 0;
  __syncthreads();
  if (tid == 0) lc::huff_lengths(w.fsorted, (int)n_used, w.lsorted, w.keys, w.A);
  __syncthreads();
  for (uint32_t k = tid; k < n_used; k += kThreads) w.len[w.symof[k]] = w.lsorted[k];
  __syncthreads();
  if (tid == 0) {
    int ml = 0;
    sh.flag = lc::huff_codes(w.len, nsym, w.code, &ml) ? 1 : 0;
  }
  __syncthreads();
  const bool ok = sh.flag != 0;
  uint64_t tb = 0;
  for (int s = tid; s < nsym; s += kThreads) {
    tb += (uint64_t)sh.hist[s] * w.len[s];
    enc[s] = (uint32_t)w.code[s] | ((uint32_t)w.len[s] << 16);
  }
  const uint64_t total_bits = block_sum64(tb, sh.red64);
  const size_t b = lc::varint_size((uint64_t)nsym) + (size_t)(nsym + 1) / 2 +
                   2 * lc::segments_for(count) + (size_t)((total_bits + 7) / 8);
  if (ok && b < p.bytes) { p.huff = true; p.bytes = b; }
  return p;
}

// Writes count symbols from `cur` as one LSB-first bit stream at out[off, ...) (padded to a
// byte): with enc, symbol s is the code enc[s] & 0xffff of enc[s] >> 16 bits (Huffman), else s
// itself in `bits` bits (bit-packed, as lc::write_packed). With seg_off != kNoSeg, the u16 bit
// length of each kSeg-symbol segment goes to out[seg_off + 2k] (lc::write_huff).
template <class Cur>
__device__ void write_stream(uint8_t* out, size_t cap, size_t off, uint64_t count, Cur cur,
                             const uint32_t* enc, int bits, size_t seg_off, DictShared& sh) {
  const int tid = threadIdx.x;
  uint32_t* stage = sh.u.stage;
  for (int k = tid; k < kStageWords; k += kThreads) stage[k] = 0;
  __syncthreads();
  uint32_t cb = 0;     // bits of stage[0] written by earlier tiles
  uint64_t wbase = 0;  // stream word held by stage[0]
  const uint64_t nseg = seg_off == kNoSeg ? 0 : lc::segments_for(count);
  for (uint64_t t0 = 0; t0 < count; t0 += kRunTile) {
    const uint64_t i0 = t0 + (uint64_t)tid * kRun;
    // Huffman: code | length << 24 (codes of at most 12 bits); bit-packed: the symbol itself
    // (row indices may need up to 31 bits), `bits` long.
    uint32_t cv[kRun];
    uint32_t nb = 0;
    const uint32_t nlive = i0 < count ? (uint32_t)(count - i0 < (uint64_t)kRun ? count - i0 : kRun) : 0u;
    if (i0 < count) cur.seek(i0);
#pragma unroll
    for (int k = 0; k < kRun; ++k) {
      uint32_t e = 0;
      if ((uint32_t)k < nlive) {
        const uint32_t s = cur.next();
        if (enc) {
          const uint32_t h = enc[s];
          e = (h & 0xffffu) | ((h >> 16) << 24);
        } else {
          e = s;
        }
      }
      cv[k] = e;
      nb += enc ? e >> 24 : ((uint32_t)k < nlive ? (uint32_t)bits : 0u);
    }
    uint32_t tot;
    const uint32_t ex = block_scan(nb, sh.red, &tot);
    if (nseg && (tid * kRun) % lc::kSeg == 0) sh.seg_start[tid * kRun / lc::kSeg] = ex;
    if (nseg && tid == 0) sh.seg_start[kRunTile / lc::kSeg] = tot;
    const uint32_t pos = cb + ex;
    uint32_t wi = pos >> 5, nacc = pos & 31;
    uint64_t acc = 0;
#pragma unroll
    for (int k = 0; k < kRun; ++k) {
      acc |= (uint64_t)(enc ? cv[k] & 0xffffffu : cv[k]) << nacc;
      nacc += enc ? cv[k] >> 24 : ((uint32_t)k < nlive ? (uint32_t)bits : 0u);
      if (nacc >= 32) {
        if ((uint32_t)acc) atomicOr(&stage[wi], (uint32_t)acc);
        ++wi;
        acc >>= 32;
        nacc -= 32;
      }
    }
    if ((uint32_t)acc) atomicOr(&stage[wi], (uint32_t)acc);
    __syncthreads();
    if (nseg && tid < kRunTile / lc::kSeg) {
      const uint64_t sg = t0 / lc::kSeg + (uint64_t)tid;
      if (sg < nseg) {
        const uint32_t L = sh.seg_start[tid + 1] - sh.seg_start[tid];
        out[seg_off + 2 * sg] = (uint8_t)L;
        out[seg_off + 2 * sg + 1] = (uint8_t)(L >> 8);
      }
    }
    const uint32_t end = cb + tot, nfull = end >> 5;
    smem_to_frame(out, cap, off + 4 * wbase, 4 * (size_t)nfull, stage);
    __syncthreads();
    const uint32_t carry = stage[nfull];
    __syncthreads();
    for (uint32_t k = tid; k <= nfull + 1 && k < (uint32_t)kStageWords; k += kThreads)
      stage[k] = k == 0 ? carry : 0u;
    __syncthreads();
    cb = end & 31;
    wbase += nfull;
  }
  if (cb) smem_to_frame(out, cap, off + 4 * wbase, (cb + 7) / 8, stage);
  __syncthreads();
}

// A Huffman section (lc::write_huff): nsym, the 4-bit lengths, segment lengths, the stream.
template <class Cur>
__device__ void write_huff_section(uint8_t* out, size_t cap, size_t o, uint64_t count, int nsym,
                                   const uint32_t* enc, Cur cur, DictShared& sh) {
  const int tid = threadIdx.x;
  const int vs = lc::varint_size((uint64_t)nsym), nib = (nsym + 1) / 2;
  if (tid == 0) lc::put_varint(out + o, (uint64_t)nsym);
  for (int s = tid; s < nib; s += kThreads) {
    const uint32_t lo = enc[2 * s] >> 16, hi = 2 * s + 1 < nsym ? enc[2 * s + 1] >> 16 : 0u;
    out[o + vs + s] = (uint8_t)(lo | (hi << 4));
  }
  for (int s = tid; s < nsym; s += kThreads) sh.hist[s] = enc[s];
  __syncthreads();
  const size_t seg_off = o + vs + nib;
  write_stream(out, cap, seg_off + 2 * lc::segments_for(count), count, cur, sh.hist, 0, seg_off, sh);
}

// "auto", "dedup" and "entropy": the frame lc::encode_chunk_t writes, by one block per chunk.
template <int D>
__global__ void __launch_bounds__(kThreads, kDictMinBlocks)
encode_dict_kernel(const uint8_t* __restrict__ x, const float* __restrict__ ebs, int64_t batch,
                   uint64_t rows, uint64_t dim, int mode, int codec, uint8_t* __restrict__ frames,
                   size_t cap, int32_t* __restrict__ nbytes, uint8_t* ws, size_t ws_stride) {
  __shared__ DictShared sh;
  const int tid = threadIdx.x;
  const uint64_t n = rows * dim;
  constexpr int isz = Dev<D>::kSize;
  const size_t hdr = lc::header_bytes(rows, dim);
  const size_t raw = hdr + (size_t)n * isz;
  const DictWs w = carve_dict_ws(ws + (size_t)blockIdx.x * ws_stride, rows, dim);
  const bool allow_huff = codec == lc::kCodecAuto || codec == lc::kCodecEntropy;
  for (int64_t c = blockIdx.x; c < batch; c += gridDim.x) {
    const uint8_t* in = x + (size_t)c * n * isz;
    uint8_t* out = frames + (size_t)c * cap;
    float mn, mx;
    chunk_range<D>(in, n, sh.rmin, sh.rmax, &mn, &mx);
    const QuantPlan p = plan_quant(mn, mx, ebs[c], mode, codec, n);
    if (!p.ok) {  // raw (lossless) or overflow
      if (raw > cap) emit_overflow(out, cap, raw, nbytes + c);
      else emit_raw<D>(in, rows, dim, out, cap, nbytes + c, sh.red);
      continue;
    }
    // 1. Codes and outliers of every value.
    quantize_codes<D>(in, n, p, w.codes, w.outl, sh);
    const uint64_t n_out = sh.n_out;
    // 2. Distinct code rows, first-occurrence order.
    const uint32_t nu = dedup_code_rows(w, (uint32_t)rows, (uint32_t)dim, sh.red, sh.hist);
    const uint64_t nd = (uint64_t)nu * dim;
    const bool identity = nu == rows;
    // 3. Sections: dictionary codes, row indices.
    const int bits = p.bits, nsym = (int)p.maxf + 1, ibits = lc::bits_for(nu - 1);
    const DictCodes dc = {w.codes, w.drow, (uint32_t)dim, nullptr, 0, 0};
    const Flat fi = {w.index, nullptr};
    const lc::SectionPlan pc = plan_section_dev(dc, nd, nsym, bits, allow_huff, w.enc_a, sh, w);
    lc::SectionPlan pi = {false, 0};
    if (!identity)
      pi = plan_section_dev(fi, rows, (int)nu, ibits, allow_huff && 4 * (uint64_t)nu <= rows,
                            w.enc_b, sh, w);
    // 4. Sizes and the form, as lc::encode_chunk_t.
    const int pb = lc::pos_bytes_for(n);
    const size_t out_bytes = (size_t)n_out * (size_t)(pb + isz);
    const size_t qhdr = hdr + 8 + lc::varint_size(n_out);
    const size_t fixed_bytes = qhdr + lc::packed_bytes(n, bits) + out_bytes;
    const size_t dict_bytes =
        qhdr + pc.bytes + out_bytes + (identity ? 0 : (size_t)lc::varint_size(nu) + pi.bytes);
    int kind = 2;  // 0 raw, 1 fixed-rate, 2 dictionary
    size_t best = dict_bytes;
    if (codec == lc::kCodecAuto) {
      kind = 0;
      best = raw;
      if (fixed_bytes < best) { kind = 1; best = fixed_bytes; }
      if (dict_bytes < best) { kind = 2; best = dict_bytes; }
    }
    if (best > cap && raw <= cap) { kind = 0; best = raw; }
    if (best > cap) {
      emit_overflow(out, cap, best, nbytes + c);
      continue;
    }
    if (kind == 0) {
      emit_raw<D>(in, rows, dim, out, cap, nbytes + c, sh.red);
      continue;
    }
    // 5. The frame. A dictionary form with every row distinct and packed codes is the
    //    fixed-rate frame.
    const bool dedup = kind == 2 && !identity;
    const bool ch = kind == 2 && pc.huff;
    const bool ih = dedup && pi.huff;
    const int flags = (dedup ? lc::kFlagDedup : 0) | (ch ? lc::kFlagCodesHuff : 0) |
                      (ih ? lc::kFlagIndexHuff : 0);
    if (tid == 0) put_quant_header(out, D, mode, flags, bits, rows, dim, p.eb_abs, p.vmin, n_out, nu);
    size_t o = qhdr + (dedup ? lc::varint_size(nu) : 0);
    if (kind == 1) {
      write_stream(out, cap, o, n, Flat{w.codes, nullptr}, nullptr, bits, kNoSeg, sh);
      o += lc::packed_bytes(n, bits);
    } else {
      if (ch) write_huff_section(out, cap, o, nd, nsym, w.enc_a, dc, sh);
      else write_stream(out, cap, o, nd, dc, nullptr, bits, kNoSeg, sh);
      o += pc.bytes;
    }
    if (dedup) {
      if (ih) write_huff_section(out, cap, o, rows, (int)nu, w.enc_b, fi, sh);
      else write_stream(out, cap, o, rows, fi, nullptr, ibits, kNoSeg, sh);
      o += pi.bytes;
    }
    write_outliers<D>(in, w.outl, n_out, pb, out, o, o + (size_t)n_out * pb);
    finish_frame(out, cap, best, nbytes + c, sh.red);
  }
}

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

// lc::parse_header with the checksum computed beforehand by the block (mirrors it line by line),
// then the prefix of lc::decode_frame_t that tells raw and fixed-rate frames from the others.
template <int D>
__device__ FastFrame fast_parse(const uint8_t* f, int64_t nbytes, size_t cap, uint64_t rows,
                                uint64_t dim, uint32_t checksum) {
  FastFrame F;
  F.kind = kKindError;
  F.bits = 0;
  F.base = F.step = 0.0f;
  F.n_out = 0;
  F.src_off = F.pos_off = F.val_off = 0;
  F.n_unique = 0;
  F.dedup = F.codes_huff = F.index_huff = false;
  lc::FrameHeader h;
  lc::Reader r = {nullptr, nullptr, true};
  int32_t st = lc::kOk;
  if (nbytes < 0) st = lc::kOverflow;
  else if ((uint64_t)nbytes > cap || nbytes < lc::kHeaderFixed + 2) st = lc::kTruncated;
  else if (f[0] != lc::kMagic) st = lc::kBadMagic;
  else if ((f[1] >> 4) != lc::kVersion) st = lc::kBadVersion;
  else if (lc::get_u32(f + 4) != checksum) st = lc::kBadChecksum;
  else {
    h.form = f[1] & 15;
    const uint8_t flags = f[2];
    h.dtype = flags & 3;
    h.mode = (flags >> 2) & 1;
    h.dedup = (flags & lc::kFlagDedup) != 0;
    h.codes_huff = (flags & lc::kFlagCodesHuff) != 0;
    h.index_huff = (flags & lc::kFlagIndexHuff) != 0;
    h.bits = f[3];
    if (h.form > lc::kFormQuant || h.dtype > lc::kF16 || (flags & 0xc0) || h.bits > lc::kMaxBits)
      st = lc::kBadHeader;
    else if (h.form == lc::kFormRaw && ((flags & ~3) != 0 || h.bits != 0)) st = lc::kBadHeader;
    else {
      r.p = f + lc::kHeaderFixed;
      r.end = f + nbytes;
      r.ok = true;
      h.rows = r.varint(0x7fffffff);
      h.dim = r.varint(0x7fffffff);
      h.n_unique = h.rows;
      if (!r.ok) st = lc::kTruncated;
    }
  }
  const uint64_t n = rows * dim;
  constexpr int isz = Dev<D>::kSize;
  if (st == lc::kOk && (h.rows != rows || h.dim != dim || h.dtype != D)) st = lc::kShapeMismatch;
  if (st == lc::kOk && h.form == lc::kFormRaw) {
    const uint8_t* src = r.take((size_t)n * isz);
    if (!src) st = lc::kTruncated;
    else if (r.p != r.end) st = lc::kTrailingBytes;
    else { F.kind = kKindRaw; F.src_off = (size_t)(src - f); }
  } else if (st == lc::kOk) {
    h.eb_abs = lc::u2f(r.u32());
    h.base = lc::u2f(r.u32());
    h.n_outliers = r.varint(n);
    if (h.dedup) h.n_unique = r.varint(rows);
    if (!r.ok) st = lc::kTruncated;
    else if (!lc::is_finite_bits(lc::f2u(h.eb_abs)) || h.eb_abs < 0.0f ||
             !lc::is_finite_bits(lc::f2u(h.base)) || (h.dedup && (h.n_unique < 1 || n == 0)) ||
             (h.index_huff && !h.dedup))
      st = lc::kBadHeader;
    if (st == lc::kOk) {
      if (h.dedup || h.codes_huff) {
        F.kind = kKindGeneric;
        F.bits = h.bits;
        F.base = h.base;
        F.step = h.eb_abs * 2.0f;
        F.n_out = h.n_outliers;
        F.n_unique = h.n_unique;
        F.dedup = h.dedup;
        F.codes_huff = h.codes_huff;
        F.index_huff = h.index_huff;
        F.src_off = (size_t)(r.p - f);
      } else {
        const int pb = lc::pos_bytes_for(n);
        const uint8_t* sp = r.take(lc::packed_bytes(n, h.bits));
        const uint8_t* pos = sp ? r.take((size_t)h.n_outliers * pb) : nullptr;
        const uint8_t* vals = pos ? r.take((size_t)h.n_outliers * isz) : nullptr;
        if (!sp || !pos || !vals) st = lc::kTruncated;
        else if (r.p != r.end) st = lc::kTrailingBytes;
        else {
          F.kind = kKindFixed;
          F.bits = h.bits;
          F.base = h.base;
          F.step = h.eb_abs * 2.0f;
          F.n_out = h.n_outliers;
          F.src_off = (size_t)(sp - f);
          F.pos_off = (size_t)(pos - f);
          F.val_off = (size_t)(vals - f);
        }
      }
    }
  }
  F.status = st;
  return F;
}

struct DecodeShared {
  uint32_t words[kTileWords + 2];  // one tile of packed codes, word-aligned (+1 word of slack)
  uint32_t red[kWarps];
  FastFrame frame;
};

// One block per frame: header, checksum, and the whole decode of raw and fixed-rate frames;
// every frame's parsed header goes to info[c], and frames with a dictionary or Huffman sections
// (kind kKindGeneric) are left to decode_dict_kernel.
template <int D, bool kWrite>
__global__ void __launch_bounds__(kThreads)
decode_fast_kernel(const uint8_t* __restrict__ frames, const int32_t* __restrict__ nbytes,
                   int64_t batch, size_t cap, uint64_t rows, uint64_t dim, uint8_t* __restrict__ x,
                   int32_t* __restrict__ status, FastFrame* __restrict__ info) {
  __shared__ DecodeShared sh;
  const int tid = threadIdx.x;
  const uint64_t n = rows * dim;
  constexpr int isz = Dev<D>::kSize;
  for (int64_t c = blockIdx.x; c < batch; c += gridDim.x) {
    const uint8_t* f = frames + (size_t)c * cap;
    const int64_t nb = nbytes[c];
    uint8_t* out = kWrite ? x + (size_t)c * n * isz : nullptr;
    uint32_t cs = 0;
    if (nb >= lc::kHeaderFixed + 2 && (uint64_t)nb <= cap) cs = block_checksum(f, (size_t)nb, sh.red);
    if (tid == 0) sh.frame = fast_parse<D>(f, nb, cap, rows, dim, cs);
    __syncthreads();
    const FastFrame F = sh.frame;
    int32_t st = F.status;
    if (tid == 0) info[c] = F;
    if (F.kind == kKindGeneric) {
      __syncthreads();
      continue;
    }
    const int pb = lc::pos_bytes_for(n);
    bool increasing = true;
    if (F.kind == kKindFixed) {
      bool bad;
      check_positions(f + F.pos_off, F.n_out, pb, n, &bad, &increasing);
      if (bad) st = lc::kCorrupt;
    }
    if (tid == 0) status[c] = st;
    if (kWrite && st != lc::kOk) {
      for (uint64_t i = tid; i < n; i += kThreads) Dev<D>::store(out, i, lc::u2f(0x7fc00000u));
    } else if (kWrite && F.kind == kKindRaw) {
      block_copy(out, f + F.src_off, (size_t)n * isz);
    } else if (kWrite && F.kind == kKindFixed) {
      const int bits = F.bits;
      const uint32_t mask = bits ? (1u << bits) - 1u : 0u;
      const uint8_t* sp = f + F.src_off;
      const size_t packed = lc::packed_bytes(n, bits);
      const size_t tile_bytes = (size_t)(kTile / 8) * bits;
      for (uint64_t base = 0; base < n; base += kTile) {
        // Stage the tile's packed bytes as aligned words (bytes outside the section read as 0).
        const size_t rstart = (size_t)(base / kTile) * tile_bytes;
        size_t len = packed - rstart;
        if (len > tile_bytes) len = tile_bytes;
        const uint8_t* region = sp + rstart;
        const uint8_t* a0 = (const uint8_t*)((uintptr_t)region & ~(uintptr_t)3);
        const unsigned shift = (unsigned)(region - a0);
        const size_t nwords = (shift + len + 3) / 4;
        for (size_t m = tid; m < nwords; m += kThreads)
          sh.words[m] = load_word_guarded(a0 + 4 * m, region, region + len);
        if (tid == 0) sh.words[nwords] = 0;
        __syncthreads();
#pragma unroll 8
        for (int j = 0; j < kGroup; ++j) {
          const int L = j * kThreads + tid;
          const uint64_t i = base + L;
          if (i < n) {
            const uint32_t bo = shift * 8 + (uint32_t)L * bits;
            const uint64_t v = sh.words[bo >> 5] | ((uint64_t)sh.words[(bo >> 5) + 1] << 32);
            const uint32_t q = (uint32_t)(v >> (bo & 31)) & mask;
            Dev<D>::store(out, i, lc::Val<D>::round(F.base + (float)q * F.step));
          }
        }
        __syncthreads();
      }
      scatter_outliers<D>(out, f + F.pos_off, f + F.val_off, F.n_out, pb, increasing);
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
// dictionary values dv (rounded to the dtype, as lc::decode_frame_t's lut).
template <int D, bool kWrite>
struct EmitValue {
  uint8_t* out;
  float* dv;
  float base, step;
  __device__ void operator()(uint64_t i, uint32_t q) {
    if (!kWrite) return;
    const float v = lc::Val<D>::round(base + (float)q * step);
    if (out) Dev<D>::store(out, i, v);
    else dv[i] = v;
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
// Every Huffman segment is decoded by one thread with frame.h's segment cursor; a bit past the
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

// Frames with a dictionary or Huffman sections (info[c].kind == kKindGeneric): the rest of
// lc::decode_frame_t, one block per frame, same checks in the same order. Workspace per block:
// dictionary values (float) and row indices.
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
  float* dv = reinterpret_cast<float*>(wb);
  uint32_t* idx = reinterpret_cast<uint32_t*>(wb + lc::align16(4 * n));
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
      if (tid == 0) {
        lc::Reader& r = sh.r;
        const uint8_t* a = r.take((size_t)F.n_out * pb);
        const uint8_t* b = r.take((size_t)F.n_out * isz);
        sh.ok = (!a || !b) ? lc::kTruncated : r.p != r.end ? lc::kTrailingBytes : lc::kOk;
        sh.p0 = a;
        sh.p1 = b;
      }
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
          Dev<D>::store(out, i, dv[(size_t)idx[r] * d32 + (i - r * d32)]);
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

// ---------------------------------------------------------------- host side
#if !defined(LC_CUDA_EMULATION)
using lc::ffi_args::Chunks;

ffi::Error cuda_error(const char* op, cudaError_t e) {
  return ffi::Error::Internal(std::string(op) + ": CUDA error: " + cudaGetErrorString(e));
}

// Blocks for a grid-stride loop over `batch` chunks: as many as fit on the device at once.
template <typename Kernel>
cudaError_t resident_blocks(Kernel kernel, int threads, int64_t batch, int64_t* blocks) {
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);  // XLA makes the stream's device current
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
  if (e != cudaSuccess) return e;
  int64_t g = (int64_t)(sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
  *blocks = batch < g ? batch : g;
  return cudaSuccess;
}

size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

// Blocks of a kernel whose blocks each need ws_stride bytes of scratch: at most `budget` bytes.
int64_t cap_blocks(int64_t blocks, size_t ws_stride, size_t budget) {
  const int64_t by_mem = (int64_t)(budget / (ws_stride ? ws_stride : 1));
  if (blocks > by_mem) blocks = by_mem;
  return blocks < 1 ? 1 : blocks;
}

// Decoder workspace of one block of decode_dict_kernel: dictionary values, row indices.
size_t dict_dec_ws_bytes(uint64_t rows, uint64_t dim) {
  return align256(lc::align16(4 * rows * dim) + lc::align16(4 * rows));
}

// `bytes` of scratch starting at a 256-byte boundary. XLA's FFI scratch allocator rejects any
// alignment above 16 ("Unsupported alignment": Allocate returns nothing), so ask for 16 and
// round the pointer up inside a block 240 bytes larger.
uint8_t* allocate_aligned256(ffi::ScratchAllocator& scratch, size_t bytes) {
  auto ws = scratch.Allocate(bytes + 240, 16);
  if (!ws.has_value()) return nullptr;
  return reinterpret_cast<uint8_t*>(align256(reinterpret_cast<uintptr_t>(*ws)));
}

ffi::Error scratch_error(const char* op) {
  return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(op) + ": scratch allocation failed");
}

template <int D>
ffi::Error LaunchCompress(cudaStream_t stream, ffi::ScratchAllocator& scratch, const uint8_t* x,
                          const float* eb, int64_t batch, int64_t rows, int64_t dim, int mode,
                          int codec, uint8_t* frames, int64_t cap, int32_t* nbytes) {
  const char* op = "lc_compress";
  if (batch == 0) return ffi::Error::Success();
  const uint64_t n = (uint64_t)rows * (uint64_t)dim;
  int64_t blocks = 0;
  if (codec == lc::kCodecFixed || codec == lc::kCodecRaw) {
    cudaError_t e = resident_blocks(encode_fixed_kernel<D>, kThreads, batch, &blocks);
    if (e != cudaSuccess) return cuda_error(op, e);
    const size_t stride = align256(4 * (size_t)n);  // outlier positions of one chunk
    uint8_t* ws = allocate_aligned256(scratch, stride * (size_t)blocks + 256);
    if (ws == nullptr) return scratch_error(op);
    encode_fixed_kernel<D><<<(unsigned)blocks, kThreads, 0, stream>>>(
        x, eb, batch, rows, dim, mode, codec, frames, (size_t)cap, nbytes, ws, stride);
  } else {
    cudaError_t e = resident_blocks(encode_dict_kernel<D>, kThreads, batch, &blocks);
    if (e != cudaSuccess) return cuda_error(op, e);
    const size_t stride = align256(dict_ws_bytes(rows, dim));
    blocks = cap_blocks(blocks, stride, kDictEncodeScratch);
    uint8_t* ws = allocate_aligned256(scratch, stride * (size_t)blocks);
    if (ws == nullptr) return scratch_error(op);
    encode_dict_kernel<D><<<(unsigned)blocks, kThreads, 0, stream>>>(
        x, eb, batch, rows, dim, mode, codec, frames, (size_t)cap, nbytes, ws, stride);
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? ffi::Error::Success() : cuda_error(op, e);
}

// decode_fast_kernel over every frame, then decode_dict_kernel over those it left (kind
// kKindGeneric in the parsed headers it writes to scratch).
template <int D, bool kWrite>
ffi::Error LaunchDecode(cudaStream_t stream, ffi::ScratchAllocator& scratch, const uint8_t* frames,
                        const int32_t* nbytes, int64_t batch, int64_t cap, int64_t rows,
                        int64_t dim, uint8_t* x, int32_t* status, const char* op) {
  if (batch == 0) return ffi::Error::Success();
  int64_t blocks = 0, dict_blocks = 0;
  cudaError_t e = resident_blocks(decode_fast_kernel<D, kWrite>, kThreads, batch, &blocks);
  if (e == cudaSuccess) e = resident_blocks(decode_dict_kernel<D, kWrite>, kThreads, batch, &dict_blocks);
  if (e != cudaSuccess) return cuda_error(op, e);
  const size_t stride = dict_dec_ws_bytes(rows, dim);
  dict_blocks = cap_blocks(dict_blocks, stride, kDictDecodeScratch);
  const size_t info_bytes = align256(sizeof(FastFrame) * (size_t)batch);
  uint8_t* ws = allocate_aligned256(scratch, info_bytes + stride * (size_t)dict_blocks);
  if (ws == nullptr) return scratch_error(op);
  FastFrame* info = reinterpret_cast<FastFrame*>(ws);
  uint8_t* work = ws + info_bytes;
  decode_fast_kernel<D, kWrite><<<(unsigned)blocks, kThreads, 0, stream>>>(
      frames, nbytes, batch, (size_t)cap, rows, dim, x, status, info);
  decode_dict_kernel<D, kWrite><<<(unsigned)dict_blocks, kThreads, 0, stream>>>(
      frames, nbytes, batch, (size_t)cap, rows, dim, x, status, info, work, stride);
  e = cudaGetLastError();
  return e == cudaSuccess ? ffi::Error::Success() : cuda_error(op, e);
}

ffi::Error CompressImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                        ffi::Buffer<ffi::F32> eb, ffi::Result<ffi::Buffer<ffi::U8>> frames,
                        ffi::Result<ffi::Buffer<ffi::S32>> nbytes, int32_t mode, int32_t codec) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_compress(x, eb, frames, nbytes, mode, codec, c);
  if (err.failure()) return err;
  const uint8_t* in = static_cast<const uint8_t*>(x.untyped_data());
  uint8_t* out = frames->typed_data();
  int32_t* nb = nbytes->typed_data();
  const float* ebs = eb.typed_data();
  switch (c.dtype) {
    case lc::kBF16:
      return LaunchCompress<lc::kBF16>(stream, scratch, in, ebs, c.batch, c.rows, c.dim, mode, codec, out, c.cap, nb);
    case lc::kF16:
      return LaunchCompress<lc::kF16>(stream, scratch, in, ebs, c.batch, c.rows, c.dim, mode, codec, out, c.cap, nb);
    default:
      return LaunchCompress<lc::kF32>(stream, scratch, in, ebs, c.batch, c.rows, c.dim, mode, codec, out, c.cap, nb);
  }
}

template <bool kWrite>
ffi::Error DecodeAll(cudaStream_t stream, ffi::ScratchAllocator& scratch, const Chunks& c,
                     const uint8_t* f, const int32_t* nb, uint8_t* out, int32_t* status,
                     const char* op) {
  switch (c.dtype) {
    case lc::kBF16:
      return LaunchDecode<lc::kBF16, kWrite>(stream, scratch, f, nb, c.batch, c.cap, c.rows, c.dim, out, status, op);
    case lc::kF16:
      return LaunchDecode<lc::kF16, kWrite>(stream, scratch, f, nb, c.batch, c.cap, c.rows, c.dim, out, status, op);
    default:
      return LaunchDecode<lc::kF32, kWrite>(stream, scratch, f, nb, c.batch, c.cap, c.rows, c.dim, out, status, op);
  }
}

ffi::Error DecompressImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                          ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                          ffi::Result<ffi::AnyBuffer> x, ffi::Result<ffi::Buffer<ffi::S32>> status) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_decompress(frames, nbytes, x, status, c);
  if (err.failure()) return err;
  return DecodeAll<true>(stream, scratch, c, frames.typed_data(), nbytes.typed_data(),
                         static_cast<uint8_t*>(x->untyped_data()), status->typed_data(), "lc_decompress");
}

ffi::Error FrameStatusImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                           ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                           ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t rows, int64_t dim,
                           int32_t dtype) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_frame_status(frames, nbytes, status, rows, dim, dtype, c);
  if (err.failure()) return err;
  return DecodeAll<false>(stream, scratch, c, frames.typed_data(), nbytes.typed_data(), nullptr,
                          status->typed_data(), "lc_frame_status");
}

#endif  // !LC_CUDA_EMULATION
}  // namespace

#if !defined(LC_CUDA_EMULATION)
XLA_FFI_DEFINE_HANDLER_SYMBOL(LcCompressCuda, CompressImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // XLA's stream
                                  .Ctx<ffi::ScratchAllocator>()   // workspaces
                                  .Arg<ffi::AnyBuffer>()          // x: [..., rows, dim]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // error bound per chunk [...]
                                  .Ret<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
                                  .Ret<ffi::Buffer<ffi::S32>>()   // nbytes [...], < 0: overflow
                                  .Attr<int32_t>("mode")          // lc::Mode
                                  .Attr<int32_t>("codec"));       // lc::Codec

XLA_FFI_DEFINE_HANDLER_SYMBOL(LcDecompressCuda, DecompressImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
                                  .Arg<ffi::Buffer<ffi::S32>>()   // nbytes [...]
                                  .Ret<ffi::AnyBuffer>()          // x_hat [..., rows, dim]
                                  .Ret<ffi::Buffer<ffi::S32>>()); // status [...]

XLA_FFI_DEFINE_HANDLER_SYMBOL(LcFrameStatusCuda, FrameStatusImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
                                  .Arg<ffi::Buffer<ffi::S32>>()   // nbytes [...]
                                  .Ret<ffi::Buffer<ffi::S32>>()   // status [...]
                                  .Attr<int64_t>("rows")
                                  .Attr<int64_t>("dim")
                                  .Attr<int32_t>("dtype"));        // lc::DType
#endif  // !LC_CUDA_EMULATION
