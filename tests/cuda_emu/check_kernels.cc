// Checks the CUDA kernels of xla_ffi/codec_cuda.cu, run on the CPU through emu.h, against the
// CPU codec of frame.h: frames byte for byte (fixed and raw forms, fast kernel; auto form,
// serial kernel), decoded values and statuses of valid and corrupted frames (fast and serial
// decode kernels). Prints one line per failure and exits non-zero on any.
//
//   g++ -std=c++20 -O1 -g -fsanitize=address,undefined -pthread -DLC_CUDA_EMULATION \
//       -include tests/cuda_emu/emu.h -Ixla_ffi tests/cuda_emu/check_kernels.cc -o check && ./check
// (`./check quick` skips one of the three error bounds of the data-kind sweep.)
#include "../../xla_ffi/codec_cuda.cu"

#include <stdio.h>

#include <memory>
#include <string>
#include <vector>

namespace {

size_t al256(size_t v) { return (v + 255) & ~(size_t)255; }

int failures = 0;
int checks = 0;

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
  } else if (kind == "outliers") {  // >= 128 outliers per chunk: two-byte outlier count
    for (size_t i = 0; i < x.size(); i += 7) x[i] = lc::u2f(0x7fc00000u);
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
    const size_t stride = al256(4 * n);
    std::vector<uint8_t> ws(stride * grid + 256);
    emu::launch(grid, kThreads, encode_fixed_kernel<D>, in.data(), eb.data(), batch, rows, dim,
                mode, codec, frames.data(), cap, nbytes.data(), ws.data(), stride);
  } else {
    const size_t stride = al256(lc::workspace_bytes(rows, dim));
    const int64_t workers = batch < 5 ? batch : 5;
    std::vector<uint8_t> ws(stride * workers);
    emu::launch((unsigned)((workers + 31) / 32), 32, encode_generic_kernel<D>, in.data(), eb.data(),
                batch, rows, dim, mode, codec, frames.data(), cap, nbytes.data(), ws.data(),
                stride, workers);
  }
}

template <int D, bool kWrite>
void decode_gpu(const std::vector<uint8_t>& frames, const std::vector<int32_t>& nbytes,
                int64_t batch, uint64_t rows, uint64_t dim, size_t cap, unsigned grid,
                std::vector<uint8_t>& out, std::vector<int32_t>& status) {
  const size_t chunk = rows * dim * Dev<D>::kSize;
  out.assign(kWrite ? batch * chunk : 0, 0xCD);
  status.assign(batch, 777);
  std::vector<uint8_t> pending(batch, 0xEE);
  const size_t wsb = al256(lc::workspace_bytes(rows, dim));
  const int64_t workers = batch < 3 ? batch : 3;
  std::vector<uint8_t> ws(wsb * workers + (kWrite ? 0 : al256(chunk) * workers));
  uint8_t* x = kWrite ? out.data() : nullptr;
  emu::launch(grid, kThreads, decode_fast_kernel<D, kWrite>, frames.data(), nbytes.data(), batch,
              cap, rows, dim, x, status.data(), pending.data());
  uint8_t* o = kWrite ? x : ws.data() + wsb * workers;
  emu::launch((unsigned)((workers + 31) / 32), 32, decode_generic_kernel<D>, frames.data(),
              nbytes.data(), batch, cap, rows, dim, o, !kWrite, status.data(),
              (const uint8_t*)pending.data(), ws.data(), wsb, workers);
}

template <int D>
void check_case(const std::string& kind, int64_t batch, uint64_t rows, uint64_t dim, int mode,
                int codec, float ebv, size_t cap, unsigned grid, uint64_t seed) {
  char name[256];
  snprintf(name, sizeof name, "%s dtype=%d [%lld,%llu,%llu] mode=%d codec=%d eb=%g cap=%zu grid=%u",
           kind.c_str(), D, (long long)batch, (unsigned long long)rows, (unsigned long long)dim,
           mode, codec, ebv, cap, grid);
  const uint64_t n = rows * dim;
  const size_t chunk = n * Dev<D>::kSize;
  std::vector<uint8_t> in = to_dtype(make_data(kind, batch, rows, dim, seed), D);
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
  const int64_t fuzz = batch * 3;
  for (int64_t k = 0; k < fuzz; ++k) {
    int64_t src = k % batch;
    std::vector<uint8_t> f(fc.begin() + src * cap, fc.begin() + (src + 1) * cap);
    int32_t len = nc[src];
    switch (r.next() % 5) {
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
  std::vector<uint8_t> oc(total * chunk), og;
  std::vector<int32_t> sc(total), sg, vc(total), vg;
  for (int64_t c = 0; c < total; ++c) {
    sc[c] = lc::decode_frame<true>(frames.data() + c * cap, nb[c], cap, rows, dim, D,
                                   oc.data() + c * chunk, w);
    vc[c] = lc::decode_frame<false>(frames.data() + c * cap, nb[c], cap, rows, dim, D, nullptr, w);
  }
  decode_gpu<D, true>(frames, nb, total, rows, dim, cap, grid, og, sg);
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
}

template <int D>
void run_dtype(bool quick) {
  const char* kinds[] = {"normal", "dup", "special", "constant", "zeros", "nan", "wide", "outliers",
                         "subnormal"};
  uint64_t seed = 1;
  for (const char* kind : kinds)
    for (int codec : {lc::kCodecFixed, lc::kCodecRaw})
      for (float ebv : {0.01f, 0.05f, 1e-7f}) {
        if (quick && ebv == 0.05f) continue;
        const uint64_t rows = 40, dim = 24;
        check_case<D>(kind, 3, rows, dim, lc::kRel, codec, ebv, lc::raw_frame_bytes(rows, dim, D), 2, seed++);
      }
  // Shapes: partial groups and tiles, several tiles, one value, odd sizes (16-bit alignment).
  const uint64_t shapes[][2] = {{1, 1}, {3, 5}, {1, 7}, {1000, 33}, {64, 129}, {300, 64}};
  for (auto& s : shapes)
    for (const char* kind : {"special", "outliers", "wide"})
      check_case<D>(kind, 3, s[0], s[1], lc::kRel, lc::kCodecFixed, 0.02f,
                    lc::raw_frame_bytes(s[0], s[1], D), 2, seed++);
  // Absolute bound, overflow (small capacities), the serial encoder (auto).
  check_case<D>("normal", 2, 32, 16, lc::kAbs, lc::kCodecFixed, 0.003f, lc::raw_frame_bytes(32, 16, D), 1, seed++);
  for (size_t cap : {12, 40, 200, 400})
    check_case<D>("special", 3, 32, 16, lc::kRel, lc::kCodecFixed, 0.01f, cap, 2, seed++);
  check_case<D>("special", 3, 32, 16, lc::kRel, lc::kCodecRaw, 0.01f, 300, 2, seed++);
  for (int codec : {lc::kCodecAuto, lc::kCodecDedup, lc::kCodecEntropy})
    for (const char* kind : {"dup", "special"})
      check_case<D>(kind, 4, 40, 24, lc::kRel, codec, 0.02f, lc::raw_frame_bytes(40, 24, D), 2, seed++);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";  // fewer error bounds
  run_dtype<lc::kF32>(quick);
  run_dtype<lc::kBF16>(quick);
  run_dtype<lc::kF16>(quick);
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
