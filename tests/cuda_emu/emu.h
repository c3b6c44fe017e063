// Runs the CUDA kernels of xla_ffi/codec_cuda.cu on the CPU: each thread block is `blockDim.x`
// std::threads; __syncthreads is a barrier; warp shuffles go through a block-wide buffer between
// two barriers (every shuffle in the codec is reached by the whole block, so this is exact).
// Blocks run one after another, so __shared__ variables can be function statics.
//
// This checks the kernels' logic (tiling, packing, scans, outlier handling, frame layout,
// checksums, bounds) against the CPU codec without a GPU; it says nothing about the memory
// model, timing or the real compiler. Build with -DLC_CUDA_EMULATION -include emu.h.
#pragma once

#include <stdint.h>
#include <string.h>

#include <condition_variable>
#include <functional>
#include <math.h>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct alignas(16) float4 { float x, y, z, w; };
struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
inline emu_dim3 blockIdx, gridDim, blockDim;
inline thread_local emu_dim3 threadIdx;

namespace emu {

struct Barrier {
  std::mutex m;
  std::condition_variable cv;
  unsigned n = 0, waiting = 0, generation = 0;
  void wait() {
    std::unique_lock<std::mutex> lk(m);
    unsigned gen = generation;
    if (++waiting == n) {
      waiting = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lk, [&] { return gen != generation; });
    }
  }
};
inline Barrier barrier;
inline std::vector<uint64_t> exchange;  // one slot per thread of the block
inline int or_acc = 0;

template <typename T> inline uint64_t to_bits(T v) { uint64_t b = 0; memcpy(&b, &v, sizeof(T)); return b; }
template <typename T> inline T from_bits(uint64_t b) { T v; memcpy(&v, &b, sizeof(T)); return v; }

template <typename T>
inline T shuffle(T v, unsigned src_lane) {
  const unsigned t = threadIdx.x, warp0 = t & ~31u;
  exchange[t] = to_bits(v);
  barrier.wait();
  T r = from_bits<T>(exchange[warp0 + src_lane]);
  barrier.wait();
  return r;
}

// A pool of blockDim.x threads per block size, kept across launches (spawning 128 threads per
// block made the checks slow). The launching thread waits on `done`.
struct Pool {
  unsigned threads;
  Barrier start, done;
  std::function<void()> job;
  bool quit = false;
  std::vector<std::thread> ts;
  explicit Pool(unsigned n) : threads(n) {
    start.n = done.n = n + 1;
    for (unsigned t = 0; t < n; ++t)
      ts.emplace_back([this, t] {
        threadIdx.x = t;
        for (;;) {
          start.wait();
          if (quit) return;
          job();
          done.wait();
        }
      });
  }
  ~Pool() {
    quit = true;
    start.wait();
    for (auto& th : ts) th.join();
  }
};
inline Pool& pool(unsigned threads) {
  static std::vector<std::unique_ptr<Pool>> pools;
  for (auto& p : pools)
    if (p->threads == threads) return *p;
  pools.emplace_back(new Pool(threads));
  return *pools.back();
}

// Runs kernel(args...) over a grid of `grid` blocks of `threads` threads, one block at a time.
template <typename... Params, typename... Args>
void launch(unsigned grid, unsigned threads, void (*kernel)(Params...), Args... args) {
  gridDim.x = grid;
  blockDim.x = threads;
  barrier.n = threads;
  exchange.assign(threads, 0);
  Pool& p = pool(threads);
  p.job = [=] { kernel(static_cast<Params>(args)...); };
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx.x = b;
    p.start.wait();
    p.done.wait();
  }
}

}  // namespace emu

inline void __syncthreads() { emu::barrier.wait(); }
inline int __syncthreads_or(int pred) {
  emu::barrier.wait();  // or_acc is reset by the previous call's last barrier
  if (pred) {
    std::lock_guard<std::mutex> lk(emu::barrier.m);
    emu::or_acc = 1;
  }
  emu::barrier.wait();
  int r;
  {
    std::lock_guard<std::mutex> lk(emu::barrier.m);
    r = emu::or_acc;
  }
  emu::barrier.wait();
  if (threadIdx.x == 0) emu::or_acc = 0;
  emu::barrier.wait();
  return r;
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int o) {
  return emu::shuffle(v, (threadIdx.x & 31u) ^ (unsigned)o);
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, int o) {
  const unsigned lane = threadIdx.x & 31u;
  return emu::shuffle(v, lane >= (unsigned)o ? lane - (unsigned)o : lane);
}
inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, unsigned sh) {
  return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31u));
}
