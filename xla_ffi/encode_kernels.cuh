// CUDA encode kernels: one thread block per chunk at a time (a grid-stride loop over the
// batch), everything parallel across the block, the same frames as the CPU encoder
// (encoder.h) byte for byte: the quantization plan, codes, form choice, sizes and header come
// from quant.h and format.h, the Huffman code lengths from huffman.h.
//  * encode_fixed_kernel, codecs "fixed" and "raw": finite min/max reduction, quantize + verify
//    of every value, bit-packing of 32-value groups (32 * b bits = 4b bytes, so groups never
//    share a byte), staged in shared memory and stored as aligned words; outliers (rare) are
//    compacted in order with a block-wide scan; the frame checksum is a block reduction.
//  * encode_dict_kernel, codecs "auto", "dedup", "entropy":
//    1. range and quantization of every value into a code array in scratch, outlier positions
//       compacted in order (warp ballots + a block scan);
//    2. distinct code rows: each thread hashes whole code rows and inserts them into a hash table
//       (shared memory up to 2048 rows, else scratch; atomicCAS, then atomicMin keeps the
//       smallest equal row), so every row learns its first occurrence; a block scan over "first
//       occurrence" flags numbers the dictionary in first-occurrence order (what the CPU gets
//       from its serial dedup of the distinct input rows: equal input rows have equal codes, so
//       both orders agree);
//    3. each section is planned as huffman.h's plan_section: histogram with shared atomics, keys
//       (freq << 16 | symbol) bitonic-sorted by the block, then huff_lengths' steps on the
//       sorted frequencies in shared memory (the Moffat-Katajainen depths by one thread, leaves
//       per depth, the length limit and each symbol's length by the block: the CPU's lengths by
//       construction), huff_codes by one thread, total bits by a block reduction;
//    4. the chosen form is written: every section is an LSB-first bit stream produced tile by
//       tile: each thread takes kRun symbols, a block scan of their bit counts gives each its
//       bit offset, threads OR their bits into shared words, whole words go out aligned and the
//       partial last word carries into the next tile; Huffman segment lengths (kSeg symbols)
//       fall out of the same scan.
// Workspaces come from the caller (codec_cuda.cu: XLA's scratch), ws_stride bytes per block.
#pragma once

#include "cuda_common.cuh"
#include "format.h"
#include "huffman.h"
#include "quant.h"

namespace lc {
namespace gpu {

// ---------------------------------------------------------------- quantization
// Parameters of both encode kernels: x[batch, rows, dim] of dtype D, one bound per chunk (ebs),
// frames[batch, cap] and their byte counts (nbytes), ws_stride bytes of workspace per block.
#define LC_ENCODE_KERNEL_PARAMS                                                                \
  const uint8_t* __restrict__ x, const float* __restrict__ ebs, int64_t batch, uint64_t rows, \
      uint64_t dim, int mode, int codec, uint8_t* __restrict__ frames, size_t cap,            \
      int32_t* __restrict__ nbytes, uint8_t* ws, size_t ws_stride

// The plan of one chunk (quant.h) from its finite range, reduced by the block. The raw codec
// quantizes nothing (its plan is never ok), so it skips the pass over the input.
template <int D>
__device__ lc::QuantPlan chunk_plan(const uint8_t* in, uint64_t n, float eb, int mode, int codec,
                                    float* rmin, float* rmax) {
  float mn = 0.0f, mx = 0.0f;
  if (codec != lc::kCodecRaw) chunk_range<D>(in, n, rmin, rmax, &mn, &mx);
  return lc::plan_quant(mn, mx, eb, mode, codec, n, D);
}

// Code of one value (quant.h), with the neighbour retry; *ok false makes it an outlier (the
// code is still written, as on the CPU).
template <int D>
__device__ __forceinline__ uint32_t quantize_one(float v, const lc::QuantPlan& p, bool* ok) {
  const float qf = lc::quant_code(v, p);
  float q2;
  if (lc::code_honours<D>(v, qf, p)) {
    *ok = true;
    return (uint32_t)(int32_t)qf;
  }
  *ok = lc::retry_code<D>(v, qf, p, &q2);  // a value at a rounding midpoint
  return *ok ? (uint32_t)q2 : (uint32_t)(int32_t)qf;
}

// One tile's codes, row-padded: thread t's group of 32 values in words [33 t, 33 t + 32) (bit 31:
// outlier); after packing, the group's `bits` packed words in place at the start of its row (no
// second buffer: 17 KiB a block, 8 blocks a SM by shared memory on sm_80 and sm_90).
constexpr int kRowWords = kGroup + 1;
struct EncodeShared {
  uint32_t codes[kThreads * kRowWords + 1];  // +1: the word read past the last row by a funnel shift
  uint32_t red[kWarps];
  float rmin[kWarps], rmax[kWarps];
  uint64_t n_out;
};

// out[off, off + len) = the packed words of the groups in sh.codes' rows (group g's words at
// 33 g, `bits` of them), clipped to the capacity: smem_to_frame over the rows. Word m of the
// stream is word m % bits of row m / bits (the quotient by a 32-bit multiply).
__device__ void rows_to_frame(uint8_t* out, size_t cap, size_t off, size_t len,
                              const uint32_t* rows, int bits) {
  if (off >= cap || len == 0 || bits == 0) return;
  if (len > cap - off) len = cap - off;
  // m / bits = (m * ceil(2^20 / bits)) >> 20 for m < 2^20 / bits (m <= 128 * 24 here).
  const uint32_t magic = ((1u << 20) + (uint32_t)bits - 1u) / (uint32_t)bits;
  auto word = [&](uint32_t m) -> uint32_t {
    const uint32_t g = (m * magic) >> 20;
    return rows[g * kRowWords + (m - g * (uint32_t)bits)];
  };
  uint8_t* dst = out + off;
  const uint32_t n = (uint32_t)len;  // at most a tile's packed bytes
  uint32_t head = (4u - (uint32_t)((uintptr_t)dst & 3)) & 3u;
  if (head > n) head = n;
  const uint32_t nw = (n - head) >> 2, tail = head + (nw << 2);
  if (threadIdx.x < head) dst[threadIdx.x] = (uint8_t)(word(0) >> (8 * threadIdx.x));
  for (uint32_t k = tail + threadIdx.x; k < n; k += kThreads)
    dst[k] = (uint8_t)(word(k >> 2) >> (8 * (k & 3)));
  uint32_t* dw = reinterpret_cast<uint32_t*>(dst + head);
  const unsigned sh = 8u * head;
  for (uint32_t m = threadIdx.x; m < nw; m += kThreads)
    dw[m] = __funnelshift_r(word(m), word(m + 1), sh);
}

// The codes of kNL * kThreads 16-byte vectors of 16-byte-aligned input at `src` (a tile or half
// a tile) into sh.codes: every load issued before the quantization, no per-value guard; the
// values, as float bits, wait in the thread's own code slots (no barrier: each slot is written
// and read by one thread), which frees the registers of the loads for the quantization loop.
template <int D, int kNL>
__device__ __forceinline__ void quantize_loaded(const uint8_t* src8, const lc::QuantPlan& p,
                                                EncodeShared& sh) {
  constexpr int kVec = 16 / Dev<D>::kSize;
  const int tid = threadIdx.x;
  const uint4* src = reinterpret_cast<const uint4*>(src8);
  uint4 v[kNL];
#pragma unroll
  for (int j = 0; j < kNL; ++j) v[j] = src[j * kThreads + tid];
#pragma unroll
  for (int j = 0; j < kNL; ++j)
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const int L = (j * kThreads + tid) * kVec + e;
      sh.codes[L + (L >> 5)] = lc::f2u(Dev<D>::from_vec(v[j], e));
    }
#pragma unroll 4
  for (int k = 0; k < kNL * kVec; ++k) {
    const int L = ((k / kVec) * kThreads + tid) * kVec + k % kVec;
    uint32_t& slot = sh.codes[L + (L >> 5)];
    bool ok;
    const uint32_t q = quantize_one<D>(lc::u2f(slot), p, &ok);
    slot = q | (ok ? 0u : 0x80000000u);
  }
}

// Quantizes values [first, last) of the chunk (whole half tiles, or up to n) a tile or half a
// tile at a time (kHalves: half tiles of aligned input take the 16-byte loads too; only the
// multi-block encoder, whose parts may be half tiles: the one-block kernels would spill) and writes their packed codes at out[codes_off, ...) (clipped to cap). With
// `record`, sh.n_out counts the outliers and the positions (relative to the chunk) of the first
// `slots` go to outl[] in increasing order (lc::outlier_slots: a frame never holds more).
template <int D, bool kHalves = false>
__device__ void quantize_pack(const uint8_t* in, uint64_t n, const lc::QuantPlan& p, uint8_t* out,
                              size_t cap, size_t codes_off, uint32_t* outl, uint64_t slots,
                              bool record, EncodeShared& sh, uint64_t first = 0,
                              uint64_t last = ~0ull) {
  const int tid = threadIdx.x, bits = p.bits;
  // Full tiles (and half tiles) of 16-byte-aligned input: quantize_loaded (kLoads vectors of
  // kVec values per thread on a tile, coalesced: 128 bytes in flight per thread).
  constexpr int kVec = 16 / Dev<D>::kSize, kLoads = kGroup / kVec;
  const bool aligned = ((uintptr_t)in & 15) == 0;
  const uint64_t end = last < n ? last : n;
  for (uint64_t base = first; base < end; base += kTile) {
    const uint32_t span = (uint32_t)(end - base < (uint64_t)kTile ? end - base : (uint64_t)kTile);
    if (aligned && span == kTile) {
      LC_GPU_PATH(kPathEncodeVec);
      quantize_loaded<D, kLoads>(in + base * Dev<D>::kSize, p, sh);
    } else if (kHalves && aligned && span == kUnit) {
      LC_GPU_PATH(kPathEncodeHalf);
      quantize_loaded<D, kLoads / 2>(in + base * Dev<D>::kSize, p, sh);
    } else {
      LC_GPU_PATH(kPathEncodeScalar);
#pragma unroll 8
      for (int j = 0; j < kGroup; ++j) {
        const int L = j * kThreads + tid;  // coalesced loads
        uint32_t e = 0;
        if ((uint32_t)L < span) {
          bool ok;
          uint32_t q = quantize_one<D>(Dev<D>::load(in, base + L), p, &ok);
          e = q | (ok ? 0u : 0x80000000u);
        }
        sh.codes[L + (L >> 5)] = e;
      }
    }
    __syncthreads();
    // Thread tid packs values [32 tid, 32 tid + 32) of the span into `bits` words, in place: word
    // w is complete once code k >= w is read, so it never overwrites a code still to be read.
    uint32_t* mine = sh.codes + tid * kRowWords;
    uint32_t om = 0;  // outlier flags of the group
    if ((uint32_t)tid * kGroup < span) {
      uint64_t acc = 0;
      int nacc = 0, w = 0;
#pragma unroll 8
      for (int k = 0; k < kGroup; ++k) {
        const uint32_t e = mine[k];
        om |= (e >> 31) << k;
        if (bits) {
          acc |= (uint64_t)(e & 0x7fffffffu) << nacc;
          nacc += bits;
          if (nacc >= 32) { mine[w++] = (uint32_t)acc; acc >>= 32; nacc -= 32; }
        }
      }
    }
    const uint32_t cnt = (uint32_t)__popc(om);
    if (record && __syncthreads_or(cnt != 0)) {
      uint32_t tot;
      const uint32_t ex = block_scan(cnt, sh.red, &tot);
      uint64_t o = sh.n_out + ex;
      const uint64_t g0 = base + (uint64_t)tid * kGroup;
      while (om) {
        if (o < slots) outl[o] = (uint32_t)(g0 + (uint32_t)(__ffs((int)om) - 1));
        ++o;
        om &= om - 1;
      }
      __syncthreads();  // every thread has read sh.n_out
      if (tid == 0) sh.n_out += tot;
    }
    __syncthreads();  // packed words complete
    const size_t rstart = (size_t)(base / kGroup) * 4 * (size_t)bits;  // whole groups before
    const size_t len = lc::packed_bytes(base + span, bits) - rstart;
    rows_to_frame(out, cap, codes_off + rstart, len, sh.codes, bits);
    __syncthreads();  // before the next span reuses the shared buffers
  }
}

// Fixed-rate (codec "fixed") and raw (codec "raw", or data that cannot be quantized) frames,
// identical to the CPU encoder's for those codecs.
template <int D>
__global__ void __launch_bounds__(kThreads, kFixedMinBlocks)
encode_fixed_kernel(LC_ENCODE_KERNEL_PARAMS) {
  __shared__ EncodeShared sh;
  const int tid = threadIdx.x;
  const uint64_t n = rows * dim;
  constexpr int isz = Dev<D>::kSize;
  const size_t raw = lc::raw_frame_bytes(rows, dim, D);
  uint32_t* outl = reinterpret_cast<uint32_t*>(ws + (size_t)blockIdx.x * ws_stride);
  const uint64_t slots = lc::outlier_slots(rows, dim, D, cap);  // outl[] holds this many
  for (int64_t c = blockIdx.x; c < batch; c += gridDim.x) {
    const uint8_t* in = x + (size_t)c * n * isz;
    uint8_t* out = frames + (size_t)c * cap;
    // 1. Range over finite values, the plan.
    const lc::QuantPlan p = chunk_plan<D>(in, n, ebs[c], mode, codec, sh.rmin, sh.rmax);
    size_t codes_off = lc::quant_header_bytes(rows, dim, 0, false, 0), fixed = 0;
    uint64_t n_out = 0;
    const int pb = lc::pos_bytes_for(n);
    if (p.ok) {
      // 2. Quantize, verify and pack; the codes section follows a one-byte outlier count
      //    unless the count needs more, in which case the codes are written again further on.
      if (tid == 0) sh.n_out = 0;
      __syncthreads();
      quantize_pack<D>(in, n, p, out, cap, codes_off, outl, slots, true, sh);
      n_out = sh.n_out;
      if (lc::varint_size(n_out) != 1) {
        codes_off = lc::quant_header_bytes(rows, dim, n_out, false, 0);
        quantize_pack<D>(in, n, p, out, cap, codes_off, outl, slots, false, sh);
      }
      fixed = lc::fixed_frame_bytes(rows, dim, p.bits, D, n_out);
    }
    const lc::FormChoice form = lc::choose_form(codec, p.ok, raw, fixed, 0, cap);
    if (emit_unquantized<D>(form, in, rows, dim, out, cap, nbytes + c, sh.red)) continue;
    // 3. Header, outlier section, zero tail, checksum.
    const size_t pos_off = codes_off + lc::packed_bytes(n, p.bits);
    const size_t val_off = pos_off + (size_t)n_out * pb;
    if (tid == 0) lc::write_header(out, quant_header(D, mode, p, rows, dim, n_out));
    write_outliers<D>(in, outl, n_out, pb, out, pos_off, val_off);
    finish_frame(out, cap, form.bytes, nbytes + c, sh.red);
  }
}

// ------------------------------------------------ fixed-rate frames over several blocks
// When the chunks are fewer than the resident blocks, a chunk's tiles are spread over `parts`
// blocks (encode_parts, cuda_launch.h) in two launches; the frame is the same byte for byte:
//  1. encode_fixed_parts_kernel: part q of chunk c (one block) reduces the chunk's whole range
//     (each part: the chunk is read once per part, from L2 after the first), so every part has
//     the same plan, then quantizes, verifies and packs tiles [q T / parts, (q + 1) T / parts)
//     into the codes section as if the outlier count took one byte (the fixed layout is known
//     statically: parts write disjoint bytes), and records its outliers' positions (at most
//     part_slots: what the frame or the part's tiles can hold) and count in its own record;
//  2. encode_fixed_finish_kernel: one block per chunk adds the parts' counts; if the count
//     needs a longer varint the codes are written again one place further on (by this block,
//     rare: 128 or more outliers); it picks the form as the one-block kernel (raw rewrites the
//     whole frame), concatenates the parts' positions in order (each part's list is complete
//     whenever the frame can hold them all) and writes the header, the outlier section, the
//     zero tail and the checksum (the second small pass over the frame, from L2).
struct PartRecord {
  lc::QuantPlan plan;  // the chunk's plan (every part computes the same)
  uint64_t n_out;      // outliers in this part's tiles
};
constexpr size_t kPartHead = 64;  // bytes of a part's record before its positions
static_assert(sizeof(PartRecord) <= kPartHead, "a part's record fits its head");

// Outlier positions one part records: no more than a frame holds, no more than the values of
// the largest part (ceil(units / parts) half tiles).
LC_HD uint64_t part_slots(uint64_t rows, uint64_t dim, int dtype, size_t cap, int64_t parts) {
  const uint64_t units = (rows * dim + kUnit - 1) / kUnit;
  const uint64_t most = (units + (uint64_t)parts - 1) / (uint64_t)parts * kUnit;
  const uint64_t slots = lc::outlier_slots(rows, dim, dtype, cap);
  return slots < most ? slots : most;
}

// Scratch of one (chunk, part): the record, then the positions of up to part_slots outliers.
LC_HD size_t part_ws_bytes(uint64_t rows, uint64_t dim, int dtype, size_t cap, int64_t parts) {
  return kPartHead + 4 * (size_t)part_slots(rows, dim, dtype, cap, parts);
}

template <int D>
__global__ void __launch_bounds__(kThreads, kFixedMinBlocks)
encode_fixed_parts_kernel(LC_ENCODE_KERNEL_PARAMS, int64_t parts) {
  __shared__ EncodeShared sh;
  const uint64_t n = rows * dim;
  const uint64_t units = (n + kUnit - 1) / kUnit;
  const uint64_t slots = part_slots(rows, dim, D, cap, parts);
  if (threadIdx.x == 0) LC_GPU_PATH(kPathEncodeMultiBlock);
  for (int64_t item = blockIdx.x; item < batch * parts; item += gridDim.x) {
    const int64_t c = item / parts, q = item % parts;
    const uint8_t* in = x + (size_t)c * n * Dev<D>::kSize;
    uint8_t* rec = ws + (size_t)item * ws_stride;
    uint32_t* outl = reinterpret_cast<uint32_t*>(rec + kPartHead);
    const lc::QuantPlan p = chunk_plan<D>(in, n, ebs[c], mode, codec, sh.rmin, sh.rmax);
    if (threadIdx.x == 0) sh.n_out = 0;
    __syncthreads();
    if (p.ok) {
      const uint64_t t0 = units * (uint64_t)q / (uint64_t)parts;
      const uint64_t t1 = units * (uint64_t)(q + 1) / (uint64_t)parts;
      quantize_pack<D, true>(in, n, p, frames + (size_t)c * cap, cap,
                       lc::quant_header_bytes(rows, dim, 0, false, 0), outl, slots, true, sh,
                       t0 * kUnit, t1 * kUnit);
    }
    if (threadIdx.x == 0) {
      PartRecord* r = reinterpret_cast<PartRecord*>(rec);
      r->plan = p;
      r->n_out = sh.n_out;
    }
    __syncthreads();  // before the next item resets sh.n_out
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads, kFinishMinBlocks)
encode_fixed_finish_kernel(LC_ENCODE_KERNEL_PARAMS, int64_t parts) {
  __shared__ EncodeShared sh;
  const int tid = threadIdx.x;
  const uint64_t n = rows * dim;
  const size_t raw = lc::raw_frame_bytes(rows, dim, D);
  for (int64_t c = blockIdx.x; c < batch; c += gridDim.x) {
    const uint8_t* in = x + (size_t)c * n * Dev<D>::kSize;
    uint8_t* out = frames + (size_t)c * cap;
    uint8_t* rec0 = ws + (size_t)(c * parts) * ws_stride;
    const lc::QuantPlan p = reinterpret_cast<const PartRecord*>(rec0)->plan;
    uint64_t n_out = 0;
    for (int64_t q = 0; q < parts; ++q)
      n_out += reinterpret_cast<const PartRecord*>(rec0 + (size_t)q * ws_stride)->n_out;
    size_t codes_off = lc::quant_header_bytes(rows, dim, 0, false, 0), fixed = 0;
    const int pb = lc::pos_bytes_for(n);
    if (p.ok) {
      if (lc::varint_size(n_out) != 1) {
        codes_off = lc::quant_header_bytes(rows, dim, n_out, false, 0);
        quantize_pack<D>(in, n, p, out, cap, codes_off, nullptr, 0, false, sh);
      }
      fixed = lc::fixed_frame_bytes(rows, dim, p.bits, D, n_out);
    }
    const lc::FormChoice form = lc::choose_form(codec, p.ok, raw, fixed, 0, cap);
    if (emit_unquantized<D>(form, in, rows, dim, out, cap, nbytes + c, sh.red)) continue;
    // The fixed form fits, so n_out <= slots and every part's list is complete: each part's
    // positions go to the frame after the earlier parts' (no copy between the records: a
    // part's record holds no more than its own values' outliers).
    const size_t pos_off = codes_off + lc::packed_bytes(n, p.bits);
    const size_t val_off = pos_off + (size_t)n_out * pb;
    if (tid == 0) lc::write_header(out, quant_header(D, mode, p, rows, dim, n_out));
    uint64_t o = 0;
    for (int64_t q = 0; q < parts; ++q) {
      const uint8_t* rq = rec0 + (size_t)q * ws_stride;
      const uint64_t m = reinterpret_cast<const PartRecord*>(rq)->n_out;
      write_outliers<D>(in, reinterpret_cast<const uint32_t*>(rq + kPartHead), m, pb, out,
                        pos_off + (size_t)o * pb, val_off + (size_t)o * Dev<D>::kSize);
      o += m;
    }
    finish_frame(out, cap, form.bytes, nbytes + c, sh.red);
  }
}

// ---------------------------------------------------------------- dictionary forms: encoder
// Workspace of one block of encode_dict_kernel, in scratch memory.
struct DictWs {
  uint32_t* codes;    // [n] quantization code of every value
  uint32_t* outl;     // [slots] outlier positions, increasing (lc::outlier_slots)
  int32_t* table;     // [hs] hash table of code rows (absent when it fits in shared memory)
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

// Bytes of the hash table in scratch: none when it fits in shared memory (dedup_code_rows).
LC_HD size_t dict_table_bytes(uint64_t rows) {
  const uint32_t hs = lc::hash_size_for(rows);
  return hs <= (uint32_t)lc::kMaxHuffSymbols ? 0 : lc::align16(4 * (size_t)hs);
}

// Bytes of one DictWs: codes, the outlier positions of a frame of `cap` bytes, the hash table
// when shared memory cannot hold it, 4 arrays of rows, the Huffman tables.
LC_HD size_t dict_ws_bytes(uint64_t rows, uint64_t dim, int dtype, size_t cap) {
  const uint64_t n = rows * dim, S = lc::kMaxHuffSymbols;
  return lc::align16(4 * n) + lc::align16(4 * (size_t)lc::outlier_slots(rows, dim, dtype, cap)) +
         dict_table_bytes(rows) +
         lc::align16(4 * rows) * 4 + lc::align16(8 * S) + lc::align16(4 * S) * 4 +
         lc::align16(2 * S) * 2 + lc::align16(S) * 2;
}

LC_HD DictWs carve_dict_ws(uint8_t* base, uint64_t rows, uint64_t dim, int dtype, size_t cap) {
  const uint64_t n = rows * dim, S = lc::kMaxHuffSymbols;
  DictWs w;
  size_t o = 0;
  w.hs = lc::hash_size_for(rows);
  w.codes = (uint32_t*)(base + o); o += lc::align16(4 * n);
  w.outl = (uint32_t*)(base + o); o += lc::align16(4 * (size_t)lc::outlier_slots(rows, dim, dtype, cap));
  w.table = (int32_t*)(base + o); o += dict_table_bytes(rows);
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
  uint32_t hcount[33];                 // Huffman leaves per depth, then per code length
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
__device__ void quantize_codes(const uint8_t* in, uint64_t n, const lc::QuantPlan& p, uint32_t* codes,
                               uint32_t* outl, uint64_t slots, DictShared& sh) {
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
      while (m) {  // the first `slots` positions: a frame never holds more
        if (o < slots) outl[o] = (uint32_t)(g0 + (uint32_t)(__ffs((int)m) - 1));
        ++o;
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
// section size, Huffman when smaller than bit-packing at `bits` bits. The lengths are huffman.h's
// huff_lengths, step by step (below), and go back to their symbols.
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
  // The frequencies in ascending (freq, symbol) order go to fsorted (total bits) and to A in
  // shared memory (sh.hist: the histogram is no longer needed), where one thread runs
  // lc::huff_mk_depths (the CPU's huff_lengths minus its sort: the keys are distinct, so its
  // sort would leave this order as it is); the block counts leaves per depth, one thread limits
  // the counts (lc::huff_limit_counts) and the block gives each sorted symbol its length
  // (lc::huff_rank_length): the CPU's lengths by construction.
  __syncthreads();
  uint32_t* const A = sh.hist;
  for (uint32_t k = tid; k < n_used; k += kThreads) {
    w.fsorted[k] = (uint32_t)(keys[k] >> 16);
    A[k] = (uint32_t)(keys[k] >> 16);
    w.symof[k] = (uint16_t)(keys[k] & 0xffffu);
  }
  for (int s = tid; s < nsym; s += kThreads) w.len[s] = 0;
  if (tid <= 32) sh.hcount[tid] = 0;
  __syncthreads();
  if (n_used >= 2) {
    // The merge and the depth chase stay on one thread: each merge step picks between the
    // smallest remaining leaf and internal node by the sums the previous steps made (the CPU's
    // tie rule, leaves before internal nodes on equal weights, decides the lengths), and each
    // internal node's depth is its parent's plus one along a chain of dependent loads. The leaf
    // depths are not needed one by one: the block counts the internal nodes per depth (shared
    // atomics) and the leaves per depth follow from them (lc::huff_leaf_counts), which is what
    // the length limit and the ranks read.
    if (tid == 0) {
      LC_GPU_PATH(kPathHuffShared);
      lc::huff_mk_internal_depths(A, (int)n_used);
    }
    __syncthreads();
    for (uint32_t k = tid; k + 1 < n_used; k += kThreads)
      if (A[k] < 32) atomicAdd(&sh.hcount[A[k]], 1u);
    __syncthreads();
    if (tid == 0) {
      lc::huff_leaf_counts(sh.hcount, n_used);
      lc::huff_limit_counts(sh.hcount);
    }
    __syncthreads();
    for (uint32_t k = tid; k < n_used; k += kThreads)
      w.len[w.symof[k]] = (uint8_t)lc::huff_rank_length(sh.hcount, n_used - 1 - k);
  } else if (n_used == 1 && tid == 0) {
    w.len[w.symof[0]] = 1;
  }
  __syncthreads();
  if (tid == 0) {
    int ml = 0;
    sh.flag = lc::huff_codes(w.len, nsym, w.code, &ml) ? 1 : 0;
  }
  __syncthreads();
  const bool ok = sh.flag != 0;
  uint64_t tb = 0;
  for (uint32_t k = tid; k < n_used; k += kThreads) tb += (uint64_t)w.fsorted[k] * w.len[w.symof[k]];
  for (int s = tid; s < nsym; s += kThreads) enc[s] = (uint32_t)w.code[s] | ((uint32_t)w.len[s] << 16);
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

// "auto", "dedup" and "entropy": the frame the CPU encoder writes, by one block per chunk.
template <int D>
__global__ void __launch_bounds__(kThreads, kDictMinBlocks)
encode_dict_kernel(LC_ENCODE_KERNEL_PARAMS) {
  __shared__ DictShared sh;
  const int tid = threadIdx.x;
  const uint64_t n = rows * dim;
  constexpr int isz = Dev<D>::kSize;
  const size_t raw = lc::raw_frame_bytes(rows, dim, D);
  const DictWs w = carve_dict_ws(ws + (size_t)blockIdx.x * ws_stride, rows, dim, D, cap);
  const uint64_t slots = lc::outlier_slots(rows, dim, D, cap);
  const bool allow_huff = codec == lc::kCodecAuto || codec == lc::kCodecEntropy;
  for (int64_t c = blockIdx.x; c < batch; c += gridDim.x) {
    const uint8_t* in = x + (size_t)c * n * isz;
    uint8_t* out = frames + (size_t)c * cap;
    const lc::QuantPlan p = chunk_plan<D>(in, n, ebs[c], mode, codec, sh.rmin, sh.rmax);
    if (!p.ok) {  // raw (lossless) or overflow
      const lc::FormChoice form = lc::choose_form(codec, false, raw, 0, 0, cap);
      emit_unquantized<D>(form, in, rows, dim, out, cap, nbytes + c, sh.red);
      continue;
    }
    // 1. Codes and outliers of every value.
    quantize_codes<D>(in, n, p, w.codes, w.outl, slots, sh);
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
    // 4. Sizes and the form.
    const int pb = lc::pos_bytes_for(n);
    const size_t fixed = lc::fixed_frame_bytes(rows, dim, bits, D, n_out);
    const size_t dict = lc::dict_frame_bytes(rows, dim, D, n_out, nu, pc.bytes, pi.bytes);
    const lc::FormChoice form = lc::choose_form(codec, true, raw, fixed, dict, cap);
    if (emit_unquantized<D>(form, in, rows, dim, out, cap, nbytes + c, sh.red)) continue;
    // 5. The frame. A dictionary form with every row distinct and packed codes is the
    //    fixed-rate frame.
    const bool is_dict = form.kind == lc::kWriteDict;
    lc::FrameHeader h = lc::quant_header(D, mode, p, rows, dim, n_out);
    h.dedup = is_dict && !identity;
    h.n_unique = nu;
    h.codes_huff = is_dict && pc.huff;
    h.index_huff = h.dedup && pi.huff;
    size_t o = lc::quant_header_bytes(rows, dim, n_out, h.dedup, nu);
    if (tid == 0) lc::write_header(out, h);
    if (!is_dict) {
      write_stream(out, cap, o, n, Flat{w.codes, nullptr}, nullptr, bits, kNoSeg, sh);
      o += lc::packed_bytes(n, bits);
    } else {
      if (h.codes_huff) write_huff_section(out, cap, o, nd, nsym, w.enc_a, dc, sh);
      else write_stream(out, cap, o, nd, dc, nullptr, bits, kNoSeg, sh);
      o += pc.bytes;
    }
    if (h.dedup) {
      if (h.index_huff) write_huff_section(out, cap, o, rows, (int)nu, w.enc_b, fi, sh);
      else write_stream(out, cap, o, rows, fi, nullptr, ibits, kNoSeg, sh);
      o += pi.bytes;
    }
    write_outliers<D>(in, w.outl, n_out, pb, out, o, o + (size_t)n_out * pb);
    finish_frame(out, cap, form.bytes, nbytes + c, sh.red);
  }
}

}  // namespace gpu
}  // namespace lc
