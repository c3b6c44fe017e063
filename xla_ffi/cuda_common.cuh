// Building blocks of the CUDA kernels (encode_kernels.cuh, decode_kernels.cuh): launch
// geometry, typed aligned loads and stores, block-wide reductions and scans, frame copies,
// checksum, the raw form and the outlier sections. Device code only, no host API: the CPU
// emulation (tests/native/cuda_emu) compiles it with g++.
#pragma once

#include <stdint.h>

#include "format.h"
#include "quant.h"
#include "values.h"

namespace lc {
namespace gpu {

constexpr int kThreads = 128;                           // threads per block
constexpr int kGroup = 32;                              // values one thread packs
constexpr int kTile = kThreads * kGroup;                // values per tile (4096)
constexpr int kTileWords = kThreads * lc::kMaxBits;     // packed words of a tile at 24 bits
constexpr int kWarps = kThreads / 32;
// The multi-block encoder and decoder split a chunk at half tiles (kUnit values, 64 groups):
// groups never share a byte (32 values of b bits are 4b bytes), so a span of whole groups is
// packed and unpacked wherever it starts.
constexpr int kUnit = kTile / 2;
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
// Resident blocks per SM the fixed-rate encoder must allow (at most 64 registers a thread): the 16-byte loads of a tile keep 7 or 8 vectors per thread in flight, and
// without the bound the compiler spends registers on them that would cost blocks (sm_90, nvcc
// 13: 90-128 registers, 4-5 blocks). tools/sass_report.py shows the registers and spills.
constexpr int kFixedMinBlocks = 8;
// encode_fixed_finish_kernel runs one block per chunk only when the chunks are fewer than the
// resident blocks: 4 (up to 128 registers) keeps its rare codes rewrite free of spills (sm_80
// spilled 56-64 bytes at 8).
constexpr int kFinishMinBlocks = 4;
// The fast decoder: 8 (64 registers, 32 warps a SM): its loop indexes a chunk in 32 bits
// (chunks are < 2^31 values), without which the multi-block loop spilled 24-60 bytes at 8
// (sm_90, nvcc 13).
constexpr int kDecodeMinBlocks = 8;
constexpr size_t kNoSeg = ~(size_t)0;
static_assert(kRunTile % lc::kSeg == 0 && lc::kSeg % kRun == 0, "stream tiles hold whole segments");
static_assert(kGroup * kWarps == kThreads, "one outlier mask per thread");
static_assert((1 << lc::kMaxHuffLen) == lc::kMaxHuffSymbols, "decode table size");

// Kernel paths a test wants to see taken (tests/native/cuda_emu/emu.h counts them; nothing on
// the GPU).
enum GpuPath : int { kPathEncodeVec = 0, kPathEncodeScalar = 1, kPathDecodeVec = 2,
                     kPathDecodeScalar = 3, kPathDecodeMultiBlock = 4,
                     kPathEncodeMultiBlock = 5, kPathEncodeHalf = 6, kPathDecodeHalf = 7,
                     kPathHuffShared = 8, kPathDecodeFold = 9, kPathDecodeFoldBad = 10,
                     kPathHuffWarp = 11, kPathHuffWarpRounds = 12, kPathHuffThread = 13,
                     kNumPaths = 14 };
#ifdef LC_CUDA_EMULATION
static_assert(kNumPaths <= 16, "tests/native/cuda_emu/emu.h counts 16 paths");
#endif
#ifndef LC_GPU_PATH
#define LC_GPU_PATH(k) ((void)0)
#endif

// ---------------------------------------------------------------- typed values
template <int D> struct Dev;
template <> struct Dev<lc::kF32> {
  static constexpr int kSize = 4;
  static __device__ __forceinline__ float load(const uint8_t* p, uint64_t i) {
    return reinterpret_cast<const float*>(p)[i];
  }
  // Value e of a 16-byte vector of values (registers, little-endian as the GPU).
  static __device__ __forceinline__ float from_vec(const uint4& v, int e) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    return lc::u2f(w[e]);
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
  static __device__ __forceinline__ float from_vec(const uint4& v, int e) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    return lc::bf16_to_f32((uint16_t)(w[e >> 1] >> (16 * (e & 1))));
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
  static __device__ __forceinline__ float from_vec(const uint4& v, int e) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    return lc::f16_to_f32((uint16_t)(w[e >> 1] >> (16 * (e & 1))));
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

// The frame checksum (format.h: checksum_seed + checksum_word) computed by the whole block, at
// any alignment of the frame: its words 2 .. n/4 - 2 come from aligned word loads (two
// neighbours funnel-shifted when the frame is not 4-aligned; every byte read is the frame's),
// unrolled (2: 64 registers without spills) with no guard so that several loads are in flight; word 1 (the checksum field), the
// first and the last whole word and a partial last word go through the guarded path.
__device__ __forceinline__ uint32_t block_checksum(const uint8_t* f, size_t n, uint32_t* red) {
  uint32_t s = 0;
  const size_t words = (n + 3) / 4, whole = n / 4;
  const unsigned sh = (unsigned)((uintptr_t)f & 3);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(f - sh);  // aligned words
  const size_t mid_end = whole >= 1 ? whole - 1 : 0;              // words [2, mid_end)
  if (sh == 0) {
#pragma unroll 2
    for (size_t i = 2 + threadIdx.x; i < mid_end; i += kThreads)
      s += lc::fmix32(a[i] ^ (uint32_t)(i * 0x9E3779B9u));
  } else {
#pragma unroll 2
    for (size_t i = 2 + threadIdx.x; i < mid_end; i += kThreads)
      s += lc::fmix32(__funnelshift_r(a[i], a[i + 1], 8 * sh) ^ (uint32_t)(i * 0x9E3779B9u));
  }
  // the edge words [0, 2) and [mid_end, words), without striding over the middle
  const size_t e0 = words < 2 ? words : 2, e1 = mid_end > e0 ? mid_end : e0;
  for (size_t i = threadIdx.x; i < e0; i += kThreads) s += lc::checksum_word(f, n, i);
  for (size_t i = e1 + threadIdx.x; i < words; i += kThreads) s += lc::checksum_word(f, n, i);
  s = block_sum(s, red);
  return lc::checksum_seed(n) + s;
}

// This thread's share of the checksum terms (format.h checksum_word) of the words [lo, hi) of the
// n-byte frame f, at any alignment; the block's threads together cover every word once (no
// barrier: the shares of several calls add up). 16-byte loads over the words that fill whole
// granules when f is 16-aligned, 4-byte loads at their ends and when f is 4-aligned, two
// neighbours funnel-shifted else (every byte read is the frame's); word 1 (the checksum field),
// the last whole word of an unaligned frame and a partial last word through checksum_word.
__device__ __forceinline__ uint32_t frame_words_sum(const uint8_t* f, uint32_t n, uint32_t lo,
                                                    uint32_t hi) {
  uint32_t s = 0;
  const unsigned sh = (unsigned)((uintptr_t)f & 3);
  const uint32_t whole = n / 4, plain = sh == 0 || whole == 0 ? whole : whole - 1;
  const uint32_t a = lo > 2 ? lo : 2, b = hi < plain ? hi : plain;  // plain words [a, b)
  // the edge words [lo, a) and [b, hi) (all of [lo, hi) when a >= b), without striding over
  // the plain words between them
  const uint32_t e0 = a < hi ? a : hi, gap = (b > e0 ? b : e0) - e0;
  for (uint32_t t = lo + threadIdx.x; t < hi - gap; t += kThreads)  // one loop: one call site
    s += lc::checksum_word(f, n, t < e0 ? t : t + gap);
  if (a >= b) return s;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(f - sh);  // aligned words
  uint32_t v0 = b, v1 = b;  // 16-byte granules: words [v0, v1)
  if (((uintptr_t)f & 15) == 0) {
    v0 = (a + 3) & ~3u;
    v1 = b & ~3u;
    if (v0 >= v1) v0 = v1 = b;
  }
  for (uint32_t i = a + threadIdx.x; i < v0; i += kThreads) {
    const uint32_t word = sh ? __funnelshift_r(w[i], w[i + 1], 8 * sh) : w[i];
    s += lc::fmix32(word ^ (uint32_t)(i * 0x9E3779B9u));
  }
  for (uint32_t i = v1 + threadIdx.x; i < b; i += kThreads) s += lc::fmix32(w[i] ^ (uint32_t)(i * 0x9E3779B9u));
  const uint4* g = reinterpret_cast<const uint4*>(f);
#pragma unroll 1
  for (uint32_t k = v0 / 4 + threadIdx.x; k < v1 / 4; k += kThreads) {
    const uint4 v = g[k];
    const uint32_t i = 4 * k;
    s += lc::fmix32(v.x ^ (uint32_t)(i * 0x9E3779B9u)) + lc::fmix32(v.y ^ (uint32_t)((i + 1) * 0x9E3779B9u)) +
         lc::fmix32(v.z ^ (uint32_t)((i + 2) * 0x9E3779B9u)) + lc::fmix32(v.w ^ (uint32_t)((i + 3) * 0x9E3779B9u));
  }
  return s;
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

// p[0, len) = 0 by the block: bytes up to an 8-byte boundary and after the last whole 8-byte
// word, 8-byte stores between (the frame tail up to the capacity, often most of the frame).
__device__ __forceinline__ void block_zero(uint8_t* p, size_t len) {
  size_t head = (8 - ((uintptr_t)p & 7)) & 7;
  if (head > len) head = len;
  const size_t nw = (len - head) >> 3, tail = head + (nw << 3);
  if (threadIdx.x < head) p[threadIdx.x] = 0;
  for (size_t k = tail + threadIdx.x; k < len; k += kThreads) p[k] = 0;
  unsigned long long* pw = reinterpret_cast<unsigned long long*>(p + head);
  for (size_t m = threadIdx.x; m < nw; m += kThreads) pw[m] = 0ull;
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

// Overflow: a zero frame and nbytes = -(bytes needed), as the CPU encoder.
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
  if (threadIdx.x == 0) { lc::put_u32(out + lc::kChecksumOffset, cs); *nb = (int32_t)total; }
  __syncthreads();
}

// Raw form: header and the values verbatim (the caller checked that it fits).
template <int D>
__device__ void emit_raw(const uint8_t* in, uint64_t rows, uint64_t dim, uint8_t* out, size_t cap,
                         int32_t* nb, uint32_t* red) {
  const size_t hdr = lc::header_bytes(rows, dim), len = (size_t)(rows * dim) * Dev<D>::kSize;
  if (threadIdx.x == 0) lc::write_header(out, lc::raw_header(rows, dim, D));
  block_copy(out + hdr, in, len);
  finish_frame(out, cap, hdr + len, nb, red);
}

// The frames that need no quantized sections: overflow (the choice exceeds the capacity) or
// the raw form. Returns whether it wrote one (block-wide: every thread must call it).
template <int D>
__device__ bool emit_unquantized(const lc::FormChoice& form, const uint8_t* in, uint64_t rows,
                                 uint64_t dim, uint8_t* out, size_t cap, int32_t* nb,
                                 uint32_t* red) {
  if (form.bytes > cap) {
    emit_overflow(out, cap, form.bytes, nb);
    return true;
  }
  if (form.kind != lc::kWriteRaw) return false;
  emit_raw<D>(in, rows, dim, out, cap, nb, red);
  return true;
}

// Outlier positions (pb bytes each) and values (verbatim) of the positions outl[0, n_out).
template <int D>
__device__ void write_outliers(const uint8_t* in, const uint32_t* outl, uint64_t n_out, int pb,
                               uint8_t* out, size_t pos_off, size_t val_off) {
  constexpr int isz = Dev<D>::kSize;
  for (uint64_t k = threadIdx.x; k < n_out; k += kThreads) {
    const uint32_t pos = outl[k];
    lc::put_outlier_pos(out + pos_off + k * pb, pos, pb);
    for (int b = 0; b < isz; ++b) out[val_off + k * isz + b] = in[(size_t)pos * isz + b];
  }
}

// Outlier values copied to their positions (checked < n). A valid frame has increasing
// positions: one thread each; otherwise frame order by one thread (a repeated position keeps the
// last value, as on the CPU). With parts > 1, only the positions in units part, part + parts, ...
// of `unit` values (the block's share of a frame spread over several blocks).
template <int D>
__device__ void scatter_outliers(uint8_t* out, const uint8_t* pos, const uint8_t* vals,
                                 uint64_t n_out, int pb, bool increasing, uint64_t part = 0,
                                 uint64_t parts = 1, uint32_t unit = kTile) {
  constexpr int isz = Dev<D>::kSize;
  const int tid = threadIdx.x;
  if (increasing || tid == 0) {
    const uint64_t k0 = increasing ? (uint64_t)tid : 0, step = increasing ? kThreads : 1;
    for (uint64_t k = k0; k < n_out; k += step) {
      const uint32_t q = lc::outlier_pos(pos, k, pb);
      if (parts > 1 && (q / unit) % (uint32_t)parts != (uint32_t)part) continue;
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
    const uint32_t q = lc::outlier_pos(pos, k, pb);
    b |= (uint32_t)(q >= n);
    if (k + 1 < n_out && lc::outlier_pos(pos, k + 1, pb) <= q) dec = 1;
  }
  *bad = __syncthreads_or(b) != 0;
  *increasing = __syncthreads_or(dec) == 0;
}

}  // namespace gpu
}  // namespace lc
