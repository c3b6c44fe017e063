// Checks the CUDA kernels of xla_ffi/encode_kernels.cuh and decode_kernels.cuh, run on the CPU
// through emu.h, against the CPU codec of xla_ffi/codec.h: frames byte for byte (fixed and raw forms: encode_fixed_kernel; auto,
// dedup and entropy forms: encode_dict_kernel), decoded values and statuses of valid and
// corrupted frames (decode_fast_kernel + decode_dict_kernel, decompress and frame status).
// Prints one line per failure and exits non-zero on any.
//
//   g++ -std=c++20 -O1 -g -fsanitize=address,undefined -pthread -DLC_CUDA_EMULATION
//       -include tests/native/cuda_emu/emu.h -Ixla_ffi tests/native/cuda_emu/check_kernels.cc -o check
//   ./check [quick] [golden FILE] [DUMP_DIR]
// `quick` skips one of the three error bounds of the data-kind sweeps and the bf16/f16 runs of
// the largest shapes; DUMP_DIR (e.g. ../shared/data/emb_dumps) adds the real embedding dumps
// (files *_ROWSxDIM_f32.bin), whole and cut into the DLRM exchange shape.
#include <stdio.h>

#include "../../../xla_ffi/codec.h"
#include "../../../xla_ffi/decode_kernels.cuh"
#include "../../../xla_ffi/encode_kernels.cuh"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace lc::gpu;  // the kernels and their launch constants

size_t al256(size_t v) { return (v + 255) & ~(size_t)255; }

int failures = 0;
int checks = 0;
// Coverage: frames per form (raw, quantized without a dictionary or Huffman, dictionary,
// Huffman codes, Huffman index, >= 2 code segments, >= 2 index segments) and decode statuses of
// dictionary/Huffman frames (original and corrupted).
int seen_form[7] = {0};
int seen_status[16] = {0};
int seen_unsupported = 0;
long half_vec_hits = 0;

// Golden corpus: one FNV-1a 64 digest per case of the CPU frames, byte counts, decoded values
// and statuses (valid and corrupted frames), written to the file named by `golden FILE`; the
// GPU kernels must equal the CPU on every case, so the digests hold for both.
FILE* golden = nullptr;
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  template <typename T>
  void add(const std::vector<T>& v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
};

void fail(const std::string& what) {
  if (++failures <= 40) printf("FAIL %s\n", what.c_str());
}

struct Rng {
  uint64_t s;
  uint32_t next() { s = s * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(s >> 33); }
  float normal() {  // sum of uniforms: good enough
    float a = 0;
    for (int i = 0; i < 4; ++i) a += (float)next() / 4294967296.0f;
    return (a - 2.0f) * 1.7f;
  }
};

// Values of one batch [batch, rows, dim] as float32, per kind.
std::vector<float> make_data(const std::string& kind, int64_t batch, uint64_t rows, uint64_t dim,
                             uint64_t seed) {
  Rng r{seed * 7919 + 17};
  const uint64_t n = rows * dim;
  std::vector<float> x(batch * n);
  for (auto& v : x) v = r.normal();
  if (x.empty()) return x;
  if (kind == "dup") {
    for (int64_t c = 0; c < batch; ++c)
      for (uint64_t i = 0; i < rows; ++i) {
        uint64_t src = r.next() % 3;
        for (uint64_t j = 0; j < dim; ++j) x[c * n + i * dim + j] = x[c * n + src * dim + j];
      }
  } else if (kind == "special") {
    const float inf = lc::u2f(0x7f800000u), nan = lc::u2f(0x7fc00000u);
    for (size_t k = 0; k < x.size() / 50 + 3; ++k) {
      size_t i = r.next() % x.size();
      x[i] = (k % 4 == 0) ? nan : (k % 4 == 1) ? inf : (k % 4 == 2) ? -inf : -0.0f;
    }
  } else if (kind == "constant") {
    for (auto& v : x) v = 1.25f;
  } else if (kind == "zeros") {
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3) ? 0.0f : -0.0f;
  } else if (kind == "nan") {
    for (auto& v : x) v = lc::u2f(0x7fc00000u);
  } else if (kind == "wide") {
    for (auto& v : x) v = v * powf(10.0f, (float)((int)(r.next() % 60) - 30));
  } else if (kind == "subnormal") {  // below 2^-126: no flush to zero on either side
    for (auto& v : x) v *= 1e-39f;
  } else if (kind == "third") {  // a third of the values are outliers
    for (size_t i = 0; i < x.size(); i += 3) x[i] = lc::u2f(0x7fc00000u);
  } else if (kind == "outliers") {  // >= 128 outliers per chunk: two-byte outlier count
    for (size_t i = 0; i < x.size(); i += 7) x[i] = lc::u2f(0x7fc00000u);
  } else if (kind == "hot" || kind == "hotnear" || kind == "hotspecial") {
    // Pooled embeddings of hot ids: rows drawn from a pool of rows/8 + 2 (skewed towards the
    // first), like the real dumps. hotnear: some copies one ulp off (different input rows, the
    // same codes); hotspecial: NaN/Inf inside pool rows (outliers repeated with their rows).
    const uint64_t pool = rows / 8 + 2;
    for (int64_t c = 0; c < batch; ++c) {
      float* xc = x.data() + c * n;
      for (uint64_t i = 0; i < n; ++i) xc[i] *= 0.05f;
      if (kind == "hotspecial")
        for (uint64_t k = 0; k < pool && k < rows; k += 3) xc[k * dim + (k % dim)] = (k % 2) ? lc::u2f(0x7fc00000u) : lc::u2f(0xff800000u);
      for (uint64_t i = pool; i < rows; ++i) {
        const float u = (float)r.next() / 4294967296.0f;
        const uint64_t src = (uint64_t)((float)pool * u * u * u) % pool;
        for (uint64_t j = 0; j < dim; ++j) {
          float v = xc[src * dim + j];
          if (kind == "hotnear" && (i + j) % 5 == 0 && v - v == 0.0f) v = lc::u2f(lc::f2u(v) + 1);
          xc[i * dim + j] = v;
        }
      }
    }
  } else if (kind == "lowcard") {  // few distinct values: long runs of equal codes
    for (auto& v : x) v = (float)(r.next() % 4) * 0.25f;
  }
  return x;
}

std::vector<uint8_t> to_dtype(const std::vector<float>& x, int dtype) {
  const int isz = lc::dtype_size(dtype);
  std::vector<uint8_t> out(x.size() * isz + 8);
  for (size_t i = 0; i < x.size(); ++i) lc::store_value(out.data(), dtype, i, x[i]);
  out.resize(x.size() * isz);
  return out;
}

template <int D>
void encode_gpu(const std::vector<uint8_t>& in, const std::vector<float>& eb, int64_t batch,
                uint64_t rows, uint64_t dim, int mode, int codec, size_t cap, unsigned grid,
                std::vector<uint8_t>& frames, std::vector<int32_t>& nbytes) {
  frames.assign(batch * cap, 0xAB);  // XLA does not zero outputs: neither do we
  nbytes.assign(batch, 12345);
  const uint64_t n = rows * dim;
  if (codec == lc::kCodecFixed || codec == lc::kCodecRaw) {
    // Outlier positions: only as many as the frame can hold (ASan catches a write past them).
    const size_t stride = al256(4 * (size_t)lc::outlier_slots(rows, dim, D, cap));
    (void)n;
    std::vector<uint8_t> ws(stride * grid, 0xA5);  // scratch is not zeroed either
    emu::launch(grid, kThreads, encode_fixed_kernel<D>, in.data(), eb.data(), batch, rows, dim,
                mode, codec, frames.data(), cap, nbytes.data(), ws.data(), stride);
    // The multi-block path (encode_fixed_parts_kernel + encode_fixed_finish_kernel) over 2 and
    // 3 blocks a chunk: the same frames and counts byte for byte.
    // ... and over one part per half tile (kUnit values: the DLRM exchange's split).
    const int64_t units = (int64_t)((n + kUnit - 1) / kUnit);
    for (int64_t parts : {(int64_t)2, (int64_t)3, units}) {
      if (codec != lc::kCodecFixed || units < parts) break;
      if (parts == units && units <= 3) break;  // already run
      const size_t pstride = al256(part_ws_bytes(rows, dim, D, cap, parts));
      std::vector<uint8_t> pws(pstride * batch * parts, 0xA5);
      std::vector<uint8_t> pf(batch * cap, 0xAB);
      std::vector<int32_t> pn(batch, 12345);
      emu::launch(grid, kThreads, encode_fixed_parts_kernel<D>, in.data(), eb.data(), batch, rows,
                  dim, mode, codec, pf.data(), cap, pn.data(), pws.data(), pstride, parts);
      emu::launch(grid + 1, kThreads, encode_fixed_finish_kernel<D>, in.data(), eb.data(), batch,
                  rows, dim, mode, codec, pf.data(), cap, pn.data(), pws.data(), pstride, parts);
      ++checks;
      if (pf != frames || pn != nbytes)
        fail("multi-block fixed encoder (" + std::to_string(parts) + " parts) differs from one block, [" +
             std::to_string(batch) + "," + std::to_string(rows) + "," + std::to_string(dim) + "] dtype " +
             std::to_string(D));
    }
  } else {
    const size_t stride = al256(dict_ws_bytes(rows, dim, D, cap));
    std::vector<uint8_t> ws(stride * grid, 0xA5);
    emu::launch(grid, kThreads, encode_dict_kernel<D>, in.data(), eb.data(), batch, rows, dim,
                mode, codec, frames.data(), cap, nbytes.data(), ws.data(), stride);
  }
}

template <int D, bool kWrite>
void decode_gpu(const std::vector<uint8_t>& frames, const std::vector<int32_t>& nbytes,
                int64_t batch, uint64_t rows, uint64_t dim, size_t cap, unsigned grid,
                std::vector<uint8_t>& out, std::vector<int32_t>& status, bool fixed_rate = false) {
  const size_t chunk = rows * dim * Dev<D>::kSize;
  out.assign(kWrite ? batch * chunk : 0, 0xCD);
  status.assign(batch, 777);
  std::vector<FastFrame> info(batch);
  memset((void*)info.data(), 0xEE, sizeof(FastFrame) * batch);
  uint8_t* x = kWrite ? out.data() : nullptr;
  if (fixed_rate) {  // one launch, no parsed headers, no workspace
    // ... and each frame over 3 blocks (the multi-block path, a tile a part), or one block per
    // half tile (kUnit values: more parts than tiles, the DLRM exchange's split) when that is 4+
    const uint64_t units = (rows * dim + kUnit - 1) / kUnit;
    emu::launch(grid, kThreads, decode_fast_kernel<D, kWrite>, frames.data(), nbytes.data(), batch,
                cap, rows, dim, x, status.data(), (FastFrame*)nullptr,
                (int64_t)(units >= 4 ? units : 3));
    return;
  }
  const size_t stride = al256(dict_dec_ws_bytes(rows, dim, D));
  const unsigned dgrid = grid + 1;  // a different grid from the fast kernel's
  std::vector<uint8_t> ws(stride * dgrid, 0xA5);
  emu::launch(grid, kThreads, decode_fast_kernel<D, kWrite>, frames.data(), nbytes.data(), batch,
              cap, rows, dim, x, status.data(), info.data(), (int64_t)(kWrite ? 2 : 1));
  emu::launch(dgrid, kThreads, decode_dict_kernel<D, kWrite>, frames.data(), nbytes.data(), batch,
              cap, rows, dim, x, status.data(), (const FastFrame*)info.data(), ws.data(), stride);
}

template <int D>
void check_data(const std::string& kind, const std::vector<float>& data, int64_t batch,
                uint64_t rows, uint64_t dim, int mode, int codec, float ebv, size_t cap,
                unsigned grid, uint64_t seed, int64_t max_fuzz = 64) {
  char name[256];
  snprintf(name, sizeof name, "%s dtype=%d [%lld,%llu,%llu] mode=%d codec=%d eb=%g cap=%zu grid=%u",
           kind.c_str(), D, (long long)batch, (unsigned long long)rows, (unsigned long long)dim,
           mode, codec, ebv, cap, grid);
  const uint64_t n = rows * dim;
  const size_t chunk = n * Dev<D>::kSize;
  std::vector<uint8_t> in = to_dtype(data, D);
  std::vector<float> eb(batch, ebv);
  // CPU reference.
  std::vector<uint8_t> fc(batch * cap, 0);
  std::vector<int32_t> nc(batch);
  std::vector<uint8_t> wsc(lc::workspace_bytes(rows, dim));
  lc::Workspace w = lc::carve_workspace(wsc.data(), rows, dim);
  for (int64_t c = 0; c < batch; ++c) {
    auto r = lc::encode_chunk(in.data() + c * chunk, rows, dim, D, eb[c], mode, codec,
                              fc.data() + c * cap, cap, w);
    nc[c] = r.nbytes < INT32_MIN ? INT32_MIN : (int32_t)r.nbytes;
  }
  std::vector<uint8_t> fg;
  std::vector<int32_t> ng;
  encode_gpu<D>(in, eb, batch, rows, dim, mode, codec, cap, grid, fg, ng);
  ++checks;
  if (ng != nc) {
    for (int64_t c = 0; c < batch; ++c)
      if (ng[c] != nc[c]) { fail(std::string(name) + ": nbytes chunk " + std::to_string(c) + " gpu " + std::to_string(ng[c]) + " cpu " + std::to_string(nc[c])); break; }
  } else if (fg != fc) {
    for (size_t i = 0; i < fc.size(); ++i)
      if (fg[i] != fc[i]) { fail(std::string(name) + ": frame byte " + std::to_string(i % cap) + " of chunk " + std::to_string(i / cap)); break; }
  }
  // Decode the CPU frames on both sides, plus corrupted copies.
  std::vector<uint8_t> frames = fc;
  std::vector<int32_t> nb = nc;
  Rng r{seed + 99};
  const int64_t fuzz = batch * 3 < max_fuzz ? batch * 3 : max_fuzz;
  for (int64_t k = 0; k < fuzz; ++k) {
    int64_t src = k % batch;
    std::vector<uint8_t> f(fc.begin() + src * cap, fc.begin() + (src + 1) * cap);
    int32_t len = nc[src];
    switch (r.next() % 7) {
      case 5: if (len > 8) {  // one bit flipped past the header, re-sealed: section contents
                const uint32_t b = r.next() % (8 * (uint32_t)(len - 8));
                f[8 + b / 8] ^= (uint8_t)(1u << (b % 8));
                lc::put_u32(f.data() + 4, lc::lc_checksum(f.data(), len)); } break;
      case 6: if (len > 9) {  // one byte short or long, re-sealed
                len += (r.next() & 1) ? 1 : -1;
                if ((size_t)len > cap) len = (int32_t)cap;
                lc::put_u32(f.data() + 4, lc::lc_checksum(f.data(), len)); } break;
      case 0: if (len > 0) f[r.next() % len] ^= (uint8_t)(1 + r.next() % 255); break;
      case 1: if (len > 8) { f[8 + r.next() % (len - 8)] ^= (uint8_t)(1 + r.next() % 255);
                             lc::put_u32(f.data() + 4, lc::lc_checksum(f.data(), len)); } break;
      case 2: len = (int32_t)(r.next() % (cap + 1));
              if (len >= 8) lc::put_u32(f.data() + 4, lc::lc_checksum(f.data(), len)); break;
      case 3: if (len > 16) { f[r.next() % 16] = (uint8_t)r.next();
                              lc::put_u32(f.data() + 4, lc::lc_checksum(f.data(), len)); } break;
      default: len = (int32_t)(r.next() % (cap + 1));
               for (int32_t i = 0; i < len; ++i) f[i] = (uint8_t)r.next();
               if (len > 0) f[0] = lc::kMagic;
               if (len > 1) f[1] = (uint8_t)((lc::kVersion << 4) | (r.next() & 1));
               if (len >= 8) lc::put_u32(f.data() + 4, lc::lc_checksum(f.data(), len));
    }
    frames.insert(frames.end(), f.begin(), f.end());
    nb.push_back(len);
  }
  const int64_t total = batch + fuzz;
  for (int64_t c = 0; c < batch; ++c) {
    if (nc[c] <= 0) continue;
    const uint8_t* f = fc.data() + c * cap;
    const int fl = f[2];
    if ((f[1] & 15) == lc::kFormRaw) seen_form[0]++;
    else if (!(fl & (lc::kFlagDedup | lc::kFlagCodesHuff))) seen_form[1]++;
    if (fl & lc::kFlagDedup) seen_form[2]++;
    if (fl & lc::kFlagCodesHuff) seen_form[3]++;
    if (fl & lc::kFlagIndexHuff) seen_form[4]++;
  }
  std::vector<uint8_t> oc(total * chunk), og;
  std::vector<int32_t> sc(total), sg, vc(total), vg;
  for (int64_t c = 0; c < total; ++c) {
    sc[c] = lc::decode_frame<true>(frames.data() + c * cap, nb[c], cap, rows, dim, D,
                                   oc.data() + c * chunk, w);
    vc[c] = lc::decode_frame<false>(frames.data() + c * cap, nb[c], cap, rows, dim, D, nullptr, w);
  }
  decode_gpu<D, true>(frames, nb, total, rows, dim, cap, grid, og, sg);
  for (int64_t c = 0; c < total; ++c)
    if (nb[c] > 8 && (frames[c * cap + 2] & (lc::kFlagDedup | lc::kFlagCodesHuff)) && sc[c] >= 0 && sc[c] < 16)
      seen_status[sc[c]]++;
  std::vector<uint8_t> dummy;
  decode_gpu<D, false>(frames, nb, total, rows, dim, cap, grid, dummy, vg);
  ++checks;
  if (sg != sc) {
    for (int64_t c = 0; c < total; ++c)
      if (sg[c] != sc[c]) { fail(std::string(name) + ": decode status frame " + std::to_string(c) + " gpu " + std::to_string(sg[c]) + " cpu " + std::to_string(sc[c])); break; }
  } else if (og != oc) {
    for (size_t i = 0; i < oc.size(); ++i)
      if (og[i] != oc[i]) { fail(std::string(name) + ": decoded byte " + std::to_string(i % chunk) + " of frame " + std::to_string(i / chunk) + " status " + std::to_string(sc[i / chunk])); break; }
  }
  if (vg != vc) fail(std::string(name) + ": frame_status differs");
  // fixed_rate=1: one launch; dictionary and Huffman frames get UNSUPPORTED_FORM, as on the CPU.
  {
    std::vector<uint8_t> of(total * chunk), ofg;
    std::vector<int32_t> sf(total), sfg;
    for (int64_t c = 0; c < total; ++c)
      sf[c] = lc::decode_frame<true>(frames.data() + c * cap, nb[c], cap, rows, dim, D,
                                     of.data() + c * chunk, w, true);
    decode_gpu<D, true>(frames, nb, total, rows, dim, cap, grid, ofg, sfg, true);
    ++checks;
    if (sfg != sf || ofg != of) fail(std::string(name) + ": fixed_rate decode differs");
    for (int64_t c = 0; c < total; ++c) {
      if (sf[c] == lc::kUnsupportedForm) ++seen_unsupported;
      if (sf[c] != sc[c] && !(sf[c] == lc::kUnsupportedForm && (frames[c * cap + 2] & (lc::kFlagDedup | lc::kFlagCodesHuff))))
        fail(std::string(name) + ": fixed_rate changed the status of a fixed-rate or raw frame");
    }
  }
  if (golden) {
    Fnv d;
    d.add(fc); d.add(nc); d.add(frames); d.add(nb); d.add(sc); d.add(vc); d.add(oc);
    fprintf(golden, "%s\t%016llx\n", name, (unsigned long long)d.h);
  }
}

template <int D>
void check_case(const std::string& kind, int64_t batch, uint64_t rows, uint64_t dim, int mode,
                int codec, float ebv, size_t cap, unsigned grid, uint64_t seed) {
  check_data<D>(kind, make_data(kind, batch, rows, dim, seed), batch, rows, dim, mode, codec, ebv,
                cap, grid, seed);
}

const int kDictCodecs[] = {lc::kCodecAuto, lc::kCodecDedup, lc::kCodecEntropy};
const int kAllCodecs[] = {lc::kCodecFixed, lc::kCodecRaw, lc::kCodecAuto, lc::kCodecDedup,
                          lc::kCodecEntropy};

template <int D>
void run_dtype(bool quick) {
  const char* kinds[] = {"normal", "dup", "special", "constant", "zeros", "nan", "wide", "outliers",
                         "subnormal", "hot", "hotnear", "hotspecial", "lowcard"};
  uint64_t seed = 1;
  {
    // The multi-block fixed encoder (encode_gpu: 2 and 3 parts a chunk) on chunks of 4 tiles:
    // no outlier, a few in several parts (one-byte count), >= 128 (two-byte count: the codes
    // move), NaN everywhere (raw), and a fixed-rate capacity that the outliers overflow. Not in
    // the golden corpus (its cases stay as they were); compared with the CPU frames as the rest.
    FILE* g = golden;
    golden = nullptr;
    uint64_t s2 = 1000;
    const size_t fixed_cap = lc::fixed_frame_bytes(256, 64, lc::rel_bits_for(0.01, D), D, 16);
    // "third": a third of the values NaN, more than a part's share of the fixed frame's
    // outliers (each part's positions go to the frame from its own record).
    for (const char* kind : {"normal", "special", "outliers", "nan", "hotspecial", "third"}) {
      check_case<D>(kind, 2, 256, 64, lc::kRel, lc::kCodecFixed, 0.01f, lc::raw_frame_bytes(256, 64, D), 2, s2++);
      check_case<D>(kind, 3, 256, 64, lc::kRel, lc::kCodecFixed, 0.01f, fixed_cap, 2, s2++);
    }
    golden = g;
  }
  for (const char* kind : kinds)
    for (int codec : kAllCodecs)
      for (float ebv : {0.01f, 0.05f, 1e-7f}) {
        if (quick && ebv == 0.05f) continue;
        const uint64_t rows = 40, dim = 24;
        check_case<D>(kind, 3, rows, dim, lc::kRel, codec, ebv, lc::raw_frame_bytes(rows, dim, D), 2, seed++);
      }
  // Shapes: empty chunks, one value, one row, partial groups, tiles and segments, several
  // stream tiles (identity dictionary with Huffman codes), odd sizes (16-bit alignment).
  const uint64_t shapes[][2] = {{0, 5}, {4, 0}, {1, 1}, {3, 5}, {1, 7}, {1, 300}, {1000, 33},
                                {64, 129}, {300, 64}};
  for (auto& s : shapes)
    for (const char* kind : {"special", "outliers", "wide", "hot"})
      for (int codec : kAllCodecs) {
        if (codec == lc::kCodecRaw || (quick && codec == lc::kCodecDedup)) continue;
        if (s[0] * s[1] >= 19200 && codec != lc::kCodecEntropy && codec != lc::kCodecFixed) continue;
        check_case<D>(kind, 3, s[0], s[1], lc::kRel, codec, 0.02f,
                      lc::raw_frame_bytes(s[0], s[1], D), 2, seed++);
      }
  // Absolute bound; large alphabets (sort keys in shared memory up to 1024 symbols, in scratch
  // beyond; bit-packed past 4096); overflow (small capacities).
  for (int codec : kAllCodecs)
    check_case<D>("normal", 2, 32, 16, lc::kAbs, codec, 0.003f, lc::raw_frame_bytes(32, 16, D), 1, seed++);
  for (float ebv : {1e-3f, 2e-4f, 1e-4f})
    for (const char* kind : {"normal", "hot"})
      check_case<D>(kind, 2, 256, 32, lc::kRel, lc::kCodecEntropy, ebv, lc::raw_frame_bytes(256, 32, D), 2, seed++);
  for (size_t cap : {12, 40, 200, 400})
    for (int codec : kAllCodecs)
      check_case<D>("special", 3, 32, 16, lc::kRel, codec, 0.01f, cap, 2, seed++);
  for (size_t cap : {60, 120, 250})
    for (int codec : kDictCodecs)
      check_case<D>("hot", 3, 64, 16, lc::kRel, codec, 0.01f, cap, 2, seed++);
  // Many rows: index sections of several segments (Huffman and bit-packed), a 2048 x 64 chunk.
  if (D == lc::kF32 || !quick) {
    check_case<D>("hot", 1, 2048, 64, lc::kRel, lc::kCodecEntropy, 0.01f, lc::raw_frame_bytes(2048, 64, D), 1, seed++);
    check_case<D>("hotspecial", 2, 3000, 4, lc::kRel, lc::kCodecAuto, 0.01f, lc::raw_frame_bytes(3000, 4, D), 1, seed++);
    check_case<D>("hot", 2, 1500, 8, lc::kRel, lc::kCodecDedup, 0.01f, lc::raw_frame_bytes(1500, 8, D), 1, seed++);
  }
}

// plan_section_dev's code lengths (Moffat-Katajainen depths in shared memory, the length limit
// and the lengths by the block) against the CPU's lc::huff_lengths + huff_codes + plan_section on
// histograms made to stress them: random (many ties), all equal, powers of two and Fibonacci
// frequencies (depths past kMaxHuffLen: the Kraft repair), one or two used symbols, alphabets
// up to kMaxHuffSymbols (sort keys in shared memory and in scratch).
__global__ void plan_kernel(const uint32_t* sym, uint64_t count, int nsym, int bits, uint8_t* ws,
                            uint32_t* enc, uint64_t* out) {
  __shared__ DictShared sh;
  const DictWs w = carve_dict_ws(ws, 8192, 1, lc::kF32, 64);
  const lc::SectionPlan p = plan_section_dev(Flat{sym, nullptr}, count, nsym, bits, true, enc, sh, w);
  if (threadIdx.x == 0) { out[0] = p.huff; out[1] = p.bytes; }
}

// lc::huff_leaf_counts from the internal nodes' depths (the GPU's way) against the leaf depths
// of lc::huff_mk_depths (the CPU's), counted at 32 from depth 32 on, on ascending frequency
// arrays too large to build as symbol streams: Fibonacci weights up to F(45) (depths past 40),
// powers of two, all equal, random with ties; 2 to 4096 leaves.
void check_leaf_counts() {
  Rng r{99};
  int cases = 0, deep = 0;
  for (int t = 0; t < 200; ++t) {
    const int sizes[] = {2, 3, 5, 33, 46, 100, 1000, 4096};
    const int n = sizes[t % 8], kind = (t / 8) % 5;
    std::vector<uint32_t> f(n);
    uint32_t fa = 1, fb = 1;
    for (int i = 0; i < n; ++i) {
      switch (kind) {
        case 0:  // Fibonacci F(1..45), then ones
          f[i] = i < 45 ? fa : 1u;
          if (i < 45) { const uint32_t c = fa + fb; fa = fb; fb = c; }
          break;
        case 1: f[i] = 1u << (i % 20); break;
        case 2: f[i] = 7; break;
        case 3: f[i] = 1 + r.next() % 5; break;
        default: f[i] = 1 + r.next() % 100000;
      }
    }
    std::sort(f.begin(), f.end());
    std::vector<uint32_t> a = f, b = f;
    uint32_t want[33] = {0}, got[33] = {0};
    lc::huff_mk_depths(a.data(), n);
    for (int i = 0; i < n; ++i) want[a[i] > 32 ? 32 : a[i]]++;
    lc::huff_mk_internal_depths(b.data(), n);
    for (int i = 0; i + 1 < n; ++i)
      if (b[i] < 32) got[b[i]]++;
    lc::huff_leaf_counts(got, (uint32_t)n);
    ++checks;
    ++cases;
    if (want[32] != 0) ++deep;
    if (memcmp(want, got, sizeof want) != 0)
      fail("leaf counts from internal depths, case " + std::to_string(t) + " n " + std::to_string(n) +
           " kind " + std::to_string(kind));
  }
  if (!deep) fail("leaf counts: no case with depths past 32");
  printf("Huffman leaves per depth from internal depths: %d cases (%d past depth 32) as the CPU's\n",
         cases, deep);
}

void check_huffman_lengths() {
  Rng r{424242};
  int cases = 0;
  std::vector<uint8_t> ws(al256(dict_ws_bytes(8192, 1, lc::kF32, 64)), 0xA5);
  for (int t = 0; t < 160; ++t) {
    const int sizes[] = {2, 3, 5, 17, 64, 255, 1024, 1025, 3000, 4096};
    const int nsym = sizes[t % 10];
    const int kind = (t / 10) % 8;
    std::vector<uint32_t> freq(nsym, 0);
    uint32_t fa = 1, fb = 1;
    for (int s = 0; s < nsym; ++s) {
      switch (kind) {
        case 0: freq[s] = r.next() % 4; break;                       // ties and unused symbols
        case 1: freq[s] = 1 + r.next() % 1000; break;
        case 2: freq[s] = 7; break;                                  // all equal
        case 3: freq[s] = (r.next() % 3) ? 0 : 1u << (r.next() % 9); break;
        case 4: {                                                    // Fibonacci: long depths
          freq[s] = s < 25 ? fa : 1 + r.next() % 3;
          const uint32_t c = fa + fb; fa = fb; fb = c;
        } break;
        case 5: freq[s] = (s == nsym / 2) ? 5 : 0; break;            // one used symbol
        case 6: freq[s] = (s == 0 || s == nsym - 1) ? 1 + r.next() % 9 : 0; break;  // two
        default: freq[s] = (r.next() % 8 == 0) ? 3000 + r.next() % 5 : r.next() % 3;  // peaked
      }
    }
    if (kind == 4)  // shuffle the Fibonacci frequencies over the alphabet
      for (int s = nsym - 1; s > 0; --s) std::swap(freq[s], freq[r.next() % (s + 1)]);
    std::vector<uint32_t> sym;
    for (int s = 0; s < nsym; ++s) sym.insert(sym.end(), std::min<uint32_t>(freq[s], 2000000), (uint32_t)s);
    for (size_t i = sym.size(); i > 1; --i) std::swap(sym[i - 1], sym[r.next() % i]);
    if (sym.empty()) continue;
    for (int s = 0; s < nsym; ++s) freq[s] = 0;
    for (uint32_t v : sym) freq[v]++;
    const int bits = lc::bits_for((uint32_t)(nsym - 1));
    // CPU: the lengths and codes, and plan_section's choice and size.
    std::vector<uint8_t> len(nsym);
    std::vector<uint16_t> code(nsym);
    std::vector<uint64_t> sorted(nsym);
    std::vector<uint32_t> A(2 * nsym), f2(lc::kMaxHuffSymbols), tmp(lc::kMaxHuffSymbols),
        hist(2 * lc::kMaxHuffSymbols);
    std::vector<uint64_t> sorted2(lc::kMaxHuffSymbols);
    lc::huff_lengths(freq.data(), nsym, len.data(), sorted.data(), A.data());
    int ml = 0;
    const bool codes_ok = lc::huff_codes(len.data(), nsym, code.data(), &ml);
    std::vector<uint8_t> len2(nsym);
    std::vector<uint16_t> code2(nsym);
    const lc::HuffScratch hs = {f2.data(), tmp.data(), hist.data(), sorted2.data()};
    const lc::SectionPlan pc = lc::plan_section(sym.data(), sym.size(), nsym, bits, true, hs, len2.data(), code2.data());
    std::vector<uint32_t> enc(nsym, 0xdeadbeef);
    std::vector<uint64_t> out(2, 99);
    emu::launch(1, kThreads, plan_kernel, sym.data(), (uint64_t)sym.size(), nsym, bits, ws.data(),
                enc.data(), out.data());
    ++checks;
    ++cases;
    std::string name = "huffman lengths case " + std::to_string(t) + " nsym " + std::to_string(nsym) +
                       " kind " + std::to_string(kind);
    if (!codes_ok) { fail(name + ": CPU lengths over-subscribe the code space"); continue; }
    int maxlen = 0;
    for (int s = 0; s < nsym; ++s) {
      maxlen = std::max<int>(maxlen, len[s]);
      if ((enc[s] >> 16) != len[s] || (enc[s] & 0xffff) != code[s]) {
        fail(name + ": symbol " + std::to_string(s) + " gpu length " + std::to_string(enc[s] >> 16) +
             " cpu " + std::to_string(len[s]));
        break;
      }
    }
    if (len2 != len || out[0] != (uint64_t)pc.huff || out[1] != pc.bytes)
      fail(name + ": plan differs from lc::plan_section");
    if (kind == 4 && nsym >= 17 && maxlen != lc::kMaxHuffLen) fail(name + ": length limit not reached");
  }
  printf("Huffman lengths: %d histograms equal to the CPU's\n", cases);
}

// The checksum of fixed-rate frames folded into decode_fast_kernel's staging, over 1, 2, 3 and 8
// blocks a frame (8: one per half tile, the DLRM exchange's split): a byte changed in the header,
// in each unit's codes (so that every part, and every part's own staged words, must catch it),
// in the outlier values, in the stored checksum, or in the padding word past a frame whose
// length is not a multiple of 4 (not part of the frame: still valid) gives the CPU's status
// (BAD_CHECKSUM) and NaN, the intact frames the CPU's values, with and without the parsed
// headers (fixed_rate). Capacities a multiple of 16 (every frame 16-aligned: the folded path)
// and one byte more (frames at odd addresses: the whole-frame sum first).
template <int D>
void check_fold_checksum() {
  const uint64_t rows = 256, dim = 64, n = rows * dim;
  const int bits = lc::rel_bits_for(0.01, D);
  const size_t cap16 = (lc::fixed_frame_bytes(rows, dim, bits, D, 600) + 15) & ~(size_t)15;
  const long fold0 = emu::path_hits[kPathDecodeFold], bad0 = emu::path_hits[kPathDecodeFoldBad];
  std::vector<uint8_t> wsc(lc::workspace_bytes(rows, dim));
  lc::Workspace w = lc::carve_workspace(wsc.data(), rows, dim);
  for (size_t cap : {cap16, cap16 + 1}) {
    const int64_t chunks = 2;
    std::vector<uint8_t> in = to_dtype(make_data("special", chunks, rows, dim, 77), D);
    std::vector<uint8_t> fc(chunks * cap, 0);
    std::vector<int32_t> nc(chunks);
    for (int64_t c = 0; c < chunks; ++c)
      nc[c] = (int32_t)lc::encode_chunk(in.data() + c * n * Dev<D>::kSize, rows, dim, D, 0.01f,
                                        lc::kRel, lc::kCodecFixed, fc.data() + c * cap, cap, w).nbytes;
    // Every frame: intact, then one change each.
    std::vector<uint8_t> frames;
    std::vector<int32_t> nb;
    std::vector<int> want_bad;
    for (int64_t c = 0; c < chunks; ++c) {
      const uint8_t* f0 = fc.data() + c * cap;
      const int32_t len = nc[c];
      lc::FrameHeader h;
      lc::Reader r = {nullptr, nullptr, true};
      const uint8_t* raw = nullptr;
      if (len <= 0 || lc::parse_header(f0, len, cap, rows, dim, D, lc::FrameChecksum{}, h, r, &raw) != lc::kOk ||
          h.form != lc::kFormQuant || h.n_outliers == 0) {
        fail("fold checksum: the test frame is not a fixed-rate frame with outliers");
        return;
      }
      const size_t s0 = (size_t)(r.p - f0), ub = kUnit / 8 * (size_t)bits;
      std::vector<size_t> at = {9, 4, (size_t)len - 1};  // header, checksum, last outlier byte
      for (size_t k = 0; s0 + k * ub < s0 + lc::packed_bytes(n, bits); ++k) at.push_back(s0 + k * ub + ub / 2);
      for (int v = -1; v < (int)at.size() + 1; ++v) {
        std::vector<uint8_t> f(f0, f0 + cap);
        bool bad = v >= 0 && v < (int)at.size();
        if (bad) f[at[v]] ^= 0x5a;
        if (v == (int)at.size()) {  // past the frame, inside its last word: not checksummed
          if (len % 4 == 0 || (size_t)len >= cap) continue;
          f[len] ^= 0x5a;
        }
        frames.insert(frames.end(), f.begin(), f.end());
        nb.push_back(len);
        want_bad.push_back(bad ? 1 : 0);
      }
    }
    const int64_t total = (int64_t)nb.size();
    const size_t chunk = n * Dev<D>::kSize;
    std::vector<uint8_t> oc(total * chunk);
    std::vector<int32_t> sc(total);
    for (int64_t c = 0; c < total; ++c) {
      sc[c] = lc::decode_frame<true>(frames.data() + c * cap, nb[c], cap, rows, dim, D, oc.data() + c * chunk, w);
      if (sc[c] != (want_bad[c] ? lc::kBadChecksum : lc::kOk))
        fail("fold checksum: CPU status " + std::to_string(sc[c]) + " of frame " + std::to_string(c));
    }
    for (int64_t parts : {1, 2, 3, 8})
      for (bool with_info : {false, true}) {
        std::vector<uint8_t> og(total * chunk, 0xCD);
        std::vector<int32_t> sg(total, 777);
        std::vector<FastFrame> info(total);
        emu::launch(5, kThreads, decode_fast_kernel<D, true>, frames.data(), nb.data(), total, cap,
                    rows, dim, og.data(), sg.data(), with_info ? info.data() : (FastFrame*)nullptr, parts);
        ++checks;
        const std::string name = "fold checksum dtype " + std::to_string(D) + " cap " + std::to_string(cap) +
                                 " parts " + std::to_string(parts) + (with_info ? " (headers)" : "");
        if (sg != sc) fail(name + ": statuses differ from the CPU");
        else if (og != oc) fail(name + ": values differ from the CPU");
        for (int64_t c = 0; with_info && c < total; ++c)
          if (info[c].kind != (want_bad[c] ? kKindError : kKindFixed) || info[c].status != sc[c]) {
            fail(name + ": parsed header of frame " + std::to_string(c));
            break;
          }
      }
  }
  if (emu::path_hits[kPathDecodeFold] == fold0 || emu::path_hits[kPathDecodeFoldBad] == bad0)
    fail("fold checksum: the folded path or its mismatch never ran");
}

// Real dumps (float32 [rows, dim] files named *_ROWSxDIM_f32.bin): each whole, and the DLRM
// exchange shape (26 tables x 8 peers chunks of [256, 64]) cut from the [*, 64] ones.
void run_dumps(const std::string& dir, bool quick) {
  std::vector<std::pair<std::vector<float>, std::pair<uint64_t, uint64_t>>> dumps;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    unsigned long rows = 0, dim = 0;
    const size_t u = f.rfind("_f32.bin");
    if (u == std::string::npos) continue;
    const size_t s = f.rfind('_', u - 1);
    if (s == std::string::npos || sscanf(f.c_str() + s + 1, "%lux%lu", &rows, &dim) != 2) continue;
    std::vector<float> x(rows * dim);
    std::ifstream in(e.path(), std::ios::binary);
    in.read(reinterpret_cast<char*>(x.data()), (std::streamsize)(x.size() * 4));
    if (!in) continue;
    dumps.push_back({x, {rows, dim}});
  }
  std::sort(dumps.begin(), dumps.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  printf("%zu dumps in %s\n", dumps.size(), dir.c_str());
  uint64_t seed = 5000;
  std::vector<float> ex;  // the exchange shape
  const uint64_t er = 256, ed = 64, eb = 26 * 8;
  for (const auto& d : dumps) {
    const uint64_t rows = d.second.first, dim = d.second.second;
    for (int codec : kDictCodecs)
      check_data<lc::kF32>("dump", d.first, 1, rows, dim, lc::kRel, codec, 0.01f,
                           lc::raw_frame_bytes(rows, dim, lc::kF32), 1, seed++, 3);
    if (!quick) check_data<lc::kBF16>("dump", d.first, 1, rows, dim, lc::kRel, lc::kCodecAuto, 0.01f,
                                      lc::raw_frame_bytes(rows, dim, lc::kBF16), 1, seed++, 3);
    if (dim == ed)
      for (uint64_t r0 = 0; r0 + er <= rows && ex.size() < eb * er * ed; r0 += er)
        ex.insert(ex.end(), d.first.begin() + r0 * dim, d.first.begin() + (r0 + er) * dim);
  }
  if (ex.empty()) return;
  while (ex.size() < eb * er * ed) ex.insert(ex.end(), ex.begin(), ex.begin() + er * ed);
  ex.resize(eb * er * ed);
  check_data<lc::kF32>("exchange", ex, (int64_t)eb, er, ed, lc::kRel, lc::kCodecAuto, 0.01f,
                       lc::raw_frame_bytes(er, ed, lc::kF32), 7, seed++, 16);
  if (!quick)
    check_data<lc::kF32>("exchange", ex, (int64_t)eb, er, ed, lc::kRel, lc::kCodecEntropy, 0.01f,
                         lc::raw_frame_bytes(er, ed, lc::kF32), 7, seed++, 16);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string dumps;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "quick") quick = true;  // fewer error bounds and large shapes
    else if (std::string(argv[i]) == "golden" && i + 1 < argc) golden = fopen(argv[++i], "w");
    else dumps = argv[i];
  }
  check_leaf_counts();
  check_huffman_lengths();
  check_fold_checksum<lc::kF32>();
  check_fold_checksum<lc::kBF16>();
  run_dtype<lc::kF32>(quick);
  const long f32_vec = emu::path_hits[lc::gpu::kPathEncodeVec];
  run_dtype<lc::kBF16>(quick);
  half_vec_hits = emu::path_hits[lc::gpu::kPathEncodeVec] - f32_vec;
  run_dtype<lc::kF16>(quick);
  if (!dumps.empty()) run_dumps(dumps, quick);
  const char* forms[] = {"raw", "fixed-rate", "dictionary", "Huffman codes", "Huffman index"};
  for (int k = 0; k < 5; ++k)
    if (!seen_form[k]) fail(std::string("coverage: no ") + forms[k] + " frame");
  if (!seen_unsupported) fail("coverage: fixed_rate decoding never met a dictionary frame");
  // The 16-byte full-tile paths (f32 and the half types) and the guarded ones all ran.
  printf("paths: encode 16-byte tiles %ld, guarded %ld; decode 16-byte tiles %ld, guarded %ld\n",
         emu::path_hits[lc::gpu::kPathEncodeVec], emu::path_hits[lc::gpu::kPathEncodeScalar],
         emu::path_hits[lc::gpu::kPathDecodeVec], emu::path_hits[lc::gpu::kPathDecodeScalar]);
  printf("paths: decode frames spread over several blocks %ld; encode parts %ld\n",
         emu::path_hits[lc::gpu::kPathDecodeMultiBlock], emu::path_hits[lc::gpu::kPathEncodeMultiBlock]);
  printf("paths: encode half tiles %ld; decode half tiles %ld\n",
         emu::path_hits[lc::gpu::kPathEncodeHalf], emu::path_hits[lc::gpu::kPathDecodeHalf]);
  printf("paths: decode checksum folded into the staging %ld, mismatches caught there %ld\n",
         emu::path_hits[lc::gpu::kPathDecodeFold], emu::path_hits[lc::gpu::kPathDecodeFoldBad]);
  printf("paths: Huffman sections decoded a warp a segment %ld (a second round of starts %ld), "
         "a thread a segment %ld\n",
         emu::path_hits[lc::gpu::kPathHuffWarp], emu::path_hits[lc::gpu::kPathHuffWarpRounds],
         emu::path_hits[lc::gpu::kPathHuffThread]);
  for (int k = 0; k < lc::gpu::kNumPaths; ++k)
    if (!emu::path_hits[k]) fail("coverage: kernel path " + std::to_string(k) + " never taken");
  if (!half_vec_hits) fail("coverage: no 16-byte tile of a half type encoded");
  for (int st : {lc::kOk, lc::kTruncated, lc::kBadHeader, lc::kBadChecksum, lc::kCorrupt, lc::kTrailingBytes})
    if (!seen_status[st]) fail("coverage: no dictionary/Huffman frame decoded to status " + std::to_string(st));
  printf("forms: raw %d, fixed-rate %d, dictionary %d, Huffman codes %d, Huffman index %d\n",
         seen_form[0], seen_form[1], seen_form[2], seen_form[3], seen_form[4]);
  printf("dictionary/Huffman decode statuses:");
  for (int st = 0; st < 10; ++st) printf(" %d:%d", st, seen_status[st]);
  printf("\n%d checks, %d failures\n", checks, failures);
  if (golden) fclose(golden);
  return failures ? 1 : 0;
}
