// jax_lossy_comm frame format: the one description of the bytes, used by the CPU codec
// (encoder.h, decoder.h), the CUDA kernels (*.cuh) and, through module.cc, by Python
// (jax_lossy_comm/frame.py reads these constants and size functions from the extension).
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
//   u32 checksum over the whole frame with these four bytes read as zero (checksum.h)
//   varint rows, varint dim
//   raw form:       rows*dim values in the input dtype
//   quantized form: f32 half step h (float32 chunks: eb_abs; half types: at most eb_abs, leaving
//                   room for the rounding to the half type, quant.h), f32 base (the chunk
//                   minimum, or the multiple of 2h just below it when the range contains zero:
//                   quant.h zero_on_grid), varint n_outliers,
//                   [dedup: varint n_unique], codes section, [dedup: index section],
//                   outlier positions (pos_bytes each), outlier values (input dtype)
//   bit-packed section: count*bits bits, LSB first, padded to a byte
//   Huffman section:  varint nsym, nsym 4-bit code lengths (low nibble first), then u16 bit
//                     length of each segment of kSeg symbols, then one LSB-first bit stream of
//                     canonical codes padded to a byte; segment k starts at the sum of the
//                     lengths before it (segments decode independently, e.g. on a GPU)
// Decoding x_hat = base + (float)q * (2 * h) in float32, rounded to the output dtype.
//
// The header is written by write_header and parsed by parse_header, here only. Everything is
// plain C++ without allocation; LC_HD marks functions usable on host and device.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define LC_HD __host__ __device__ __forceinline__
#else
#define LC_HD inline
#endif
#define LC_RESTRICT __restrict__

namespace lc {

// ---------------------------------------------------------------- constants
constexpr uint8_t kMagic = 0xE5;
constexpr uint8_t kVersion = 1;
constexpr int kHeaderFixed = 8;         // magic, version|form, flags, bits, checksum
constexpr int kChecksumOffset = 4;      // the u32 checksum's byte offset
constexpr int kMaxBits = 24;            // codes stay exact in float32
constexpr int kMaxHuffLen = 12;         // decode table of at most 4096 entries
constexpr int kMaxHuffSymbols = 4096;   // larger alphabets are bit-packed
constexpr int kSeg = 1024;              // symbols per independently decodable segment
constexpr int64_t kMaxFrameBytes = 2147483647;  // byte counts travel as int32
// bfloat16/float16: the decoder rounds x_hat to the half type, so the quantizer's half step is
// below eb_abs (quant.h half_step); it never goes below this fraction of eb_abs, which bounds
// the code width (rel_bits_for) and so the fixed-rate capacity. 63/128 = (1 - 2^-6) / 2: with
// a step of at most (1 - 2^-6) eb_abs no value is an outlier (the proof is at half_step). No
// floor can give a narrower capacity: bfloat16 values 1 + k/128 (k = 0..96) at REL 0.01 have
// eb_abs = 0.0075 < 1/128, the distance between two of them, so each needs its own code: 97
// codes (7 bits) where float32's 1/(2 * 0.01) needs 51 (6 bits), since the decoded values are
// bfloat16 too and no other bfloat16 value is within eb_abs of one of them; float16 likewise.
constexpr float kHalfStepFloor = 0.4921875f;

enum Form : int { kFormRaw = 0, kFormQuant = 1 };
enum DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
enum Mode : int { kRel = 0, kAbs = 1 };
// What the caller asks for; kAuto takes the smallest frame of all forms.
enum Codec : int { kCodecAuto = 0, kCodecRaw = 1, kCodecFixed = 2, kCodecDedup = 3,
                   kCodecEntropy = 4 };
enum Flag : int { kFlagAbs = 4, kFlagDedup = 8, kFlagCodesHuff = 16, kFlagIndexHuff = 32 };

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
  kUnsupportedForm = 10,  // a dictionary form where none is supported: the pure-jax reference
                          // decoder, or lc_decompress with fixed_rate=1 (ffi_args.h)
};

// Names and descriptions of the statuses, in code order (exported to Python by module.cc).
struct StatusText {
  const char* name;
  const char* description;
};
constexpr StatusText kStatusText[] = {
    {"OK", "ok"},
    {"OVERFLOW", "overflow: the encoder needed more bytes than the capacity (nbytes < 0)"},
    {"TRUNCATED", "truncated: nbytes out of range or a section runs past the end"},
    {"BAD_MAGIC", "bad magic byte"},
    {"BAD_VERSION", "unsupported frame version"},
    {"BAD_HEADER", "bad header field"},
    {"SHAPE_MISMATCH", "shape or dtype differs from the expected one"},
    {"BAD_CHECKSUM", "checksum mismatch"},
    {"CORRUPT", "corrupt section (code table, code or index out of range)"},
    {"TRAILING_BYTES", "trailing bytes after the last section"},
    {"UNSUPPORTED_FORM", "form not supported by the pure-jax reference decoder"},
};
static_assert(sizeof(kStatusText) / sizeof(kStatusText[0]) == kUnsupportedForm + 1,
              "one text per status");

LC_HD int dtype_size(int dtype) { return dtype == kF32 ? 4 : 2; }

// ---------------------------------------------------------------- float bits
LC_HD uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
LC_HD float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
LC_HD bool is_finite_bits(uint32_t u) { return (u & 0x7f800000u) != 0x7f800000u; }

LC_HD int bits_for(uint32_t v) {  // bits to hold values 0..v
  int b = 0;
  while (b < 32 && (v >> b) != 0) ++b;
  return b;
}

// ---------------------------------------------------------------- byte I/O
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

// ---------------------------------------------------------------- checksum
LC_HD uint32_t fmix32(uint32_t h) {  // MurmurHash3 finalizer, a bijection
  h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
  return h;
}
// The checksum of an n-byte frame is checksum_seed(n) plus the sum over its 32-bit
// little-endian words w_i (bytes 4..7 read as zero, the tail zero-padded) of
// checksum_word = fmix32(w_i ^ (i * 0x9E3779B9)). A change of any one word always changes the
// sum; the sum is order-aware and reduces in parallel (checksum.h on the CPU, a block
// reduction on the GPU).
LC_HD uint32_t checksum_seed(size_t n) { return fmix32((uint32_t)n * 0x27d4eb2fu + 0x165667b1u); }
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

// ---------------------------------------------------------------- sizes
LC_HD size_t packed_bytes(uint64_t count, int bits) { return (size_t)((count * (uint64_t)bits + 7) / 8); }
LC_HD uint64_t segments_for(uint64_t count) { return (count + kSeg - 1) / kSeg; }
LC_HD int pos_bytes_for(uint64_t n) { return n <= 0x100 ? 1 : n <= 0x10000 ? 2 : n <= 0x1000000 ? 3 : 4; }
LC_HD size_t header_bytes(uint64_t rows, uint64_t dim) {
  return kHeaderFixed + varint_size(rows) + varint_size(dim);
}
LC_HD size_t raw_frame_bytes(uint64_t rows, uint64_t dim, int dtype) {
  return header_bytes(rows, dim) + (size_t)(rows * dim) * dtype_size(dtype);
}
// Header of a quantized frame up to its first section: eb_abs, base, n_outliers, [n_unique].
LC_HD size_t quant_header_bytes(uint64_t rows, uint64_t dim, uint64_t n_outliers, bool dedup,
                                uint64_t n_unique) {
  return header_bytes(rows, dim) + 8 + varint_size(n_outliers) + (dedup ? varint_size(n_unique) : 0);
}
// The outlier sections: positions (pos_bytes_for(rows * dim) each) and values.
LC_HD size_t outlier_bytes(uint64_t rows, uint64_t dim, int dtype, uint64_t n_outliers) {
  return (size_t)n_outliers * (size_t)(pos_bytes_for(rows * dim) + dtype_size(dtype));
}
// The fixed-rate form: every code bit-packed at `bits` bits, n_outliers exact values.
LC_HD size_t fixed_frame_bytes(uint64_t rows, uint64_t dim, int bits, int dtype,
                               uint64_t n_outliers) {
  return quant_header_bytes(rows, dim, n_outliers, false, 0) + packed_bytes(rows * dim, bits) +
         outlier_bytes(rows, dim, dtype, n_outliers);
}
// A dictionary form of n_unique distinct code rows, with sections of the sizes given (the
// index section only when some row repeats: n_unique < rows).
LC_HD size_t dict_frame_bytes(uint64_t rows, uint64_t dim, int dtype, uint64_t n_outliers,
                              uint64_t n_unique, size_t codes_bytes, size_t index_bytes) {
  const bool dedup = n_unique != rows;
  return quant_header_bytes(rows, dim, n_outliers, dedup, n_unique) + codes_bytes +
         (dedup ? index_bytes : 0) + outlier_bytes(rows, dim, dtype, n_outliers);
}
// Most outliers a quantized frame of `capacity` bytes can hold: every quantized frame has at
// least header_bytes + 9 bytes before its sections (eb_abs, base, a one-byte n_outliers) and
// pos_bytes + value bytes per outlier. An encoder needs the positions of no more outliers than
// this: a frame with more does not fit, and the raw form or an overflow is written instead
// (the CUDA encoders size their outlier scratch by it, cuda_launch.h).
LC_HD uint64_t outlier_slots(uint64_t rows, uint64_t dim, int dtype, size_t capacity) {
  const uint64_t n = rows * dim;
  const size_t head = header_bytes(rows, dim) + 9;
  if (capacity <= head) return 0;
  const uint64_t m = (uint64_t)(capacity - head) / (uint64_t)(pos_bytes_for(n) + dtype_size(dtype));
  return m < n ? m : n;
}
// Largest code in REL mode for a relative bound eb_rel: range / (2 eb_rel range) = 1/(2 eb_rel),
// plus one for float rounding; 32 when that exceeds kMaxBits bits (no quantization) or eb_rel
// is not > 0. Half types: the half step may be down to kHalfStepFloor * eb_abs.
LC_HD int rel_bits_for(double eb_rel, int dtype = kF32) {
  if (dtype != kF32) eb_rel *= (double)kHalfStepFloor;
  if (!(eb_rel > 0.0)) return 32;
  double m = 1.0 / (2.0 * eb_rel);
  if (!(m < (double)(1u << kMaxBits))) return 32;
  return bits_for((uint32_t)m + 1u);
}

// Geometry of one handler call: `batch` chunks of [rows, dim] values of `dtype`, frames of
// `cap` bytes each.
struct Chunks {
  int dtype;
  int64_t batch, rows, dim, cap;
};

// ---------------------------------------------------------------- form choice
enum Written : int { kWriteRaw = 0, kWriteFixed = 1, kWriteDict = 2 };
struct FormChoice {
  int kind;      // Written
  size_t bytes;  // frame bytes; more than the capacity: overflow
};

// The form a codec writes, from the candidate sizes (fixed and dict are read only when the
// values can be quantized and the codec allows the form): "fixed" the fixed-rate form,
// "dedup"/"entropy" the dictionary form, "auto" the smallest (raw on a tie), "raw" or data
// that cannot be quantized the raw form; raw also wherever only raw fits the capacity. Over
// the capacity, bytes is the smallest size that would have fitted: the chosen form's or raw's.
LC_HD FormChoice choose_form(int codec, bool quant_ok, size_t raw, size_t fixed, size_t dict,
                             size_t capacity) {
  FormChoice c = {kWriteRaw, raw};
  if (quant_ok) {
    if (codec == kCodecFixed) { c.kind = kWriteFixed; c.bytes = fixed; }
    else if (codec == kCodecDedup || codec == kCodecEntropy) { c.kind = kWriteDict; c.bytes = dict; }
    else if (codec == kCodecAuto) {
      if (fixed < c.bytes) { c.kind = kWriteFixed; c.bytes = fixed; }
      if (dict < c.bytes) { c.kind = kWriteDict; c.bytes = dict; }
    }
  }
  if (c.bytes > capacity && raw < c.bytes) { c.kind = kWriteRaw; c.bytes = raw; }
  return c;
}

// ---------------------------------------------------------------- header
struct FrameHeader {
  int form, dtype, mode, bits;
  bool dedup, codes_huff, index_huff;
  uint64_t rows, dim, n_outliers, n_unique;
  float eb_abs, base;  // eb_abs: the stored half step h (== eb_abs for float32 chunks)
};

LC_HD FrameHeader raw_header(uint64_t rows, uint64_t dim, int dtype) {
  FrameHeader h = {kFormRaw, dtype, kRel, 0, false, false, false, rows, dim, 0, rows, 0.0f, 0.0f};
  return h;
}

// Writes the header (a zero checksum; raw: up to the values, quantized: up to the first
// section) and returns its size in bytes.
LC_HD size_t write_header(uint8_t* out, const FrameHeader& h) {
  out[0] = kMagic;
  out[1] = (uint8_t)((kVersion << 4) | h.form);
  out[2] = (uint8_t)(h.dtype | (h.mode == kAbs ? kFlagAbs : 0) | (h.dedup ? kFlagDedup : 0) |
                     (h.codes_huff ? kFlagCodesHuff : 0) | (h.index_huff ? kFlagIndexHuff : 0));
  out[3] = (uint8_t)h.bits;
  put_u32(out + kChecksumOffset, 0);
  size_t o = kHeaderFixed;
  o += put_varint(out + o, h.rows);
  o += put_varint(out + o, h.dim);
  if (h.form == kFormRaw) return o;
  put_u32(out + o, f2u(h.eb_abs)); o += 4;
  put_u32(out + o, f2u(h.base)); o += 4;
  o += put_varint(out + o, h.n_outliers);
  if (h.dedup) o += put_varint(out + o, h.n_unique);
  return o;
}

// Parses and checks a frame's header against the shape and dtype the caller expects (rows,
// dim, dtype: the static output shape). Checks, in this order, give the status: nbytes in
// [header, capacity], magic, version, checksum(f, nbytes) (called only once the frame's length,
// magic and version are valid), flags and bits, shape, then for the raw form the values and
// nothing after them, for the quantized form eb_abs, base, n_outliers and n_unique. On kOk the
// reader stands at the first section (raw: past the values, *raw_values at them).
template <class ChecksumFn>
LC_HD int32_t parse_header(const uint8_t* f, int64_t nbytes, size_t capacity, uint64_t rows,
                           uint64_t dim, int dtype, ChecksumFn checksum, FrameHeader& h,
                           Reader& r, const uint8_t** raw_values) {
  h.n_outliers = 0;
  h.eb_abs = 0.0f;
  h.base = 0.0f;
  if (nbytes < 0) return kOverflow;
  if ((uint64_t)nbytes > capacity || nbytes < kHeaderFixed + 2) return kTruncated;
  if (f[0] != kMagic) return kBadMagic;
  if ((f[1] >> 4) != kVersion) return kBadVersion;
  if (get_u32(f + kChecksumOffset) != checksum(f, (size_t)nbytes)) return kBadChecksum;
  h.form = f[1] & 15;
  const uint8_t flags = f[2];
  h.dtype = flags & 3;
  h.mode = (flags & kFlagAbs) ? kAbs : kRel;
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
  h.n_unique = h.rows;
  if (!r.ok) return kTruncated;
  if (h.rows != rows || h.dim != dim || h.dtype != dtype) return kShapeMismatch;
  const uint64_t n = rows * dim;
  if (h.form == kFormRaw) {
    *raw_values = r.take((size_t)n * dtype_size(dtype));
    if (!*raw_values) return kTruncated;
    return r.p != r.end ? kTrailingBytes : kOk;
  }
  h.eb_abs = u2f(r.u32());
  h.base = u2f(r.u32());
  h.n_outliers = r.varint(n);
  if (h.dedup) h.n_unique = r.varint(rows);
  if (!r.ok) return kTruncated;
  if (!is_finite_bits(f2u(h.eb_abs)) || h.eb_abs < 0.0f || !is_finite_bits(f2u(h.base)) ||
      (h.dedup && (h.n_unique < 1 || n == 0)) || (h.index_huff && !h.dedup))
    return kBadHeader;
  return kOk;
}

// ---------------------------------------------------------------- outlier sections
LC_HD void put_outlier_pos(uint8_t* p, uint32_t pos, int pb) {
  for (int b = 0; b < pb; ++b) p[b] = (uint8_t)(pos >> (8 * b));
}
LC_HD uint32_t outlier_pos(const uint8_t* pos, uint64_t k, int pb) {
  uint32_t q = 0;
  for (int b = 0; b < pb; ++b) q |= (uint32_t)pos[k * pb + b] << (8 * b);
  return q;
}
// The two outlier sections, last in a quantized frame: kTruncated when they run past the end,
// kTrailingBytes when bytes follow them.
LC_HD int32_t take_outliers(Reader& r, uint64_t n_outliers, int pb, int isz, const uint8_t** pos,
                            const uint8_t** vals) {
  *pos = r.take((size_t)n_outliers * pb);
  *vals = r.take((size_t)n_outliers * isz);
  if (!*pos || !*vals) return kTruncated;
  return r.p != r.end ? kTrailingBytes : kOk;
}

}  // namespace lc
