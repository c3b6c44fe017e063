// jax_lossy_comm frame format and codec core, shared by the CPU and CUDA handlers.
//
// One frame encodes one chunk x[rows, dim] of float32, bfloat16 or float16 values with an
// absolute error bound eb_abs: every finite value comes back with |x - x_hat| <= eb_abs,
// values the quantizer cannot honour (NaN, +-Inf, float rounding at the edge, range overflow)
// are stored exactly as outliers. Quantization has no prediction (Feng et al., SC24, sec. 4:
// prediction does not help on embedding vectors); whole code rows are deduplicated (hot ids
// repeat pooled vectors) and the dictionary codes and row indices are bit-packed or
// canonical-Huffman coded, whichever is smaller.
//
// Frame layout, version 1, all integers little-endian, varints are unsigned LEB128:
//   u8  magic 0xE5
//   u8  version (high nibble) | form (low nibble: 0 raw, 1 quantized)
//   u8  flags: bits 0-1 dtype (0 f32, 1 bf16, 2 f16), bit 2 mode (0 rel, 1 abs),
//       bit 3 dedup (an index section maps rows to dictionary rows; else identity),
//       bit 4 codes Huffman-coded (else bit-packed), bit 5 index Huffman-coded
//   u8  bits b of one quantization code (0..24)
//   u32 checksum over the whole frame with these four bytes read as zero (lc_checksum)
//   varint rows, varint dim
//   raw form:       rows*dim values in the input dtype
//   quantized form: f32 eb_abs, f32 base (the chunk minimum), varint n_outliers,
//                   [dedup: varint n_unique], codes section, [dedup: index section],
//                   outlier positions (pos_bytes each), outlier values (input dtype)
//   bit-packed section: count*bits bits, LSB first, padded to a byte
//   Huffman section:  varint nsym, nsym 4-bit code lengths (low nibble first), then u16 bit
//                     length of each segment of kSeg symbols, then one LSB-first bit stream of
//                     canonical codes padded to a byte; segment k starts at the sum of the
//                     lengths before it (segments decode independently, e.g. on a GPU)
// Decoding x_hat = base + (float)q * (2 * eb_abs) in float32, rounded to the output dtype.
//
// Everything here is plain C++ with no allocation: the caller hands in a workspace of
// lc_workspace_bytes(rows, dim) bytes. LC_HD marks functions usable on host and device.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#if defined(__CUDACC__)
#define LC_HD __host__ __device__ __forceinline__
#else
#define LC_HD inline
#endif
#define LC_RESTRICT __restrict__

#if !defined(__CUDACC__) && defined(__GNUC__)
#define LC_CPU_SIMD 1
#include "simd_cpu.h"
#else
#define LC_CPU_SIMD 0
#endif

namespace lc {

// ---------------------------------------------------------------- constants and status
constexpr uint8_t kMagic = 0xE5;
constexpr uint8_t kVersion = 1;
constexpr int kHeaderFixed = 8;         // magic, version|form, flags, bits, checksum
constexpr int kMaxBits = 24;            // codes stay exact in float32
constexpr int kMaxHuffLen = 12;         // decode table of at most 4096 entries
constexpr int kMaxHuffSymbols = 4096;   // larger alphabets are bit-packed
constexpr int kSeg = 1024;              // symbols per independently decodable segment

enum Form : int { kFormRaw = 0, kFormQuant = 1 };
enum DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
enum Mode : int { kRel = 0, kAbs = 1 };
// What the caller asks for; kAuto takes the smallest frame of all forms.
enum Codec : int { kCodecAuto = 0, kCodecRaw = 1, kCodecFixed = 2, kCodecDedup = 3,
                   kCodecEntropy = 4 };
enum Flag : int { kFlagDedup = 8, kFlagCodesHuff = 16, kFlagIndexHuff = 32 };

// Per-frame status, returned by the decoder and validator (0 = valid).
enum Status : int32_t {
  kOk = 0,
  kOverflow = 1,        // the encoder needed more than the capacity (nbytes < 0)
  kTruncated = 2,       // nbytes out of [header, capacity] or sections past the end
  kBadMagic = 3,
  kBadVersion = 4,
  kBadHeader = 5,       // a field out of range
  kShapeMismatch = 6,   // rows, dim or dtype differ from what the caller expects
  kBadChecksum = 7,
  kCorrupt = 8,         // a section that does not decode (bad code table, index range)
  kTrailingBytes = 9,   // sections end before nbytes
};

LC_HD int dtype_size(int dtype) { return dtype == kF32 ? 4 : 2; }

// ---------------------------------------------------------------- small helpers
LC_HD uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
LC_HD float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
LC_HD bool is_finite_bits(uint32_t u) { return (u & 0x7f800000u) != 0x7f800000u; }

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

LC_HD int bits_for(uint32_t v) {  // bits to hold values 0..v
  int b = 0;
  while (b < 32 && (v >> b) != 0) ++b;
  return b;
}

LC_HD float bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }
LC_HD uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
LC_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  if (exp == 0x1f) return u2f(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return u2f(sign);
    float v = (float)man * (1.0f / 16777216.0f);  // man * 2^-24, exact
    return (sign ? -v : v);
  }
  return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}
LC_HD uint16_t f32_to_f16(float f) {  // round to nearest even, overflow to Inf
  uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (a < 0x38800000u) {                                     // below 2^-14: subnormal
    if (a < 0x33000000u) return (uint16_t)sign;               // below 2^-25: zero
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;                                // 14 + (113 - e) - 1
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u;  // rebias exponent by -112
  uint32_t keep = r >> 13, rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (keep & 1u))) ++keep;
  return (uint16_t)(sign | keep);
}

LC_HD float load_value(const uint8_t* p, int dtype, size_t i) {
  if (dtype == kF32) { float f; memcpy(&f, p + 4 * i, 4); return f; }
  uint16_t h; memcpy(&h, p + 2 * i, 2);
  return dtype == kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
// Round a float32 to the output dtype and back, as the decoder stores it.
LC_HD float round_to_dtype(float f, int dtype) {
  if (dtype == kF32) return f;
  return dtype == kBF16 ? bf16_to_f32(f32_to_bf16(f)) : f16_to_f32(f32_to_f16(f));
}
LC_HD void store_value(uint8_t* p, int dtype, size_t i, float f) {
  if (dtype == kF32) { memcpy(p + 4 * i, &f, 4); return; }
  uint16_t h = dtype == kBF16 ? f32_to_bf16(f) : f32_to_f16(f);
  memcpy(p + 2 * i, &h, 2);
}

// |x - y| <= eb decided exactly in float32 (TwoSum gives the rounding error of x - y), so the
// CPU, CUDA and jax.numpy reference agree bit for bit. False for non-finite x, y or eb.
LC_HD bool within_bound(float x, float y, float eb) {
  float s = x - y;
  float bb = s - x;
  float err = (x - (s - bb)) + ((-y) - bb);
  float a = s < 0.0f ? -s : s;
  bool tie_ok = s > 0.0f ? err <= 0.0f : err >= 0.0f;  // exact |x - y| == eb or just below
  return (a < eb) | ((a == eb) & tie_ok);              // branch-free: the caller vectorises
}

// ---------------------------------------------------------------- checksum
LC_HD uint32_t fmix32(uint32_t h) {  // MurmurHash3 finalizer, a bijection
  h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
  return h;
}
// Sum over 32-bit little-endian words w_i (bytes 4..7 read as zero, the tail zero-padded) of
// fmix32(w_i ^ (i * 0x9E3779B9)), seeded with the length. A change of any one word always
// changes the sum; the sum is order-aware and reduces in parallel on a GPU.
LC_HD uint32_t checksum_word(const uint8_t* f, size_t n, size_t i) {
  uint32_t w = 0;
  if (i == 1) return fmix32(0u ^ (uint32_t)(1u * 0x9E3779B9u));
  size_t o = 4 * i;
  if (o + 4 <= n) {
    w = (uint32_t)f[o] | ((uint32_t)f[o + 1] << 8) | ((uint32_t)f[o + 2] << 16) |
        ((uint32_t)f[o + 3] << 24);
  } else {
    for (size_t k = 0; o + k < n; ++k) w |= (uint32_t)f[o + k] << (8 * k);
  }
  return fmix32(w ^ (uint32_t)(i * 0x9E3779B9u));
}
LC_HD uint32_t lc_checksum(const uint8_t* f, size_t n) {
  uint32_t h = fmix32((uint32_t)n * 0x27d4eb2fu + 0x165667b1u);
  size_t i = 0;
#if LC_CPU_SIMD
  uint32_t part = 0;
  i = (size_t)simd::checksum_prefix(f, n / 4, &part);
  h += part;
#endif
  for (; i < (n + 3) / 4; ++i) h += checksum_word(f, n, i);
  return h;
}

// ---------------------------------------------------------------- byte and bit I/O
LC_HD int varint_size(uint64_t v) { int n = 1; while (v >= 0x80) { v >>= 7; ++n; } return n; }
LC_HD size_t put_varint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) { p[n++] = (uint8_t)(v | 0x80); v >>= 7; }
  p[n++] = (uint8_t)v;
  return n;
}
LC_HD void put_u32(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
LC_HD void put_u64(uint8_t* p, uint64_t v) {
  put_u32(p, (uint32_t)v);
  put_u32(p + 4, (uint32_t)(v >> 32));
}
LC_HD uint32_t get_u32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// Bounds-checked reader over [p, end): never reads outside, records failure instead.
struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  bool ok;
  LC_HD bool need(size_t n) { if ((size_t)(end - p) < n) ok = false; return ok; }
  LC_HD uint64_t varint(uint64_t max) {
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
      if (!need(1)) return 0;
      uint8_t b = *p++;
      v |= (uint64_t)(b & 0x7f) << s;
      if (!(b & 0x80)) break;
      if (s >= 56) { ok = false; return 0; }
    }
    if (v > max) { ok = false; return 0; }
    return v;
  }
  LC_HD uint32_t u32() { if (!need(4)) return 0; uint32_t v = get_u32(p); p += 4; return v; }
  LC_HD const uint8_t* take(size_t n) { if (!need(n)) return nullptr; const uint8_t* q = p; p += n; return q; }
};

// LSB-first bit writer into a buffer the caller sized exactly; stores whole 32-bit words, which
// are always inside the frame being written.
struct BitWriter {
  uint8_t* p;
  uint64_t acc;
  int nacc;
  LC_HD void put(uint32_t v, int n) {  // n <= 32
    acc |= (uint64_t)v << nacc;
    nacc += n;
    if (nacc >= 32) { put_u32(p, (uint32_t)acc); p += 4; acc >>= 32; nacc -= 32; }
  }
  LC_HD uint8_t* flush() {
    while (nacc > 0) { *p++ = (uint8_t)acc; acc >>= 8; nacc -= 8; }
    acc = 0; nacc = 0;
    return p;
  }
};

// LSB-first bit reader over [p, end); reading past the end yields zeros and sets overrun.
struct BitReader {
  const uint8_t* p;
  const uint8_t* end;
  uint64_t acc;
  int nacc;
  bool overrun;
  // Branchless refill (F. Giesen, "Reading bits in far too many ways", variant 4): bytes
  // loaded beyond the whole ones consumed are loaded again at the same position later.
  LC_HD void refill() {
    if (end - p >= 8) {
      uint64_t w;
      memcpy(&w, p, 8);  // little-endian hosts and devices only (x86-64, aarch64, CUDA)
      acc |= w << nacc;
      p += (63 - nacc) >> 3;
      nacc |= 56;
      return;
    }
    while (nacc <= 56 && p < end) { acc |= (uint64_t)(*p++) << nacc; nacc += 8; }
  }
  LC_HD uint32_t peek(int n) { if (nacc < n) refill(); return (uint32_t)(acc & ((1ull << n) - 1)); }
  LC_HD void skip(int n) {
    if (n > nacc) { overrun = true; acc = 0; nacc = 0; return; }
    acc >>= n; nacc -= n;
  }
  LC_HD uint32_t get(int n) { uint32_t v = peek(n); skip(n); return v; }
};

LC_HD size_t packed_bytes(uint64_t count, int bits) { return (size_t)((count * (uint64_t)bits + 7) / 8); }

// ---------------------------------------------------------------- Huffman (canonical)
// Code lengths for freq[0..nsym) limited to kMaxHuffLen; symbols with freq 0 get length 0.
// tmp needs 2 * nsym uint32 (sorted pairs, lengths). One used symbol gets length 1.
// Lengths follow Moffat & Katajainen's in-place minimum-redundancy algorithm (WADS 1995),
// limited by the Kraft repair of zlib/miniz.
LC_HD void huff_lengths(const uint32_t* freq, int nsym, uint8_t* len, uint64_t* sorted,
                        uint32_t* A) {
  int n = 0;
  for (int s = 0; s < nsym; ++s) {
    len[s] = 0;
    if (freq[s]) sorted[n++] = ((uint64_t)freq[s] << 16) | (uint64_t)s;
  }
  if (n == 0) return;
  if (n == 1) { len[sorted[0] & 0xffff] = 1; return; }
  // Shell sort ascending by frequency (small n; no library sort on the device).
  for (int gap = n / 2; gap > 0; gap /= 2)
    for (int i = gap; i < n; ++i) {
      uint64_t v = sorted[i];
      int j = i;
      for (; j >= gap && sorted[j - gap] > v; j -= gap) sorted[j] = sorted[j - gap];
      sorted[j] = v;
    }
  for (int i = 0; i < n; ++i) A[i] = (uint32_t)(sorted[i] >> 16);
  // Moffat-Katajainen: A holds frequencies ascending; afterwards, code lengths.
  {
    int root = 0, leaf = 2, next;
    A[0] += A[1];
    for (next = 1; next < n - 1; ++next) {
      if (leaf >= n || A[root] < A[leaf]) { A[next] = A[root]; A[root++] = (uint32_t)next; }
      else A[next] = A[leaf++];
      if (leaf >= n || (root < next && A[root] < A[leaf])) { A[next] += A[root]; A[root++] = (uint32_t)next; }
      else A[next] += A[leaf++];
    }
    A[n - 2] = 0;
    for (next = n - 3; next >= 0; --next) A[next] = A[A[next]] + 1;
    int avbl = 1, used = 0, dpth = 0;
    root = n - 2; next = n - 1;
    while (avbl > 0) {
      while (root >= 0 && (int)A[root] == dpth) { ++used; --root; }
      while (avbl > used) { A[next--] = (uint32_t)dpth; --avbl; }
      avbl = 2 * used; ++dpth; used = 0;
    }
  }
  // Count per length, then enforce the maximum length keeping Kraft's sum at exactly one.
  uint32_t count[33];
  for (int i = 0; i <= 32; ++i) count[i] = 0;
  for (int i = 0; i < n; ++i) count[A[i] > 32 ? 32 : A[i]]++;
  for (int i = kMaxHuffLen + 1; i <= 32; ++i) { count[kMaxHuffLen] += count[i]; count[i] = 0; }
  uint32_t total = 0;
  for (int i = kMaxHuffLen; i > 0; --i) total += count[i] << (kMaxHuffLen - i);
  while (total != (1u << kMaxHuffLen)) {
    count[kMaxHuffLen]--;
    for (int i = kMaxHuffLen - 1; i > 0; --i)
      if (count[i]) { count[i]--; count[i + 1] += 2; break; }
    total--;
  }
  // Most frequent symbols (end of the ascending list) take the shortest lengths.
  int k = n - 1;
  for (int l = 1; l <= kMaxHuffLen; ++l)
    for (uint32_t c = 0; c < count[l]; ++c) len[sorted[k--] & 0xffff] = (uint8_t)l;
}

// Canonical codes (bit-reversed for LSB-first streams) from lengths. Returns false when the
// lengths over-subscribe the code space (a corrupt table).
LC_HD bool huff_codes(const uint8_t* len, int nsym, uint16_t* code, int* max_len) {
  uint32_t count[kMaxHuffLen + 1], next[kMaxHuffLen + 2];
  for (int i = 0; i <= kMaxHuffLen; ++i) count[i] = 0;
  int ml = 0;
  for (int s = 0; s < nsym; ++s) {
    if (len[s] > kMaxHuffLen) return false;
    count[len[s]]++;
    if (len[s] > ml) ml = len[s];
  }
  count[0] = 0;
  uint32_t kraft = 0;
  for (int l = 1; l <= kMaxHuffLen; ++l) kraft += count[l] << (kMaxHuffLen - l);
  if (kraft > (1u << kMaxHuffLen)) return false;
  // Deflate's canonical assignment (RFC 1951, sec. 3.2.2).
  uint32_t c = 0;
  for (int l = 1; l <= kMaxHuffLen; ++l) { c = (c + count[l - 1]) << 1; next[l] = c; }
  for (int s = 0; s < nsym; ++s) {
    int l = len[s];
    if (!l) { code[s] = 0; continue; }
    uint32_t v = next[l]++;
    v = ((v & 0x5555u) << 1) | ((v >> 1) & 0x5555u);  // reverse 16 bits, keep the top l
    v = ((v & 0x3333u) << 2) | ((v >> 2) & 0x3333u);
    v = ((v & 0x0f0fu) << 4) | ((v >> 4) & 0x0f0fu);
    v = ((v & 0x00ffu) << 8) | ((v >> 8) & 0x00ffu);
    code[s] = (uint16_t)(v >> (16 - l));
  }
  *max_len = ml;
  return true;
}

// Decode table of 2^table_bits entries: (symbol << 8) | length; length 0 marks a hole.
LC_HD void huff_table(const uint8_t* len, const uint16_t* code, int nsym, int table_bits,
                      uint32_t* table) {
  uint32_t size = 1u << table_bits;
  for (uint32_t i = 0; i < size; ++i) table[i] = 0;
  for (int s = 0; s < nsym; ++s) {
    int l = len[s];
    if (!l) continue;
    for (uint32_t i = code[s]; i < size; i += (1u << l)) table[i] = ((uint32_t)s << 8) | (uint32_t)l;
  }
}

// ---------------------------------------------------------------- workspace
// Scratch one chunk needs; the handler gives each worker one such block.
struct Workspace {
  uint32_t* codes;      // [n] quantization codes
  uint32_t* outliers;   // [n] outlier positions
  float* dict_vals;     // [n] decoder: dictionary values; encoder: dictionary codes (as u32)
  uint8_t* ok;          // [n] encoder: value honoured by its code
  int32_t* hash;        // [hash_size] row hash table
  uint32_t* dict_rows;  // [rows] encoder: dictionary entry of each distinct input row
  uint32_t* index;      // [rows] dictionary index of each row
  uint8_t* uvals;       // [n * 4 bytes] encoder: distinct input rows, compacted
  uint32_t* frow;       // [rows] encoder: distinct input row of each row
  uint32_t* ostart;     // [rows] encoder: first outlier of each distinct input row
  uint32_t* ocount;     // [rows] encoder: outliers of each distinct input row
  uint32_t* first;      // [rows] encoder: first row of each distinct row (dedup_rows)
  uint32_t* freq;       // [kMaxHuffSymbols]
  uint32_t* tmp;        // [kMaxHuffSymbols] Huffman scratch / decode table
  uint32_t* hist;       // [2 * kMaxHuffSymbols] encoder: histogram tables
  float* lut;           // [kMaxHuffSymbols] decoder: value of each code
  uint64_t* sorted;     // [kMaxHuffSymbols]
  uint16_t* code_a;     // [kMaxHuffSymbols] codes section Huffman codes
  uint16_t* code_b;     // [kMaxHuffSymbols] index section Huffman codes
  uint8_t* len_a;       // [kMaxHuffSymbols]
  uint8_t* len_b;       // [kMaxHuffSymbols]
  uint32_t hash_size;
};

LC_HD uint32_t hash_size_for(uint64_t rows) {
  uint32_t h = 16;
  while (h < 2 * rows) h <<= 1;
  return h;
}
LC_HD size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }
LC_HD uint64_t segments_for(uint64_t count) { return (count + kSeg - 1) / kSeg; }
LC_HD size_t workspace_bytes(uint64_t rows, uint64_t dim) {
  uint64_t n = rows * dim;
  size_t b = 0;
  b += align16(4 * n) * 3 + align16(n);               // codes, outliers, dict_vals, ok
  b += align16(4 * (size_t)hash_size_for(rows));      // hash
  b += align16(4 * rows) * 6 + align16(4 * n);        // dict_rows, index, frow, ostart, ocount, first, uvals
  b += align16(4 * kMaxHuffSymbols) * 5;              // freq, tmp, hist, lut
  b += align16(8 * kMaxHuffSymbols);                  // sorted
  b += align16(2 * kMaxHuffSymbols) * 2 + align16(kMaxHuffSymbols) * 2;
  return b;
}
LC_HD Workspace carve_workspace(uint8_t* base, uint64_t rows, uint64_t dim) {
  Workspace w;
  uint64_t n = rows * dim;
  size_t o = 0;
  w.codes = (uint32_t*)(base + o); o += align16(4 * n);
  w.outliers = (uint32_t*)(base + o); o += align16(4 * n);
  w.dict_vals = (float*)(base + o); o += align16(4 * n);
  w.ok = base + o; o += align16(n);
  w.hash_size = hash_size_for(rows);
  w.hash = (int32_t*)(base + o); o += align16(4 * (size_t)w.hash_size);
  w.dict_rows = (uint32_t*)(base + o); o += align16(4 * rows);
  w.index = (uint32_t*)(base + o); o += align16(4 * rows);
  w.frow = (uint32_t*)(base + o); o += align16(4 * rows);
  w.ostart = (uint32_t*)(base + o); o += align16(4 * rows);
  w.ocount = (uint32_t*)(base + o); o += align16(4 * rows);
  w.first = (uint32_t*)(base + o); o += align16(4 * rows);
  w.uvals = base + o; o += align16(4 * n);
  w.freq = (uint32_t*)(base + o); o += align16(4 * kMaxHuffSymbols);
  w.tmp = (uint32_t*)(base + o); o += align16(4 * kMaxHuffSymbols);
  w.hist = (uint32_t*)(base + o); o += align16(8 * kMaxHuffSymbols);
  w.lut = (float*)(base + o); o += align16(4 * kMaxHuffSymbols);
  w.sorted = (uint64_t*)(base + o); o += align16(8 * kMaxHuffSymbols);
  w.code_a = (uint16_t*)(base + o); o += align16(2 * kMaxHuffSymbols);
  w.code_b = (uint16_t*)(base + o); o += align16(2 * kMaxHuffSymbols);
  w.len_a = base + o; o += align16(kMaxHuffSymbols);
  w.len_b = base + o; o += align16(kMaxHuffSymbols);
  return w;
}

// ---------------------------------------------------------------- sizes and capacity
LC_HD int pos_bytes_for(uint64_t n) { return n <= 0x100 ? 1 : n <= 0x10000 ? 2 : n <= 0x1000000 ? 3 : 4; }
LC_HD size_t header_bytes(uint64_t rows, uint64_t dim) {
  return kHeaderFixed + varint_size(rows) + varint_size(dim);
}
LC_HD size_t raw_frame_bytes(uint64_t rows, uint64_t dim, int dtype) {
  return header_bytes(rows, dim) + (size_t)(rows * dim) * dtype_size(dtype);
}
// The fixed-rate form without outliers: header, eb, base, n_outliers = 0, codes.
LC_HD size_t fixed_frame_bytes(uint64_t rows, uint64_t dim, int bits) {
  return header_bytes(rows, dim) + 8 + 1 + packed_bytes(rows * dim, bits);
}
// Largest code in REL mode for a relative bound eb_rel: range / (2 eb_rel range) = 1/(2 eb_rel),
// plus one for float rounding.
LC_HD int rel_bits_for(double eb_rel) {
  double m = 1.0 / (2.0 * eb_rel);
  if (!(m < (double)(1u << kMaxBits))) return 32;
  return bits_for((uint32_t)m + 1u);
}

// ---------------------------------------------------------------- bit-packed sections
// Packs count codes of `bits` bits LSB first. Widths up to 16 go 8 codes (bits bytes) at a
// time with the width a compile-time constant; wider ones through the generic writer.
template <int B>
LC_HD uint8_t* pack_fixed(uint8_t* o, const uint32_t* c, uint64_t count) {
  uint64_t i = 0;
  for (; i + 8 <= count; i += 8, o += B) {
    uint64_t lo = 0, hi = 0;
    for (int k = 0; k < 8; ++k) {
      int s = k * B;
      if (s < 64) lo |= (uint64_t)c[i + k] << s;
      if (s + B > 64) hi |= (uint64_t)c[i + k] >> (s < 64 ? 64 - s : 0) << (s < 64 ? 0 : s - 64);
    }
    uint8_t tmp[16];
    memcpy(tmp, &lo, 8);
    memcpy(tmp + 8, &hi, 8);
    memcpy(o, tmp, B);
  }
  BitWriter bw = {o, 0, 0};
  for (; i < count; ++i) bw.put(c[i], B);
  return bw.flush();
}
LC_HD uint8_t* write_packed(uint8_t* o, const uint32_t* c, uint64_t count, int bits) {
#if LC_CPU_SIMD
  const uint64_t m = simd::pack_codes_prefix(o, c, count, bits);  // whole bytes: m % 8 == 0
  o += m / 8 * bits;
  c += m;
  count -= m;
#endif
  switch (bits) {
    case 0: return o;
    case 1: return pack_fixed<1>(o, c, count);
    case 2: return pack_fixed<2>(o, c, count);
    case 3: return pack_fixed<3>(o, c, count);
    case 4: return pack_fixed<4>(o, c, count);
    case 5: return pack_fixed<5>(o, c, count);
    case 6: return pack_fixed<6>(o, c, count);
    case 7: return pack_fixed<7>(o, c, count);
    case 8: return pack_fixed<8>(o, c, count);
    case 9: return pack_fixed<9>(o, c, count);
    case 10: return pack_fixed<10>(o, c, count);
    case 11: return pack_fixed<11>(o, c, count);
    case 12: return pack_fixed<12>(o, c, count);
    default: break;
  }
  BitWriter bw = {o, 0, 0};
  for (uint64_t i = 0; i < count; ++i) bw.put(c[i], bits);
  return bw.flush();
}

// Replaces code i (bits <= 8, so within two bytes) of a bit-packed section.
LC_HD void set_packed(uint8_t* sec, uint64_t i, int bits, uint32_t q) {
  const uint64_t b = i * (uint64_t)bits;
  const uint32_t mask = ((1u << bits) - 1u) << (b % 8);
  uint32_t v = (uint32_t)sec[b / 8] | ((uint32_t)sec[b / 8 + 1] << 8);
  v = (v & ~mask) | (q << (b % 8));
  sec[b / 8] = (uint8_t)v;
  sec[b / 8 + 1] = (uint8_t)(v >> 8);
}

// Unpacks count codes of width B and calls emit(i, code).
template <int B, typename EmitFn>
LC_HD void unpack_fixed(const uint8_t* p, uint64_t count, EmitFn& emit) {
  uint64_t i = 0;
  const uint32_t mask = (1u << B) - 1u;
  for (; i + 8 <= count; i += 8, p += B) {
    uint8_t tmp[16] = {0};
    memcpy(tmp, p, B);
    uint64_t lo, hi;
    memcpy(&lo, tmp, 8);
    memcpy(&hi, tmp + 8, 8);
    for (int k = 0; k < 8; ++k) {
      int s = k * B;
      uint64_t v = s < 64 ? (lo >> s) : 0;
      if (s > 0 && s < 64 && s + B > 64) v |= hi << (64 - s);
      if (s >= 64) v = hi >> (s - 64);
      emit(i + k, (uint32_t)v & mask);
    }
  }
  BitReader br = {p, p + packed_bytes(count - i, B), 0, 0, false};
  for (; i < count; ++i) emit(i, br.get(B));
}

// ---------------------------------------------------------------- Huffman sections
struct SectionPlan {
  bool huff;
  size_t bytes;  // whole section
};

// Huffman section for sym[0..count): lengths and codes into len/code; chosen when smaller than
// bit-packing at `bits` bits. The size follows from the histogram alone.
LC_HD SectionPlan plan_section(const uint32_t* sym, uint64_t count, int nsym, int bits,
                               bool allow_huff, Workspace& w, uint8_t* len, uint16_t* code) {
  SectionPlan p = {false, packed_bytes(count, bits)};
  if (!allow_huff || count == 0 || nsym < 2 || nsym > kMaxHuffSymbols) return p;
  // Four interleaved histograms (the second in tmp, free until huff_lengths): peaked codes
  // (cotangents, most values in the central bin) would otherwise chain every increment
  // through one counter's store-to-load forwarding.
  // Few symbols per counter (dictionary indices) gain nothing from it: one table there.
  uint32_t* const h0 = w.freq;
  uint32_t* const h1 = w.tmp;
  uint32_t* const h2 = w.hist;
  uint32_t* const h3 = w.hist + kMaxHuffSymbols;
  const bool four = count >= 16 * (uint64_t)nsym;
  for (int s = 0; s < nsym; ++s) h0[s] = 0;
  if (four)
    for (int s = 0; s < nsym; ++s) h1[s] = h2[s] = h3[s] = 0;
  const uint64_t n4 = four ? count & ~(uint64_t)3 : 0;
  uint64_t i = 0;
  for (; i < n4; i += 4) {
    h0[sym[i]]++;
    h1[sym[i + 1]]++;
    h2[sym[i + 2]]++;
    h3[sym[i + 3]]++;
  }
  for (; i < count; ++i) h0[sym[i]]++;
  if (four)
    for (int s = 0; s < nsym; ++s) h0[s] += h1[s] + h2[s] + h3[s];
  huff_lengths(w.freq, nsym, len, w.sorted, w.tmp);
  int ml = 0;
  if (!huff_codes(len, nsym, code, &ml)) return p;
  uint64_t total_bits = 0;
  for (int s = 0; s < nsym; ++s) total_bits += (uint64_t)w.freq[s] * len[s];
  size_t b = varint_size((uint64_t)nsym) + (size_t)(nsym + 1) / 2 + 2 * segments_for(count) +
             (size_t)((total_bits + 7) / 8);
  if (b < p.bytes) { p.huff = true; p.bytes = b; }
  return p;
}

// The section's bytes end at or before `limit` (the end of the caller's buffer); the writer may
// store zeros up to 8 bytes past its current position, never past `limit`.
LC_HD uint8_t* write_huff(uint8_t* o, const uint32_t* sym, uint64_t count, int nsym,
                          const uint8_t* len, const uint16_t* code, const uint8_t* limit) {
  o += put_varint(o, (uint64_t)nsym);
  for (int s = 0; s < nsym; s += 2) *o++ = (uint8_t)(len[s] | ((s + 1 < nsym ? len[s + 1] : 0) << 4));
  uint8_t* seg_len = o;  // filled in as the segments are written
  o += 2 * segments_for(count);
  // LSB-first: acc holds the nacc (< 8 between groups) bits not yet stored at o.
  uint64_t acc = 0;
  uint32_t nacc = 0;
  uint64_t k = 0;
  for (uint64_t s0 = 0; s0 < count; s0 += kSeg, ++k) {
    uint64_t s1 = s0 + kSeg < count ? s0 + kSeg : count;
    uint32_t bits = 0;
    uint64_t i = s0;
    // Four codes (<= 4 * kMaxHuffLen = 48 bits) per group, then every whole byte goes out in
    // one 8-byte store: no data-dependent branch (zeros above the carried bits).
    for (; i + 4 <= s1 && limit - o >= 8; i += 4) {
      const uint32_t a = sym[i], b = sym[i + 1], c = sym[i + 2], d = sym[i + 3];
      const uint32_t la = len[a], lb = len[b], lc_ = len[c], ld = len[d];
      const uint64_t v = (uint64_t)(code[a] | ((uint32_t)code[b] << la)) |
                         ((uint64_t)(code[c] | ((uint32_t)code[d] << lc_)) << (la + lb));
      const uint32_t nb = la + lb + lc_ + ld;
      acc |= v << nacc;
      nacc += nb;
      bits += nb;
      put_u64(o, acc);
      o += nacc >> 3;
      acc >>= nacc & ~7u;
      nacc &= 7u;
    }
    for (; i < s1; ++i) {
      const uint32_t v = sym[i];
      acc |= (uint64_t)code[v] << nacc;
      nacc += len[v];
      bits += len[v];
      for (; nacc >= 8; nacc -= 8, acc >>= 8) *o++ = (uint8_t)acc;
    }
    seg_len[2 * k] = (uint8_t)bits;
    seg_len[2 * k + 1] = (uint8_t)(bits >> 8);
  }
  if (nacc) *o++ = (uint8_t)acc;
  return o;
}

// ---------------------------------------------------------------- value access per dtype
template <int D> struct Val;
template <> struct Val<kF32> {
  static LC_HD float load(const uint8_t* p, uint64_t i) { float f; memcpy(&f, p + 4 * i, 4); return f; }
  static LC_HD float round(float f) { return f; }
};
template <> struct Val<kBF16> {
  static LC_HD float load(const uint8_t* p, uint64_t i) { uint16_t h; memcpy(&h, p + 2 * i, 2); return bf16_to_f32(h); }
  static LC_HD float round(float f) { return bf16_to_f32(f32_to_bf16(f)); }
};
template <> struct Val<kF16> {
  static LC_HD float load(const uint8_t* p, uint64_t i) { uint16_t h; memcpy(&h, p + 2 * i, 2); return f16_to_f32(h); }
  static LC_HD float round(float f) { return f16_to_f32(f32_to_f16(f)); }
};

// Round half to even for v >= 0 without libm (the x86-64 baseline has no roundss): below 2^23,
// adding 2^23 leaves no fraction bits, so the FPU's round-to-nearest-even does it. == rintf(v).
LC_HD float rint_nonneg(float v) { return v < 8388608.0f ? (v + 8388608.0f) - 8388608.0f : v; }

// ---------------------------------------------------------------- encoder
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

// Codes q = clamp(rint((x - vmin) * inv), 0, maxf) (0 for non-finite x) of positions [i0, n);
// the positions whose reconstruction vmin + q * step, rounded to the dtype, is not within eb_abs
// of x go to `bad` in increasing order. Returns their count.
template <int D>
LC_HD uint64_t quantize_verify(const uint8_t* in, uint64_t n, float vmin, float inv, float step,
                               float eb_abs, float maxf, uint32_t* LC_RESTRICT codes,
                               uint32_t* LC_RESTRICT bad, uint64_t i0 = 0) {
  uint64_t i = i0, nbad = 0;
#if LC_CPU_SIMD
  if (D == kF32 && i0 == 0)
    i = simd::quantize_f32_prefix((const float*)in, n, vmin, inv, step, eb_abs, maxf, codes, bad, &nbad);
#endif
  for (; i < n; ++i) {
    float v = Val<D>::load(in, i);
    bool fin = v - v == 0.0f;
    float qf = rint_nonneg((v - vmin) * inv);
    qf = qf >= 0.0f ? qf : 0.0f;  // NaN and -Inf give 0
    qf = qf <= maxf ? qf : maxf;
    qf = fin ? qf : 0.0f;
    float rec = Val<D>::round(vmin + qf * step);
    codes[i] = (uint32_t)(int32_t)qf;  // qf < 2^24
    if (!(fin & within_bound(v, rec, eb_abs))) bad[nbad++] = (uint32_t)i;
  }
  return nbad;
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
  const size_t hdr = header_bytes(rows, dim);
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
  // 1. Range over finite values; +0.0 for a zero bound whatever the sign order of the scan.
  float vmin = 0.0f, vmax = 0.0f;
  if (n > 0) finite_range<D>(src, ns, &vmin, &vmax);
  if (!(vmin <= vmax)) { vmin = 0.0f; vmax = 0.0f; }  // no finite value
  vmin += 0.0f;
  vmax += 0.0f;
  // 2. Feasibility: a bound the codes can honour with at most kMaxBits bits.
  const float range = vmax - vmin;
  const float eb_abs = mode == kRel ? eb * range : eb;
  const float step = eb_abs * 2.0f;
  const bool constant = range == 0.0f;
  bool quant_ok = codec != kCodecRaw && n > 0 && eb >= 0.0f && is_finite_bits(f2u(eb)) &&
                  is_finite_bits(f2u(eb_abs));
  float inv = 0.0f;
  uint32_t maxcode = 0;
  if (quant_ok && !constant) {
    quant_ok = is_finite_bits(f2u(step)) && step > 0.0f;
    if (quant_ok) {
      inv = 1.0f / step;
      float mc = rint_nonneg(range * inv);
      quant_ok = is_finite_bits(f2u(inv)) && mc < (float)(1u << kMaxBits);
      if (quant_ok) maxcode = (uint32_t)mc;
    }
  }
  // 3. Quantize and verify every value (branch-free, vectorisable), then collect outliers,
  //    trying the neighbouring code for values at a rounding midpoint. Positions are in src.
  //    The fixed-rate codec on the CPU packs the codes of the first `packed` values as it goes,
  //    straight into the frame at the offset they have when n_outliers < 128 (moved later if
  //    not), keeping in w.codes only what the retry reads. Where they would not fit, neither
  //    would the fixed-rate frame: the codes are then only counted.
  uint64_t n_sout = 0, n_out = 0, packed = 0;
  const size_t psec_off = hdr + 8 + 1;
  uint8_t* psec = nullptr;
  if (quant_ok) {
    const float maxf = (float)maxcode;
    uint64_t n_bad = 0;
#if LC_CPU_SIMD
    if (D == kF32 && codec == kCodecFixed && psec_off + packed_bytes(n, bits_for(maxcode)) <= capacity) {
      psec = out + psec_off;
      packed = simd::quantize_pack_f32_prefix((const float*)src, ns, vmin, inv, step, eb_abs, maxf,
                                              bits_for(maxcode), psec, w.codes, w.outliers, &n_bad);
    }
#endif
    n_bad += quantize_verify<D>(src, ns, vmin, inv, step, eb_abs, maxf, w.codes, w.outliers + n_bad,
                                packed);
    for (uint64_t k = 0; k < n_bad; ++k) {  // compacts w.outliers in place
      const uint32_t i = w.outliers[k];
      float v = Val<D>::load(src, i);
      if (v - v == 0.0f) {
        float qf = (float)w.codes[i];
        float rec = Val<D>::round(vmin + qf * step);
        float q2 = qf + (v > rec ? 1.0f : -1.0f);
        if (q2 >= 0.0f && q2 <= maxf && within_bound(v, Val<D>::round(vmin + q2 * step), eb_abs)) {
          w.codes[i] = (uint32_t)q2;
          if (i < packed) set_packed(psec, i, bits_for(maxcode), (uint32_t)q2);
          continue;
        }
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
  const int bits = quant_ok ? bits_for(maxcode) : 0;
  const int pb = pos_bytes_for(n);
  const size_t out_bytes = (size_t)n_out * (size_t)(pb + isz);
  const size_t qhdr = hdr + 8 + varint_size(n_out);

  // 4. Candidate sizes: raw, fixed-rate codes, dictionary of distinct code rows.
  const size_t kNone = (size_t)-1;
  const size_t fixed_bytes = quant_ok ? qhdr + packed_bytes(n, bits) + out_bytes : kNone;
  size_t dict_bytes = kNone;
  SectionPlan pc = {false, 0}, pi = {false, 0};
  uint64_t n_unique = rows;
  uint32_t* dcodes = w.codes;  // the dictionary: the codes themselves while no code row repeats
  const bool allow_huff = codec == kCodecAuto || codec == kCodecEntropy;
  if (want_dict && quant_ok) {
    // Distinct code rows (first-occurrence order) among the distinct input rows.
    n_unique = dedup_rows((const uint8_t*)w.codes, srows, 4 * (size_t)dim, w, w.first, w.dict_rows);
    if (n_unique < srows) {
      dcodes = (uint32_t*)w.dict_vals;
      compact_rows((const uint8_t*)w.codes, n_unique, 4 * (size_t)dim, w.first, (uint8_t*)dcodes);
    }
    for (uint64_t r = 0; r < rows; ++r) w.index[r] = w.dict_rows[fdedup ? w.frow[r] : r];
    pc = plan_section(dcodes, n_unique * dim, (int)maxcode + 1, bits, allow_huff, w, w.len_a,
                      w.code_a);
    const bool identity = n_unique == rows;
    // Indices are worth entropy coding when rows repeat (hot ids), not when most are distinct.
    if (!identity)
      pi = plan_section(w.index, rows, (int)n_unique, bits_for((uint32_t)(n_unique - 1)),
                        allow_huff && 4 * n_unique <= rows, w, w.len_b, w.code_b);
    dict_bytes = qhdr + pc.bytes + out_bytes + (identity ? 0 : (size_t)varint_size(n_unique) + pi.bytes);
  }
  int best_kind = 0;  // 0 raw, 1 fixed-rate, 2 dictionary
  size_t best = raw_bytes;
  if (quant_ok) {
    if (codec == kCodecFixed) { best_kind = 1; best = fixed_bytes; }
    else if (codec == kCodecDedup || codec == kCodecEntropy) { best_kind = 2; best = dict_bytes; }
    else if (codec == kCodecAuto) {
      if (fixed_bytes < best) { best_kind = 1; best = fixed_bytes; }
      if (dict_bytes < best) { best_kind = 2; best = dict_bytes; }
    }
  }

  if (best > capacity && raw_bytes <= capacity) { best_kind = 0; best = raw_bytes; }  // fits raw
  EncodeResult res;
  if (best > capacity) {
    for (size_t i = 0; i < capacity; ++i) out[i] = 0;
    res.nbytes = -(int64_t)best;
    return res;
  }
  // 5. Write the chosen form.
  uint8_t* o = out;
  o[0] = kMagic;
  put_u32(o + 4, 0);
  o += kHeaderFixed;
  o += put_varint(o, rows);
  o += put_varint(o, dim);
  if (best_kind == 0) {
    out[1] = (uint8_t)((kVersion << 4) | kFormRaw);
    out[2] = (uint8_t)D;
    out[3] = 0;
    if (n) memcpy(o, in, (size_t)n * isz);  // `in` may be null for an empty chunk
    o += (size_t)n * isz;
  } else {
    // A dictionary form with every row distinct and packed codes is the fixed-rate frame.
    const bool dedup = best_kind == 2 && n_unique != rows;
    const bool ch = best_kind == 2 && pc.huff;
    const bool ih = dedup && pi.huff;
    out[1] = (uint8_t)((kVersion << 4) | kFormQuant);
    out[2] = (uint8_t)(D | (mode == kAbs ? 4 : 0) | (dedup ? kFlagDedup : 0) |
                       (ch ? kFlagCodesHuff : 0) | (ih ? kFlagIndexHuff : 0));
    out[3] = (uint8_t)bits;
    const uint64_t pre = best_kind == 1 ? packed : 0;  // codes packed already, moved into place
    const size_t pre_bytes = (size_t)(pre / 8 * bits);
    if (pre && out + qhdr != psec) memmove(out + qhdr, psec, pre_bytes);
    put_u32(o, f2u(eb_abs)); o += 4;
    put_u32(o, f2u(vmin)); o += 4;
    o += put_varint(o, n_out);
    if (dedup) o += put_varint(o, n_unique);
    if (best_kind == 1 && fdedup)  // expand the distinct rows' codes in place, last row first
      for (uint64_t r = rows; r-- > 0;) memmove(w.codes + r * dim, w.codes + (uint64_t)w.frow[r] * dim, 4 * dim);
    const uint32_t* codes = best_kind == 2 ? dcodes : w.codes;  // identity dictionary == codes
    const uint64_t nc = best_kind == 2 ? n_unique * dim : n;
    o = ch ? write_huff(o, codes, nc, (int)maxcode + 1, w.len_a, w.code_a, out + capacity)
           : write_packed(o + pre_bytes, codes + pre, nc - pre, bits);
    if (dedup)
      o = ih ? write_huff(o, w.index, rows, (int)n_unique, w.len_b, w.code_b, out + capacity)
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
    for (uint64_t k = 0; k < n_out; ++k) {
      uint32_t pos = opos[k];
      for (int b = 0; b < pb; ++b) *o++ = (uint8_t)(pos >> (8 * b));
    }
    for (uint64_t k = 0; k < n_out; ++k) {
      memcpy(o, in + (size_t)opos[k] * isz, isz);
      o += isz;
    }
  }
  size_t used = (size_t)(o - out);
  for (size_t i = used; i < capacity; ++i) out[i] = 0;
  put_u32(out + 4, lc_checksum(out, used));
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

// ---------------------------------------------------------------- decoder
struct FrameHeader {
  int form, dtype, mode, bits;
  bool dedup, codes_huff, index_huff;
  uint64_t rows, dim, n_outliers, n_unique;
  float eb_abs, base;
};

// Reads one Huffman section's code table into len/code/table; false if malformed.
LC_HD bool read_huff_table(Reader& r, int max_nsym, uint8_t* len, uint16_t* code,
                           uint32_t* table, int* table_bits, int* nsym_out) {
  uint64_t nsym = r.varint((uint64_t)max_nsym);
  if (!r.ok || nsym < 1) return false;
  const uint8_t* nib = r.take((size_t)(nsym + 1) / 2);
  if (!nib) return false;
  for (uint64_t s = 0; s < nsym; ++s) len[s] = (uint8_t)((nib[s / 2] >> (4 * (s & 1))) & 15);
  int ml = 0;
  if (!huff_codes(len, (int)nsym, code, &ml) || ml == 0) return false;
  huff_table(len, code, (int)nsym, ml, table);
  *table_bits = ml;
  *nsym_out = (int)nsym;
  return true;
}

// One segment being decoded: its reader (positioned at the segment's first bit), the next
// symbol index, the end index, and the bits consumed so far.
struct SegCursor {
  BitReader br;
  uint64_t i, s1, bits;
};

LC_HD SegCursor seg_cursor(const uint8_t* sp, size_t bytes, uint64_t bit_off, uint64_t s0,
                           uint64_t s1) {
  SegCursor c = {{sp + bit_off / 8, sp + bytes, 0, 0, false}, s0, s1, 0};
  c.br.peek(8);
  c.br.skip((int)(bit_off % 8));
  return c;
}

// Four symbols after one refill (4 x 12 bits fit in the 56 bits a refill guarantees).
template <typename EmitFn>
LC_HD bool seg_step4(SegCursor& c, const uint32_t* table, uint64_t mask, EmitFn& emit) {
  c.br.refill();
  for (int j = 0; j < 4; ++j) {
    uint32_t e = table[c.br.acc & mask];
    int l = (int)(e & 0xff);
    if (l == 0) return false;
    c.br.acc >>= l;
    c.br.nacc -= l;
    c.bits += (uint64_t)l;
    emit(c.i + j, e >> 8);
  }
  c.i += 4;
  return true;
}

template <typename EmitFn>
LC_HD bool seg_finish(SegCursor& c, const uint32_t* table, int tb, uint64_t mask, EmitFn& emit) {
  while (c.i + 4 <= c.s1 && c.br.end - c.br.p >= 8)
    if (!seg_step4(c, table, mask, emit)) return false;
  for (; c.i < c.s1; ++c.i) {
    uint32_t e = table[c.br.peek(tb)];
    int l = (int)(e & 0xff);
    if (l == 0) return false;
    c.br.skip(l);
    c.bits += (uint64_t)l;
    emit(c.i, e >> 8);
  }
  return !c.br.overrun;
}

// Two-symbol decode table over the same tb-bit index as `table` ((sym << 8) | len entries):
// len1 + len2 | (two ? 32 : 0) | sym1 << 6 | sym2 << 18, where `two` says that the bits after
// the first code hold a whole second one within the tb-bit window (so len1 + len2 <= tb);
// 0 for a hole. Returns how many entries hold two symbols.
LC_HD uint32_t huff_pair_table(const uint32_t* table, int tb, uint32_t* pair) {
  uint32_t twos = 0;
  for (uint32_t x = 0; x < (1u << tb); ++x) {
    const uint32_t e1 = table[x], l1 = e1 & 0xff;
    uint32_t v = l1 ? l1 | ((e1 >> 8) << 6) : 0;
    if (l1) {
      const uint32_t e2 = table[x >> l1], l2 = e2 & 0xff;
      if (l2 && l2 <= (uint32_t)tb - l1) {
        v = (l1 + l2) | 32u | ((e1 >> 8) << 6) | ((e2 >> 8) << 18);
        ++twos;
      }
    }
    pair[x] = v;
  }
  return twos;
}

// Two segments decoded interleaved with the two-symbol table while each has 8 symbols and 8
// readable bytes left: four lookups per refill (<= 4 * tb <= 48 bits), one or two symbols
// each. A lone symbol's second emit lands on the next position, which the next lookup (or
// seg_finish) overwrites with the right value. A hole is noted and reported at the end (it
// consumes no bits; the symbol count bounds the loop). Leaves the cursors for seg_finish;
// bits consumed = bit position - the segment's offset.
template <typename EmitFn>
LC_HD bool huff_pair_bulk(SegCursor& a, SegCursor& b, const uint8_t* sp, uint64_t off_a,
                          uint64_t off_b, const uint32_t* pair, uint64_t mask, EmitFn& emit) {
  const uint8_t* pa = a.br.p;
  const uint8_t* pb = b.br.p;
  const uint8_t* const end = a.br.end;
  uint64_t acc_a = a.br.acc, acc_b = b.br.acc, i = a.i, j = b.i;
  int na = a.br.nacc, nb = b.br.nacc;
  uint32_t hole = 0;
  while (i + 8 <= a.s1 && j + 8 <= b.s1 && end - pa >= 8 && end - pb >= 8) {
    uint64_t wa, wb;  // branchless refill, as BitReader::refill
    memcpy(&wa, pa, 8);
    memcpy(&wb, pb, 8);
    acc_a |= wa << na;
    acc_b |= wb << nb;
    pa += (63 - na) >> 3;
    pb += (63 - nb) >> 3;
    na |= 56;
    nb |= 56;
    for (int q = 0; q < 4; ++q) {
      const uint32_t ea = pair[acc_a & mask], eb = pair[acc_b & mask];
      const int la = (int)(ea & 31), lb = (int)(eb & 31);
      acc_a >>= la;
      acc_b >>= lb;
      na -= la;
      nb -= lb;
      hole |= (uint32_t)(la == 0) | (uint32_t)(lb == 0);
      emit(i, (ea >> 6) & 0xfff);
      emit(i + 1, ea >> 18);
      emit(j, (eb >> 6) & 0xfff);
      emit(j + 1, eb >> 18);
      i += 1 + ((ea >> 5) & 1);
      j += 1 + ((eb >> 5) & 1);
    }
  }
  a.br.p = pa; a.br.acc = acc_a; a.br.nacc = na; a.i = i;
  b.br.p = pb; b.br.acc = acc_b; b.br.nacc = nb; b.i = j;
  a.bits = (uint64_t)(pa - sp) * 8 - (uint64_t)na - off_a;
  b.bits = (uint64_t)(pb - sp) * 8 - (uint64_t)nb - off_b;
  return hole == 0;
}

// Decodes `count` Huffman symbols, calling emit(i, sym); false on a malformed stream (a hole in
// the code table, or a segment whose codes do not add up to its declared length). Segments
// start at the sum of the lengths before them; two are decoded at a time, interleaved, so the
// table-lookup chains of both overlap.
template <typename EmitFn>
LC_HD bool read_huff_symbols(Reader& r, uint64_t count, const uint32_t* table, int tb,
                             EmitFn& emit, uint32_t* pair_scratch = nullptr) {
  const uint64_t nseg = segments_for(count);
  const uint8_t* seg_len = r.take(2 * (size_t)nseg);
  if (!seg_len) return false;
  uint64_t total = 0;
  for (uint64_t k = 0; k < nseg; ++k) total += (uint32_t)seg_len[2 * k] | ((uint32_t)seg_len[2 * k + 1] << 8);
  const size_t bytes = (size_t)((total + 7) / 8);
  const uint8_t* sp = r.take(bytes);
  if (!sp) return false;
  const uint64_t mask = (1ull << tb) - 1;
  // Long sections of short codes (an optimal code's bits are near uniform, so the share of
  // two-symbol entries is the share of lookups that yield two) take the two-symbol table.
  const bool pairs = pair_scratch && count >= (4ull << tb) &&
                     2 * huff_pair_table(table, tb, pair_scratch) >= (1u << tb);
  uint64_t off = 0;  // bit offset of segment k
  for (uint64_t k = 0; k < nseg; k += 2) {
    const uint64_t la = (uint32_t)seg_len[2 * k] | ((uint32_t)seg_len[2 * k + 1] << 8);
    const uint64_t s0 = k * kSeg, s1 = s0 + kSeg < count ? s0 + kSeg : count;
    SegCursor a = seg_cursor(sp, bytes, off, s0, s1);
    if (k + 1 < nseg) {
      const uint64_t lb = (uint32_t)seg_len[2 * k + 2] | ((uint32_t)seg_len[2 * k + 3] << 8);
      const uint64_t t1 = s1 + kSeg < count ? s1 + kSeg : count;
      SegCursor b = seg_cursor(sp, bytes, off + la, s1, t1);
      if (pairs && !huff_pair_bulk(a, b, sp, off, off + la, pair_scratch, mask, emit)) return false;
      while (a.i + 4 <= a.s1 && b.i + 4 <= b.s1 && a.br.end - a.br.p >= 8 && b.br.end - b.br.p >= 8)
        if (!seg_step4(a, table, mask, emit) || !seg_step4(b, table, mask, emit)) return false;
      if (!seg_finish(b, table, tb, mask, emit) || b.bits != lb) return false;
      off += lb;
    }
    if (!seg_finish(a, table, tb, mask, emit) || a.bits != la) return false;
    off += la;
  }
  return true;
}

template <typename EmitFn>
LC_HD bool read_packed(Reader& r, uint64_t count, int bits, EmitFn& emit) {
  const uint8_t* sp = r.take(packed_bytes(count, bits));
  if (!sp) return false;
  switch (bits) {
    case 0: for (uint64_t i = 0; i < count; ++i) emit(i, 0u); return true;
    case 1: unpack_fixed<1>(sp, count, emit); return true;
    case 2: unpack_fixed<2>(sp, count, emit); return true;
    case 3: unpack_fixed<3>(sp, count, emit); return true;
    case 4: unpack_fixed<4>(sp, count, emit); return true;
    case 5: unpack_fixed<5>(sp, count, emit); return true;
    case 6: unpack_fixed<6>(sp, count, emit); return true;
    case 7: unpack_fixed<7>(sp, count, emit); return true;
    case 8: unpack_fixed<8>(sp, count, emit); return true;
    default: break;
  }
  BitReader br = {sp, sp + packed_bytes(count, bits), 0, 0, false};
  for (uint64_t i = 0; i < count; ++i) emit(i, br.get(bits));
  return !br.overrun;
}

// read_packed into float32 values base + q * step, the bulk by the vector path where there is one.
template <typename EmitFn>
LC_HD bool read_packed_f32(Reader& r, uint64_t count, int bits, float base, float step, float* out,
                           EmitFn& emit) {
#if LC_CPU_SIMD
  if (packed_bytes(count, bits) <= (size_t)(r.end - r.p)) {
    const uint64_t m = simd::unpack_dequant_prefix(r.p, count, bits, base, step, out);
    if (m) {
      r.p += m / 8 * bits;
      auto shifted = [&emit, m](uint64_t i, uint32_t q) { emit(m + i, q); };
      return read_packed(r, count - m, bits, shifted);
    }
  }
#endif
  (void)base; (void)step; (void)out;
  return read_packed(r, count, bits, emit);
}

// Parses and checks the fixed part of a frame (magic, version, flags, checksum, shape).
LC_HD int32_t parse_header(const uint8_t* f, int64_t nbytes, size_t capacity, FrameHeader& h,
                           Reader& r) {
  if (nbytes < 0) return kOverflow;
  if ((uint64_t)nbytes > capacity || nbytes < kHeaderFixed + 2) return kTruncated;
  if (f[0] != kMagic) return kBadMagic;
  if ((f[1] >> 4) != kVersion) return kBadVersion;
  if (get_u32(f + 4) != lc_checksum(f, (size_t)nbytes)) return kBadChecksum;
  h.form = f[1] & 15;
  uint8_t flags = f[2];
  h.dtype = flags & 3;
  h.mode = (flags >> 2) & 1;
  h.dedup = (flags & kFlagDedup) != 0;
  h.codes_huff = (flags & kFlagCodesHuff) != 0;
  h.index_huff = (flags & kFlagIndexHuff) != 0;
  h.bits = f[3];
  if (h.form > kFormQuant || h.dtype > kF16 || (flags & 0xc0) || h.bits > kMaxBits) return kBadHeader;
  if (h.form == kFormRaw && ((flags & ~3) != 0 || h.bits != 0)) return kBadHeader;
  r.p = f + kHeaderFixed;
  r.end = f + nbytes;
  r.ok = true;
  h.rows = r.varint(0x7fffffff);
  h.dim = r.varint(0x7fffffff);
  h.n_outliers = 0;
  h.n_unique = h.rows;
  h.eb_abs = 0.0f;
  h.base = 0.0f;
  if (!r.ok) return kTruncated;
  return kOk;
}

// Decodes frame f[0, nbytes) into out (rows*dim values of dtype D) when kWrite; checks it fully
// either way. Expected rows/dim/dtype come from the caller (the static output shape). On any
// error the output is filled with NaN and the status says why.
template <bool kWrite, int D>
LC_HD int32_t decode_frame_t(const uint8_t* f, int64_t nbytes, size_t capacity, uint64_t rows,
                             uint64_t dim, uint8_t* out, Workspace& w) {
  FrameHeader h;
  Reader r = {nullptr, nullptr, true};
  int32_t st = parse_header(f, nbytes, capacity, h, r);
  const uint64_t n = rows * dim;
  const int isz = dtype_size(D);
  if (st == kOk && (h.rows != rows || h.dim != dim || h.dtype != D)) st = kShapeMismatch;
  if (st == kOk && h.form == kFormRaw) {
    const uint8_t* src = r.take((size_t)n * isz);
    if (!src) st = kTruncated;
    else if (r.p != r.end) st = kTrailingBytes;
    else if (kWrite && n) memcpy(out, src, (size_t)n * isz);
  } else if (st == kOk) {
    h.eb_abs = u2f(r.u32());
    h.base = u2f(r.u32());
    h.n_outliers = r.varint(n);
    if (h.dedup) h.n_unique = r.varint(rows);
    if (!r.ok) st = kTruncated;
    else if (!is_finite_bits(f2u(h.eb_abs)) || h.eb_abs < 0.0f || !is_finite_bits(f2u(h.base)) ||
             (h.dedup && (h.n_unique < 1 || n == 0)) || (h.index_huff && !h.dedup))
      st = kBadHeader;
  }
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
    if (st == kOk) {
      pos = r.take((size_t)h.n_outliers * pb);
      vals = r.take((size_t)h.n_outliers * isz);
      if (!pos || !vals) st = kTruncated;
      else if (r.p != r.end) st = kTrailingBytes;
    }
    if (st == kOk) {
      for (uint64_t k = 0; k < h.n_outliers; ++k) {
        uint32_t p = 0;
        for (int b = 0; b < pb; ++b) p |= (uint32_t)pos[k * pb + b] << (8 * b);
        if (p >= n) { st = kCorrupt; break; }
      }
    }
    if (st == kOk && kWrite) {
      for (uint64_t rr = 0; rr < rows && !direct; ++rr) {
        const float* src = dv + (h.dedup ? (uint64_t)idx[rr] : rr) * dim;
        if (D == kF32) memcpy(out + rr * dim * 4, src, dim * 4);
        else for (uint64_t j = 0; j < dim; ++j) store_value(out, D, rr * dim + j, src[j]);
      }
      for (uint64_t k = 0; k < h.n_outliers; ++k) {
        uint32_t p = 0;
        for (int b = 0; b < pb; ++b) p |= (uint32_t)pos[k * pb + b] << (8 * b);
        memcpy(out + (size_t)p * isz, vals + k * isz, isz);
      }
    }
  }
  if (st != kOk && kWrite) {
    for (uint64_t i = 0; i < n; ++i) store_value(out, D, i, u2f(0x7fc00000u));
  }
  return st;
}

template <bool kWrite>
LC_HD int32_t decode_frame(const uint8_t* f, int64_t nbytes, size_t capacity, uint64_t rows,
                           uint64_t dim, int dtype, uint8_t* out, Workspace& w) {
  if (dtype == kBF16) return decode_frame_t<kWrite, kBF16>(f, nbytes, capacity, rows, dim, out, w);
  if (dtype == kF16) return decode_frame_t<kWrite, kF16>(f, nbytes, capacity, rows, dim, out, w);
  return decode_frame_t<kWrite, kF32>(f, nbytes, capacity, rows, dim, out, w);
}

}  // namespace lc
