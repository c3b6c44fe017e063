// Runs the CUDA kernels of xla_ffi/*.cuh on the CPU: each thread of a block is a fiber
// on one OS thread; __syncthreads ends the fiber's share of the current phase, and a
// phase ends when every thread of the block has reached the barrier. Within a phase the threads
// run one after another in a shuffled order (a new order every phase), so a value read before
// the barrier that should have published it is caught as a wrong result, whichever thread wrote
// it. Warp shuffles and ballots go through a block-wide buffer between two barriers (every
// shuffle in the codec is reached by the whole block, so this is exact); a block whose threads
// do not all reach the same barrier (some returned, others wait) aborts the run.
// Blocks run one after another, so __shared__ variables can be function statics.
//
// This checks the kernels' logic (tiling, packing, scans, hashing, outlier handling, frame
// layout, checksums, bounds) against the CPU codec without a GPU; it says nothing about the
// memory model, timing or the real compiler. Build with -DLC_CUDA_EMULATION -include emu.h.
// Under AddressSanitizer the fiber switches are announced (__sanitizer_*_switch_fiber).
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <math.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#if defined(EMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

// Paths of the kernels taken (cuda_common.cuh: LC_GPU_PATH), counted per block so that a test
// can show it ran the path it checks.
namespace emu {
inline long path_hits[16] = {0};
}
#define LC_GPU_PATH(k) (threadIdx.x == 0 ? (void)++emu::path_hits[k] : (void)0)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
inline emu_dim3 blockIdx, gridDim, blockDim, threadIdx;

namespace emu {

constexpr size_t kStackBytes = size_t(1) << 18;  // per fiber (ASan frames are large)

// Fibers live as long as the program: each runs `job` (the current block's kernel) in a loop.
// Switches are __builtin_setjmp/__builtin_longjmp (no system call, no ASan interceptor); only
// the first entry into a fiber goes through setcontext.
struct Fiber {
  void* jb[5];
  ucontext_t ctx;
  std::vector<char> stack;
  bool started = false;
  bool done = false;
  void* fake_stack = nullptr;  // ASan's fake stack of this fiber while it is switched out
};

struct Scheduler {
  void* main_jb[5];
  std::vector<Fiber> fibers;
  std::function<void()> job;
  unsigned cur = 0;
  const void* main_bottom = nullptr;  // ASan: the scheduler's stack
  size_t main_size = 0;
  void* main_fake = nullptr;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
};
inline Scheduler sched;
inline std::vector<uint64_t> exchange;  // one slot per thread of the block
inline int or_acc = 0;

// Not instrumented: ASan would unpoison the whole stack before each no-return jump, and the
// switches are announced to it explicitly instead.
#define EMU_SWITCH [[gnu::noinline, gnu::no_sanitize_address]] inline
EMU_SWITCH void jump(void** jb) { __builtin_longjmp(jb, 1); }

// Fiber -> scheduler (at a barrier, or at the end of the kernel with `done`).
EMU_SWITCH void yield(bool done) {
  Fiber& f = sched.fibers[sched.cur];
  f.done = done;
  if (__builtin_setjmp(f.jb) == 0) {
#if defined(EMU_ASAN)
    __sanitizer_start_switch_fiber(&f.fake_stack, sched.main_bottom, sched.main_size);
#endif
    jump(sched.main_jb);
  }
#if defined(EMU_ASAN)
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
}

inline void fiber_entry() {
#if defined(EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &sched.main_bottom, &sched.main_size);
#endif
  for (;;) {
    sched.job();
    yield(true);
  }
}

// Scheduler -> fiber t, until it reaches a barrier or ends.
EMU_SWITCH void resume(unsigned t) {
  Fiber& f = sched.fibers[t];
  sched.cur = t;
  threadIdx.x = t;
  if (__builtin_setjmp(sched.main_jb) == 0) {
#if defined(EMU_ASAN)
    __sanitizer_start_switch_fiber(&sched.main_fake, f.stack.data(), f.stack.size());
#endif
    if (f.started) jump(f.jb);
    f.started = true;
    setcontext(&f.ctx);
  }
#if defined(EMU_ASAN)
  __sanitizer_finish_switch_fiber(sched.main_fake, nullptr, nullptr);
#endif
}

inline void barrier() { yield(false); }

// Runs one block: phase after phase, every live thread once per phase in a shuffled order.
inline void run_block(unsigned threads) {
  if (sched.fibers.size() < threads) {
    // Fibers hold pointers into their own records: allocate them once, never move them.
    if (!sched.fibers.empty()) { fprintf(stderr, "emu: one block size per run\n"); abort(); }
    sched.fibers = std::vector<Fiber>(threads);
    for (Fiber& f : sched.fibers) {
      f.stack.resize(kStackBytes);
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.data();
      f.ctx.uc_stack.ss_size = f.stack.size();
      f.ctx.uc_link = nullptr;
      makecontext(&f.ctx, fiber_entry, 0);
    }
  }
  std::vector<unsigned> order(threads);
  for (unsigned t = 0; t < threads; ++t) {
    order[t] = t;
    sched.fibers[t].done = false;
  }
  for (;;) {
    for (unsigned t = threads; t > 1; --t) {  // Fisher-Yates with an LCG
      sched.rng = sched.rng * 6364136223846793005ull + 1442695040888963407ull;
      const unsigned k = (unsigned)((sched.rng >> 33) % t);
      const unsigned tmp = order[t - 1];
      order[t - 1] = order[k];
      order[k] = tmp;
    }
    unsigned waiting = 0, ended = 0;
    for (unsigned t : order) {
      if (sched.fibers[t].done) continue;
      resume(t);
      if (sched.fibers[t].done) ++ended;
      else ++waiting;
    }
    if (waiting == 0) return;
    if (ended != 0) {
      fprintf(stderr, "emu: block %u: %u threads ended while %u wait at a barrier\n", blockIdx.x,
              ended, waiting);
      abort();
    }
  }
}

template <typename T> inline uint64_t to_bits(T v) { uint64_t b = 0; memcpy(&b, &v, sizeof(T)); return b; }
template <typename T> inline T from_bits(uint64_t b) { T v; memcpy(&v, &b, sizeof(T)); return v; }

template <typename T>
inline T shuffle(T v, unsigned src_lane) {
  const unsigned t = threadIdx.x, warp0 = t & ~31u;
  exchange[t] = to_bits(v);
  barrier();
  T r = from_bits<T>(exchange[warp0 + src_lane]);
  barrier();
  return r;
}

// Runs kernel(args...) over a grid of `grid` blocks of `threads` threads, one block at a time.
template <typename... Params, typename... Args>
void launch(unsigned grid, unsigned threads, void (*kernel)(Params...), Args... args) {
  gridDim.x = grid;
  blockDim.x = threads;
  exchange.assign(threads, 0);
  sched.job = [=] { kernel(static_cast<Params>(args)...); };
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx.x = b;
    run_block(threads);
  }
}

}  // namespace emu

inline void __syncthreads() { emu::barrier(); }
inline int __syncthreads_or(int pred) {
  if (pred) emu::or_acc = 1;
  emu::barrier();
  const int r = emu::or_acc;
  emu::barrier();
  if (threadIdx.x == 0) emu::or_acc = 0;
  emu::barrier();  // reset before anyone's next call
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
inline unsigned __ballot_sync(unsigned, int pred) {
  const unsigned t = threadIdx.x, warp0 = t & ~31u;
  emu::exchange[t] = pred ? 1 : 0;
  emu::barrier();
  unsigned m = 0;
  for (unsigned l = 0; l < 32 && warp0 + l < blockDim.x; ++l)
    if (emu::exchange[warp0 + l]) m |= 1u << l;
  emu::barrier();
  return m;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
// Atomics: the threads of a block take turns on one OS thread, so plain read-modify-writes are
// atomic here; the interleavings a GPU allows between them come from the shuffled phase order.
inline unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned o = *p; *p = o + v; return o; }
inline unsigned atomicOr(unsigned* p, unsigned v) { const unsigned o = *p; *p = o | v; return o; }
inline int atomicCAS(int* p, int cmp, int v) { const int o = *p; if (o == cmp) *p = v; return o; }
inline int atomicMin(int* p, int v) { const int o = *p; if (v < o) *p = v; return o; }
template <typename T> inline T __ldcg(const T* p) { return *p; }
