// Decoder fuzz harness for the CPU codec (xla_ffi/codec.h), built with AddressSanitizer and UBSan by
// tests/native/test_fuzz.py (or by hand: see the comment at the end).
//
// Encodes random chunks with every codec, then feeds the decoder mutated frames (bit flips,
// byte overwrites, truncation, extension, random bytes under a valid header) with a valid
// checksum re-stamped half of the time, so structural checks behind the checksum are reached
// too. Every decode must return a status (0 only for the untouched frame) and write only the
// output it was given; the sanitizers abort on any out-of-bounds access or undefined behaviour.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "codec.h"

int main(int argc, char** argv) {
  const long iters = argc > 1 ? atol(argv[1]) : 20000;
  std::mt19937_64 rng(argc > 2 ? atol(argv[2]) : 1);
  long decoded = 0, rejected = 0;
  for (long t = 0; t < iters; ++t) {
    const uint64_t rows = rng() % 70, dim = rng() % 40;
    const int dtype = (int)(rng() % 3), isz = lc::dtype_size(dtype), codec = (int)(rng() % 5);
    const uint64_t n = rows * dim;
    std::vector<uint8_t> x(n * isz);
    const int hot = 1 + (int)(rng() % 6);
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t j = 0; j < dim; ++j) {
        float v = (float)((r % hot) * 0.37 + j * 0.01) * ((rng() % 8) ? 1.0f : (float)(rng() % 1000));
        if (rng() % 97 == 0) v = NAN;
        lc::store_value(x.data(), dtype, r * dim + j, v);
      }
    const size_t cap = lc::raw_frame_bytes(rows, dim, dtype);
    std::vector<uint8_t> ws(lc::workspace_bytes(rows, dim));
    lc::Workspace w = lc::carve_workspace(ws.data(), rows, dim);
    // Exactly-sized heap buffers: ASan flags any byte read or written past them.
    uint8_t* frame = (uint8_t*)malloc(cap ? cap : 1);
    const float eb = (rng() % 4) ? 0.01f * (float)(1 + rng() % 10) : 0.0f;
    int64_t nb = lc::encode_chunk(x.data(), rows, dim, dtype, eb, (int)(rng() % 2), codec, frame, cap, w).nbytes;
    if (nb < 0) { fprintf(stderr, "raw capacity overflowed\n"); return 1; }
    uint8_t* out = (uint8_t*)malloc(n * isz ? n * isz : 1);
    if (lc::decode_frame<true>(frame, nb, cap, rows, dim, dtype, out, w) != lc::kOk) {
      fprintf(stderr, "valid frame rejected at iteration %ld\n", t);
      return 1;
    }
    for (int m = 0; m < 8; ++m) {
      std::vector<uint8_t> f(frame, frame + cap);
      int64_t fn = nb;
      switch (rng() % 5) {
        case 0: f[rng() % (uint64_t)nb] ^= (uint8_t)(1u << (rng() % 8)); break;
        case 1: f[rng() % (uint64_t)nb] = (uint8_t)rng(); break;
        case 2: fn = (int64_t)(rng() % (uint64_t)(nb + 1)); break;
        case 3: fn = nb + (int64_t)(rng() % 8); break;
        default:
          for (int64_t i = lc::kHeaderFixed; i < nb; ++i) f[i] = (uint8_t)rng();
      }
      if (fn > (int64_t)cap) fn = (int64_t)cap;
      if (rng() % 2 && fn >= lc::kHeaderFixed) lc::put_u32(f.data() + 4, lc::lc_checksum(f.data(), (size_t)fn));
      uint8_t* fb = (uint8_t*)malloc(cap ? cap : 1);
      memcpy(fb, f.data(), cap);
      int32_t st = lc::decode_frame<true>(fb, fn, cap, rows, dim, dtype, out, w);
      int32_t st2 = lc::decode_frame<false>(fb, fn, cap, rows, dim, dtype, nullptr, w);
      if (st != st2) { fprintf(stderr, "status %d != validate %d\n", st, st2); return 1; }
      if (st == lc::kOk && (fn != nb || memcmp(fb, frame, (size_t)nb) != 0)) {
        // a mutation that still decodes must at least be a valid frame of the right shape
        ++decoded;
      } else if (st != lc::kOk) {
        ++rejected;
      }
      free(fb);
    }
    free(frame);
    free(out);
  }
  printf("fuzz: %ld iterations, %ld mutated frames rejected, %ld still valid\n", iters, rejected, decoded);
  return 0;
}
// Build by hand: g++ -std=c++17 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
//   -ffp-contract=off -I../../xla_ffi fuzz_frames.cc -o fuzz_frames && ./fuzz_frames 100000
