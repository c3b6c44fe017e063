// CUDA decode kernels (decompress and frame status), the same statuses and values as the CPU
// decoder (decoder.h), checked in the same order:
//  * decode_fast_kernel: one block per frame parses the header (format.h's parse_header), and
//    decodes raw and fixed-rate frames, the checksum of a fixed-rate frame summed from the words
//    it stages (each byte read once), of other frames by the block before it decodes them;
//    frames with a dictionary or Huffman sections are handed (parsed header in scratch) to
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

// parse_header's checksum argument when the block sums the checksum afterwards: the stored
// value (the parse goes on as if it matched), and a note that parse_header asked for it (the
// frame's length, magic and version are valid, and the checksum decides before any later check).
struct DeferredChecksum {
  bool* asked;
  __device__ uint32_t operator()(const uint8_t* f, size_t) const {
    *asked = true;
    return lc::get_u32(f + lc::kChecksumOffset);
  }
};

// lc::parse_header with the checksum deferred, then what tells raw and fixed-rate frames (decoded
// by decode_fast_kernel) from the others: a fixed-rate frame's sections are located and checked
// as the CPU decoder does (codes, outlier positions and values, nothing after them). With a
// matching checksum this is parse_header's result; *asked says whether the checksum decides.
template <int D>
__device__ FastFrame fast_parse(const uint8_t* f, int64_t nbytes, size_t cap, uint64_t rows,
                                uint64_t dim, bool* asked) {
  FastFrame F = {};
  F.kind = kKindError;
  lc::FrameHeader h;
  lc::Reader r = {nullptr, nullptr, true};
  const uint8_t* raw = nullptr;
  *asked = false;
  int32_t st = lc::parse_header(f, nbytes, cap, rows, dim, D, DeferredChecksum{asked}, h, r, &raw);
  if (st == lc::kOk && h.form == lc::kFormRaw) {
    F.kind = kKindRaw;
    F.src_off = (size_t)(raw - f);
  } else if (st == lc::kOk && (h.dedup || h.codes_huff)) {
    F.kind = kKindGeneric;
    F.n_unique = h.n_unique;
    F.dedup = h.dedup;
    F.codes_huff = h.codes_huff;
    F.index_huff = (f[2] & lc::kFlagIndexHuff) != 0;  // h.index_huff, read again: no spill
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
  uint32_t sum[kThreads];  // each thread's share of the checksum (a register would spill)
  FastFrame frame;
  uint32_t want;   // the sum of the checksum terms that the stored checksum asks for
  int32_t status;  // the frame's status before the checksum decides
  bool asked;      // the checksum decides the status (fast_parse)
};

// NaN into units part, part + parts, ... of `unit` values of the chunk (a frame that fails).
template <int D>
__device__ void fill_nan_units(uint8_t* out, uint32_t n32, uint32_t part, uint32_t unit,
                               uint32_t step) {
  for (uint32_t t0 = part * unit; t0 < n32; t0 += step) {
    const uint32_t t1 = n32 - t0 > unit ? t0 + unit : n32;
    for (uint32_t i = t0 + threadIdx.x; i < t1; i += kThreads) Dev<D>::store(out, i, lc::u2f(0x7fc00000u));
  }
}

// One block per frame: header, checksum, and the whole decode of raw and fixed-rate frames;
// every frame's parsed header goes to info[c], and frames with a dictionary or Huffman sections
// (kind kKindGeneric) are left to decode_dict_kernel. Without info (nullptr: the caller
// declared every frame fixed-rate or raw, the one launch of such a decompress) those frames get
// status kUnsupportedForm and NaN values, as lc::decode_frame with fixed_rate on the CPU.
// A frame's values may be spread over `parts` blocks (few chunks, many SMs): part k of frame c
// (work item c * parts + k) writes the values of tiles k, k + parts, ... and the outliers that
// fall in them; every part checks the header, checksum and positions itself, part 0 writes the
// status and the parsed header.
// Checksum: summed alongside the decode and compared at the end, where a mismatch turns the
// status to kBadChecksum and the part's values to NaN (the checksum comes before every later
// check, as in parse_header). A fixed-rate frame at a 4-aligned address (every frame of a packed
// buffer whose capacity is a multiple of 4) has it folded into the staging: the words of the
// part's own units are summed from shared memory once staged, the rest of the frame (header,
// outliers, the other parts' units: from L2) is read once beside them, so each byte of the
// frame is read once by each part. Other frames are read whole for it, then decoded.
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
    if (tid == 0) {
      sh.frame = fast_parse<D>(f, nb, cap, rows, dim, &sh.asked);
      // The sum of the checksum terms the frame's stored checksum asks for (format.h).
      if (sh.asked) sh.want = lc::get_u32(f + lc::kChecksumOffset) - lc::checksum_seed((size_t)nb);
    }
    __syncthreads();
    const FastFrame F = sh.frame;
    const bool asked = sh.asked;
    int32_t st = F.status;
    const int pb = lc::pos_bytes_for(n);
    bool increasing = true;
    if (F.kind == kKindFixed) {
      bool bad;
      check_positions(f + F.pos_off, F.n_out, pb, n, &bad, &increasing);
      if (bad) st = lc::kCorrupt;
    }
    if (F.kind == kKindGeneric && info == nullptr) st = lc::kUnsupportedForm;
    // Part `part` writes units part, part + parts, ... of `unit` values: tiles, or half tiles
    // when the parts outnumber the tiles (indices in 32 bits: chunks are < 2^31 values).
    const uint32_t n32 = (uint32_t)n, tiles = (n32 + kTile - 1) / kTile;
    const uint32_t unit = (uint64_t)parts > tiles ? (uint32_t)kUnit : (uint32_t)kTile;
    const uint32_t step = (uint32_t)parts * unit;
    const int bits = F.bits;
    const uint32_t packed = (uint32_t)lc::packed_bytes(n, bits);
    const uint32_t ubytes = unit / 8 * (uint32_t)bits;  // packed bytes of a whole unit
    const bool fold = kWrite && F.kind == kKindFixed && st == lc::kOk && ((uintptr_t)f & 3) == 0;
    if (tid == 0) sh.status = st;
    // The codes section's bytes [s0, s1) of the frame; a unit's checksum words are those that
    // start in its bytes.
    const uint32_t s0 = (uint32_t)F.src_off, s1 = s0 + packed;
    if (asked) {
      // The words the staging does not sum: the whole frame, or (fold) the header, the outliers
      // and the other parts' units, one span per gap between this part's own units (none with
      // one part), so the call count is this part's unit count + 2, not the frame's.
      if (fold) LC_GPU_PATH(kPathDecodeFold);
      const uint32_t nb32 = (uint32_t)nb, p32 = (uint32_t)parts, q32 = (uint32_t)part;
      uint32_t sum = 0;
      for (uint32_t k = 0;; ++k) {  // spans of bytes, one call site
        uint32_t b0 = 0, b1 = fold ? s0 : nb32;
        if (k == 1) { b0 = s1; b1 = nb32; }
        if (k >= 2) {  // the gap before own unit j = k - 2: units (j - 1) * p + q + 1 .. j * p + q
          const uint32_t j = k - 2;
          b0 = j == 0 ? s0 : s0 + ((j - 1) * p32 + q32 + 1) * ubytes;
          b1 = s1 - s0 > (j * p32 + q32) * ubytes ? s0 + (j * p32 + q32) * ubytes : s1;
        }
        if (k >= (fold ? 2u : 1u) && (k == 1 || b0 >= s1)) break;
        if (b1 > b0) sum += frame_words_sum(f, nb32, (b0 + 3) / 4, (b1 + 3) / 4);
      }
      sh.sum[tid] = sum;
    }
    if (kWrite && st != lc::kOk) {
      fill_nan_units<D>(out, n32, (uint32_t)part, unit, step);
    } else if (kWrite && F.kind == kKindRaw) {
      for (uint32_t t0 = (uint32_t)part * unit; t0 < n32; t0 += step) {
        const uint32_t t1 = n32 - t0 > unit ? t0 + unit : n32;
        block_copy(out + (size_t)t0 * isz, f + F.src_off + (size_t)t0 * isz, (size_t)(t1 - t0) * isz);
      }
    } else if (kWrite && F.kind == kKindFixed) {
      const uint32_t mask = bits ? (1u << bits) - 1u : 0u;
      const uint8_t* sp = f + F.src_off;
      for (uint32_t base = (uint32_t)part * unit; base < n32; base += step) {
        if (part != 0) LC_GPU_PATH(kPathDecodeMultiBlock);
        if (unit != (uint32_t)kTile) LC_GPU_PATH(kPathDecodeHalf);
        // Stage the unit's packed bytes as aligned words (bytes outside the frame read as 0).
        const uint32_t rstart = base / kGroup * 4 * (uint32_t)bits;  // whole groups before
        uint32_t len = packed - rstart;
        if (len > ubytes) len = ubytes;
        const uint8_t* region = sp + rstart;
        // Full units: the 16-byte granules that cover the unit, when they lie inside the frame's
        // bytes, all loads issued before the stores to shared memory (bytes of neighbouring
        // sections around the unit are staged too and never extracted).
        const unsigned gshift = (unsigned)((uintptr_t)region & 15);
        const uint8_t* g0 = region - gshift;  // pointer arithmetic: the loads stay global (LDG)
        const uint32_t ngran = (gshift + len + 15) / 16;
        unsigned shift;
        uint32_t w0;  // the frame word at sh.words[0] (when f is 4-aligned)
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
          w0 = (uint32_t)(g0 - f) / 4;
          if (tid == 0) sh.words[4 * ngran] = 0;
        } else {
          LC_GPU_PATH(kPathDecodeScalar);
          // The frame's bytes (not only the unit's): the staged words are checksum words too.
          const uint8_t* a0 = (const uint8_t*)((uintptr_t)region & ~(uintptr_t)3);
          shift = (unsigned)(region - a0);
          const uint32_t nwords = (shift + len + 3) / 4;
          for (uint32_t m = tid; m < nwords; m += kThreads)
            sh.words[m] = load_word_guarded(a0 + 4 * m, f, f + nb);
          w0 = (uint32_t)(a0 - f) / 4;
          if (tid == 0) sh.words[nwords] = 0;
        }
        __syncthreads();
        if (fold) {  // the unit's checksum words
          uint32_t sum = sh.sum[tid];
          for (uint32_t i = (s0 + rstart + 3) / 4 + tid; i < (s0 + rstart + len + 3) / 4; i += kThreads)
            sum += lc::fmix32(sh.words[i - w0] ^ (uint32_t)(i * 0x9E3779B9u));
          sh.sum[tid] = sum;
        }
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
    }
    // The checksum decides. The status so far comes from shared memory (a register would not
    // last the loop): sh.status once block_sum's barriers published it; without a checksum
    // (the parse failed first) it is the parse's.
    const bool bad_sum = sh.asked && block_sum(sh.sum[tid], sh.red) != sh.want;
    st = sh.asked ? sh.status : sh.frame.status;
    if (bad_sum) {
      if (fold) LC_GPU_PATH(kPathDecodeFoldBad);
      st = lc::kBadChecksum;
      if (kWrite) fill_nan_units<D>(out, n32, (uint32_t)part, unit, step);
    } else if (kWrite && F.kind == kKindFixed && st == lc::kOk) {  // values written: the outliers
      scatter_outliers<D>(out, f + F.pos_off, f + F.val_off, F.n_out, pb, increasing, part,
                          (uint64_t)parts, unit);
    }
    if (tid == 0 && part == 0) {
      if (info != nullptr && bad_sum) {  // fast_parse's result when the checksum fails
        FastFrame e = {};
        e.kind = kKindError;
        e.status = lc::kBadChecksum;
        info[c] = e;
      } else if (info != nullptr) {
        info[c] = sh.frame;  // from shared memory: F's fields need not last the loop
      }
      status[c] = st;
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

// Sections of at most kWarpSegMax segments are decoded a warp per segment, 32 lanes on one
// segment, since one thread a segment would leave most of the block idle (a [256, 64] chunk's
// codes are 16 segments, an index section of up to 1024 rows one). Model (estimate): a
// segment of 1024 symbols takes ~32 symbol steps a lane per pass and about 3 passes, against
// 1024 on one thread; kWarps segments at a time, so up to 32 segments the warps finish first.
constexpr int kWarpSegMax = 32;

// Codes of the segment's stream from bit `pos` while pos < hi (lc::BitReader; bits past the
// stream read as zero): *n codes, returns the bit after the last; *hole when a lookup found no
// code (then the position of the hole). With emit, symbol i goes to emit(first + i, symbol) for
// first + i < last.
template <class Emit>
__device__ uint32_t walk_codes(const uint8_t* sp, size_t bytes, uint32_t pos, uint32_t hi,
                               const uint32_t* table, int tb, uint32_t* n, bool* hole, Emit* emit,
                               uint64_t first, uint64_t last) {
  lc::SegCursor cur = lc::seg_cursor(sp, bytes, pos, 0, 0);
  uint32_t k = 0;
  *hole = false;
  while (pos < hi) {
    const uint32_t e = table[cur.br.peek(tb)];
    const int l = (int)(e & 0xff);
    if (l == 0) { *hole = true; break; }
    cur.br.skip(l);
    pos += (uint32_t)l;
    if (emit != nullptr && first + k < last) (*emit)(first + k, e >> 8);
    ++k;
  }
  *n = k;
  return pos;
}

// The segments of a Huffman section of nseg <= kWarpSegMax segments, a warp each, with the
// CPU's result (every segment decodes to its symbols and ends exactly at its declared length,
// no hole; else kCorrupt). The frame records only where segments start, so a lane cannot know
// where the first code of its window of bits starts: lane j takes bits [j W, (j + 1) W) of the
// segment (W = ceil(L / 32)) and walks its codes from a start, lane 0 from the segment's first
// bit, the others first from their window's first bit (a guess). Each round, lane j + 1's start
// becomes the bit where lane j's walk crossed into its window, and lanes whose start changed walk
// again; when no start changes, every start is a code boundary (lane 0's is, and each next is
// where a walk from a boundary crossed over), so the walks are the serial decode cut in 32.
// Round r fixes lane r's start at the latest, so at most 32 rounds (a code that never
// resynchronises, as 2-bit codes from an odd bit, takes them all); usually one or two. Then an
// exclusive scan of the lanes' code counts places their symbols, and each lane walks its window
// once more, emitting. Every round is block-wide (its barriers and shuffles are reached by all
// warps the same number of times).
template <class Emit>
__device__ int32_t decode_segments_by_warps(const uint8_t* sp, size_t bytes, const uint8_t* seg,
                                            uint64_t nseg, uint64_t count, int tb, Emit& emit,
                                            DictDecShared& sh) {
  LC_GPU_PATH(kPathHuffWarp);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t bad = 0;
  for (uint64_t k0 = 0; k0 < nseg; k0 += kWarps) {
    const uint64_t k = k0 + (uint64_t)warp;
    const bool live = k < nseg;
    // The segment's first bit: the lengths of the segments before it (nseg <= 32: one a lane).
    uint32_t before = live && (uint64_t)lane < k ? (uint32_t)seg[2 * lane] | ((uint32_t)seg[2 * lane + 1] << 8) : 0u;
    for (int o = 16; o > 0; o >>= 1) before += __shfl_xor_sync(0xffffffffu, before, o);
    const uint32_t L = live ? (uint32_t)seg[2 * k] | ((uint32_t)seg[2 * k + 1] << 8) : 0u;
    const uint32_t off = before, W = (L + 31) / 32;
    const uint32_t lo = off + (lane * W < L ? lane * W : L);
    const uint32_t hi = off + ((lane + 1) * W < L ? (lane + 1) * W : L);
    uint32_t start = lo, n = 0;
    bool hole = false;
    uint32_t end = walk_codes<Emit>(sp, bytes, start, hi, sh.table, tb, &n, &hole, nullptr, 0, 0);
    for (int round = 0; round < 33; ++round) {
      const uint32_t prev = __shfl_up_sync(0xffffffffu, end, 1);
      const uint32_t want = lane == 0 ? off : prev;
      const bool moved = live && want != start;
      if (moved) {
        start = want;
        end = walk_codes<Emit>(sp, bytes, start, hi, sh.table, tb, &n, &hole, nullptr, 0, 0);
      }
      if (!__syncthreads_or(moved)) break;
      if (round > 0) LC_GPU_PATH(kPathHuffWarpRounds);  // a second correction was needed
    }
    // Symbols before each lane's, the segment's total and end (lane 31's), holes.
    uint32_t base = n;
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(0xffffffffu, base, o);
      if (lane >= o) base += y;
    }
    uint32_t total = lane == 31 ? base : 0u, last_end = lane == 31 ? end : 0u, holes = hole ? 1u : 0u;
    for (int o = 16; o > 0; o >>= 1) {
      total += __shfl_xor_sync(0xffffffffu, total, o);
      last_end += __shfl_xor_sync(0xffffffffu, last_end, o);
      holes += __shfl_xor_sync(0xffffffffu, holes, o);
    }
    base -= n;  // exclusive
    if (!live) continue;
    const uint64_t s0 = k * lc::kSeg, s1 = s0 + lc::kSeg < count ? s0 + lc::kSeg : count;
    if (holes != 0 || last_end != off + L || (uint64_t)total != s1 - s0) {
      bad = 1;
      continue;
    }
    bool h;
    walk_codes<Emit>(sp, bytes, start, hi, sh.table, tb, &n, &h, &emit, s0 + base, s1);
  }
  return __syncthreads_or(bad) ? lc::kCorrupt : lc::kOk;
}

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
  if (nseg <= (uint64_t)kWarpSegMax) return decode_segments_by_warps(sp, bytes, seg, nseg, count, tb, emit, sh);
  LC_GPU_PATH(kPathHuffThread);
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
