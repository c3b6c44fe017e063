// CUDA XLA FFI handlers for the jax_lossy_comm codec: compress, decompress, frame status.
//
// Same operands, attributes and frame format as codec_cpu.cc: a frame made here decodes on the
// CPU to the same values and the reverse (the codec core is frame.h; -fmad=false keeps the float
// operations of both sides identical). Leading dimensions of the input are a batch of
// independent chunks [rows, dim]; every kernel takes the whole batch in one launch.
//
// Forms and how each runs on the device:
//  * "fixed" and "raw" compress: one thread block per chunk at a time (a grid-stride loop over
//    chunks sized to the occupancy), everything parallel across the block: finite min/max
//    reduction, quantize + verify of every value, bit-packing of 32-value groups (32 * b bits =
//    4b bytes, so groups never share a byte), staged in shared memory and stored as aligned
//    words; outliers (rare) are compacted in order with a block-wide scan; the frame checksum is
//    a block reduction. The raw form is a parallel copy.
//  * "auto", "dedup", "entropy" compress: the dictionary and Huffman stages are serial in
//    frame.h; one thread per chunk runs lc::encode_chunk (correct, not fast).
//  * decompress / frame status: one block per chunk validates the header, checks the checksum
//    in parallel and decodes raw and fixed-rate frames (no dedup, no Huffman) fully in parallel;
//    frames with a dictionary or Huffman sections are marked and decoded by a second kernel,
//    one thread per chunk running lc::decode_frame.
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
#include "ffi_args.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
#endif

namespace {

constexpr int kThreads = 128;                           // threads per block, fast kernels
constexpr int kGroup = 32;                              // values one thread packs
constexpr int kTile = kThreads * kGroup;                // values per tile (4096)
constexpr int kTileWords = kThreads * lc::kMaxBits;     // packed words of a tile at 24 bits
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxGenericWorkers = 8192;  // serial workers (one chunk each at a time)
constexpr size_t kEncodeScratch = size_t(1) << 30;  // bytes of their workspaces, at most
constexpr size_t kDecodeScratch = size_t(1) << 28;  // (decode: only frames with a dictionary)

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
    // 1. Range over finite values (min/max are exact in any order; 16-byte loads for float32).
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
    block_minmax(mn, mx, sh.rmin, sh.rmax);
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
    if (total > cap) {  // overflow: zero frame, nbytes = -(bytes needed)
      block_zero(out, cap);
      if (tid == 0) nbytes[c] = total > (size_t)INT32_MAX ? INT32_MIN : -(int32_t)total;
      __syncthreads();
      continue;
    }
    if (use_raw) {  // raw form: header and the values verbatim
      if (tid == 0) {
        out[0] = lc::kMagic;
        out[1] = (uint8_t)((lc::kVersion << 4) | lc::kFormRaw);
        out[2] = (uint8_t)D;
        out[3] = 0;
        lc::put_u32(out + 4, 0);
        size_t o = lc::kHeaderFixed;
        o += lc::put_varint(out + o, rows);
        lc::put_varint(out + o, dim);
      }
      block_copy(out + hdr, in, (size_t)n * isz);
      block_zero(out + raw, cap - raw);
      __syncthreads();
      const uint32_t cs = block_checksum(out, raw, sh.red);
      if (tid == 0) { lc::put_u32(out + 4, cs); nbytes[c] = (int32_t)raw; }
      __syncthreads();
      continue;
    }
    // 3. Header, outlier section, zero tail, checksum.
    if (tid == 0) {
      out[0] = lc::kMagic;
      out[1] = (uint8_t)((lc::kVersion << 4) | lc::kFormQuant);
      out[2] = (uint8_t)(D | (mode == lc::kAbs ? 4 : 0));
      out[3] = (uint8_t)p.bits;
      lc::put_u32(out + 4, 0);
      size_t o = lc::kHeaderFixed;
      o += lc::put_varint(out + o, rows);
      o += lc::put_varint(out + o, dim);
      lc::put_u32(out + o, lc::f2u(p.eb_abs)); o += 4;
      lc::put_u32(out + o, lc::f2u(p.vmin)); o += 4;
      lc::put_varint(out + o, n_out);
    }
    for (uint64_t k = tid; k < n_out; k += kThreads) {
      const uint32_t pos = outl[k];
      for (int b = 0; b < pb; ++b) out[pos_off + k * pb + b] = (uint8_t)(pos >> (8 * b));
      for (int b = 0; b < isz; ++b) out[val_off + k * isz + b] = in[(size_t)pos * isz + b];
    }
    block_zero(out + total, cap - total);
    __syncthreads();
    const uint32_t cs = block_checksum(out, total, sh.red);
    if (tid == 0) { lc::put_u32(out + 4, cs); nbytes[c] = (int32_t)total; }
    __syncthreads();
  }
}

// "auto", "dedup" and "entropy": one thread per chunk runs the serial core of frame.h.
template <int D>
__global__ void encode_generic_kernel(const uint8_t* __restrict__ x, const float* __restrict__ ebs,
                                      int64_t batch, uint64_t rows, uint64_t dim, int mode,
                                      int codec, uint8_t* __restrict__ frames, size_t cap,
                                      int32_t* __restrict__ nbytes, uint8_t* ws, size_t ws_stride,
                                      int64_t workers) {
  const int64_t wk = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (wk >= workers) return;
  lc::Workspace w = lc::carve_workspace(ws + (size_t)wk * ws_stride, rows, dim);
  const size_t chunk_bytes = (size_t)(rows * dim) * Dev<D>::kSize;
  for (int64_t c = wk; c < batch; c += workers) {
    lc::EncodeResult r = lc::encode_chunk_t<D>(x + (size_t)c * chunk_bytes, rows, dim, ebs[c], mode,
                                               codec, frames + (size_t)c * cap, cap, w);
    nbytes[c] = r.nbytes < INT32_MIN ? INT32_MIN : (int32_t)r.nbytes;
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
  size_t src_off, pos_off, val_off;  // raw values / packed codes; outlier positions; values
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
// frames with a dictionary or Huffman sections get pending[c] = 1 for decode_generic_kernel.
template <int D, bool kWrite>
__global__ void __launch_bounds__(kThreads)
decode_fast_kernel(const uint8_t* __restrict__ frames, const int32_t* __restrict__ nbytes,
                   int64_t batch, size_t cap, uint64_t rows, uint64_t dim, uint8_t* __restrict__ x,
                   int32_t* __restrict__ status, uint8_t* __restrict__ pending) {
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
    if (F.kind == kKindGeneric) {
      if (tid == 0) pending[c] = 1;
      __syncthreads();
      continue;
    }
    if (F.kind == kKindFixed) {
      const int pb = lc::pos_bytes_for(n);
      uint32_t bad = 0;
      for (uint64_t k = tid; k < F.n_out; k += kThreads) {
        uint32_t q = 0;
        for (int b = 0; b < pb; ++b) q |= (uint32_t)f[F.pos_off + k * pb + b] << (8 * b);
        bad |= (uint32_t)(q >= n);
      }
      if (__syncthreads_or(bad)) st = lc::kCorrupt;
    }
    if (tid == 0) { pending[c] = 0; status[c] = st; }
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
      if (tid == 0) {  // outliers, in frame order (a repeated position keeps the last value)
        const int pb = lc::pos_bytes_for(n);
        for (uint64_t k = 0; k < F.n_out; ++k) {
          uint32_t q = 0;
          for (int b = 0; b < pb; ++b) q |= (uint32_t)f[F.pos_off + k * pb + b] << (8 * b);
          for (int b = 0; b < isz; ++b) out[(size_t)q * isz + b] = f[F.val_off + k * isz + b];
        }
      }
    }
    __syncthreads();
  }
}


// Frames with a dictionary or Huffman sections: one thread per chunk runs lc::decode_frame_t.
// Frame status decodes into a per-worker scratch chunk (out_per_worker) rather than
// instantiating the validate-only decoder too: the statuses are the same, and the large serial
// decoder is compiled once per dtype instead of twice.
template <int D>
__global__ void decode_generic_kernel(const uint8_t* __restrict__ frames,
                                      const int32_t* __restrict__ nbytes, int64_t batch, size_t cap,
                                      uint64_t rows, uint64_t dim, uint8_t* __restrict__ x,
                                      bool out_per_worker, int32_t* __restrict__ status,
                                      const uint8_t* __restrict__ pending, uint8_t* ws,
                                      size_t ws_stride, int64_t workers) {
  const int64_t wk = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (wk >= workers) return;
  lc::Workspace w = lc::carve_workspace(ws + (size_t)wk * ws_stride, rows, dim);
  const size_t chunk_bytes = (size_t)(rows * dim) * Dev<D>::kSize;
  for (int64_t c = wk; c < batch; c += workers) {
    if (!pending[c]) continue;
    uint8_t* out = x + (size_t)(out_per_worker ? wk : c) * chunk_bytes;
    status[c] = lc::decode_frame_t<true, D>(frames + (size_t)c * cap, nbytes[c], cap, rows, dim,
                                            out, w);
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

// Serial workers (one chunk each at a time) and the workspace stride of each.
int64_t generic_workers(int64_t batch, size_t ws_stride, size_t max_bytes) {
  const int64_t max_workers = kMaxGenericWorkers;
  int64_t by_mem = (int64_t)(max_bytes / (ws_stride ? ws_stride : 1));
  int64_t w = batch < max_workers ? batch : max_workers;
  w = w < by_mem ? w : by_mem;
  return w < 1 ? 1 : w;
}

template <int D>
ffi::Error LaunchCompress(cudaStream_t stream, ffi::ScratchAllocator& scratch, const uint8_t* x,
                          const float* eb, int64_t batch, int64_t rows, int64_t dim, int mode,
                          int codec, uint8_t* frames, int64_t cap, int32_t* nbytes) {
  const char* op = "lc_compress";
  if (batch == 0) return ffi::Error::Success();
  const uint64_t n = (uint64_t)rows * (uint64_t)dim;
  if (codec == lc::kCodecFixed || codec == lc::kCodecRaw) {
    int64_t blocks = 0;
    cudaError_t e = resident_blocks(encode_fixed_kernel<D>, kThreads, batch, &blocks);
    if (e != cudaSuccess) return cuda_error(op, e);
    const size_t stride = align256(4 * (size_t)n);  // outlier positions of one chunk
    auto ws = scratch.Allocate(stride * (size_t)blocks + 256, 256);
    if (!ws.has_value()) return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(op) + ": scratch allocation failed");
    encode_fixed_kernel<D><<<(unsigned)blocks, kThreads, 0, stream>>>(
        x, eb, batch, rows, dim, mode, codec, frames, (size_t)cap, nbytes,
        static_cast<uint8_t*>(*ws), stride);
  } else {
    const size_t stride = align256(lc::workspace_bytes(rows, dim));
    const int64_t workers = generic_workers(batch, stride, kEncodeScratch);
    auto ws = scratch.Allocate(stride * (size_t)workers, 256);
    if (!ws.has_value()) return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(op) + ": scratch allocation failed");
    const int threads = 32;
    encode_generic_kernel<D><<<(unsigned)((workers + threads - 1) / threads), threads, 0, stream>>>(
        x, eb, batch, rows, dim, mode, codec, frames, (size_t)cap, nbytes,
        static_cast<uint8_t*>(*ws), stride, workers);
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? ffi::Error::Success() : cuda_error(op, e);
}

template <int D, bool kWrite>
ffi::Error LaunchDecode(cudaStream_t stream, ffi::ScratchAllocator& scratch, const uint8_t* frames,
                        const int32_t* nbytes, int64_t batch, int64_t cap, int64_t rows,
                        int64_t dim, uint8_t* x, int32_t* status, const char* op) {
  if (batch == 0) return ffi::Error::Success();
  int64_t blocks = 0;
  cudaError_t e = resident_blocks(decode_fast_kernel<D, kWrite>, kThreads, batch, &blocks);
  if (e != cudaSuccess) return cuda_error(op, e);
  const size_t chunk_bytes = align256((size_t)(rows * dim) * Dev<D>::kSize);
  // Frame status: each worker also gets a chunk to decode into (see decode_generic_kernel).
  const size_t stride = align256(lc::workspace_bytes(rows, dim)) + (kWrite ? 0 : chunk_bytes);
  const int64_t workers = generic_workers(batch, stride, kDecodeScratch);
  const size_t flags = align256((size_t)batch);
  auto ws = scratch.Allocate(flags + stride * (size_t)workers, 256);
  if (!ws.has_value()) return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(op) + ": scratch allocation failed");
  uint8_t* pending = static_cast<uint8_t*>(*ws);
  uint8_t* work = pending + flags;
  decode_fast_kernel<D, kWrite><<<(unsigned)blocks, kThreads, 0, stream>>>(
      frames, nbytes, batch, (size_t)cap, rows, dim, x, status, pending);
  const int threads = 32;
  uint8_t* out = kWrite ? x : work + (size_t)workers * align256(lc::workspace_bytes(rows, dim));
  decode_generic_kernel<D><<<(unsigned)((workers + threads - 1) / threads), threads, 0, stream>>>(
      frames, nbytes, batch, (size_t)cap, rows, dim, out, !kWrite, status, pending, work,
      align256(lc::workspace_bytes(rows, dim)), workers);
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
                                  .Ctx<ffi::ScratchAllocator>()   // workspaces, pending flags
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
