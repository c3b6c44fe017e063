// Host side of the CUDA handlers: sizes, allocates and carves the scratch, chooses the grids and
// launches the kernels, over a runtime policy so that it runs in two places: codec_cuda.cu
// instantiates it with the CUDA runtime and XLA's scratch allocator, tests/native/cuda_emu/check_host.cc
// with the CPU emulation of the kernels and a stand-in allocator that enforces XLA's contract.
//
// Runtime policy Rt (every int result: 0 on success, else the runtime's error code):
//   using Stream;
//   int device_of(Stream s, int* device);          the device the stream belongs to
//   int sm_count(int device, int* sms);
//   template <class K> int blocks_per_sm(K kernel, int threads, int device, int* blocks);
//   template <class K, class... A>
//   int launch(K kernel, unsigned grid, unsigned threads, Stream s, A... args);
// Scratch allocator S, the interface of ffi::ScratchAllocator:
//   std::optional<void*> Allocate(size_t bytes, size_t alignment);
// XLA's FFI device allocator accepts alignments up to 16 only (a power of two), may fail, and
// frees the blocks when the handler returns; kernels only run on the stream they are given.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "decode_kernels.cuh"
#include "encode_kernels.cuh"
#include "format.h"

namespace lc {
namespace gpu {

constexpr size_t kScratchAlign = 16;  // the largest alignment XLA's FFI allocator accepts
constexpr size_t kWsAlign = 256;      // of each block's workspace, aligned inside the scratch

// Scratch the workspaces of one launch may take, at most (the grid shrinks to fit; one block
// always runs). Every launch sizes its grid by these.
struct ScratchBudget {
  size_t fixed_encode = size_t(1) << 28;  // outlier positions of encode_fixed_kernel's blocks
  size_t dict_encode = size_t(1) << 29;   // encode_dict_kernel's workspaces
  size_t dict_decode = size_t(1) << 28;   // decode_dict_kernel's workspaces
};

// What a launch returns: kOk, a runtime error (its code in `error`) or no scratch.
struct LaunchResult {
  enum Kind : int { kOk = 0, kRuntimeError = 1, kScratchError = 2 };
  int kind;
  int error;
};
inline LaunchResult launch_ok() { return {LaunchResult::kOk, 0}; }
inline LaunchResult runtime_error(int e) { return {LaunchResult::kRuntimeError, e}; }
inline LaunchResult scratch_error() { return {LaunchResult::kScratchError, 0}; }

inline size_t align256(size_t v) { return (v + kWsAlign - 1) & ~(kWsAlign - 1); }

// Blocks of a grid-stride loop over `batch` chunks: as many as are resident at once (`resident`),
// at most one per chunk, and no more than `budget` bytes of workspaces of `ws_stride` bytes.
// (ws_stride 0: no workspaces, no memory limit).
inline int64_t grid_blocks(int64_t batch, int64_t resident, size_t ws_stride, size_t budget) {
  int64_t blocks = batch < resident ? batch : resident;
  if (ws_stride != 0 && blocks > (int64_t)(budget / ws_stride)) blocks = (int64_t)(budget / ws_stride);
  return blocks < 1 ? 1 : blocks;
}

// `bytes` of scratch starting at a kWsAlign boundary: asks for kScratchAlign (XLA rejects more)
// and rounds the pointer up inside a block kWsAlign - kScratchAlign bytes larger.
template <class S>
uint8_t* allocate_aligned(S& scratch, size_t bytes) {
  std::optional<void*> ws = scratch.Allocate(bytes + kWsAlign - kScratchAlign, kScratchAlign);
  if (!ws.has_value() || *ws == nullptr) return nullptr;
  return reinterpret_cast<uint8_t*>(align256(reinterpret_cast<uintptr_t>(*ws)));
}

// Resident blocks (SMs times blocks per SM) of each kernel on each device, asked of the runtime
// once and then read from here (thread-safe: handlers may run on several threads).
class ResidentBlocks {
 public:
  template <class Rt, class K>
  int get(Rt& rt, K kernel, int device, int64_t* blocks) {
    const std::pair<const void*, int> key(reinterpret_cast<const void*>(kernel), device);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(key);
      if (it != cache_.end()) {
        *blocks = it->second;
        return 0;
      }
    }
    int sms = 0, per_sm = 0;
    int e = rt.sm_count(device, &sms);
    if (e == 0) e = rt.blocks_per_sm(kernel, kThreads, device, &per_sm);
    if (e != 0) return e;
    const int64_t g = (int64_t)(sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
    std::lock_guard<std::mutex> lock(mu_);
    cache_[key] = g;
    *blocks = g;
    return 0;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<const void*, int>, int64_t> cache_;
};

// The runtime, its per-device cache and the scratch budget: one per process in codec_cuda.cu.
template <class Rt>
struct Launcher {
  using Stream = typename Rt::Stream;
  Rt rt;
  ResidentBlocks resident;
  ScratchBudget budget;

  // Compress: encode_fixed_kernel for "fixed" and "raw", encode_dict_kernel for the others.
  template <int D, class S>
  LaunchResult compress_t(S& scratch, Stream stream, const Chunks& c, const uint8_t* x,
                          const float* eb, int mode, int codec, uint8_t* frames, int32_t* nbytes) {
    if (c.batch == 0) return launch_ok();
    int dev = 0, e = rt.device_of(stream, &dev);
    if (e != 0) return runtime_error(e);
    const uint64_t rows = (uint64_t)c.rows, dim = (uint64_t)c.dim, n = rows * dim;
    const bool fixed = codec == kCodecFixed || codec == kCodecRaw;
    int64_t resident_blocks = 0;
    e = fixed ? resident.get(rt, encode_fixed_kernel<D>, dev, &resident_blocks)
              : resident.get(rt, encode_dict_kernel<D>, dev, &resident_blocks);
    if (e != 0) return runtime_error(e);
    // Fixed: the outlier positions of one chunk per block; dictionary: DictWs.
    const size_t stride = fixed ? align256(4 * (size_t)n) : align256(dict_ws_bytes(rows, dim));
    const int64_t blocks = grid_blocks(c.batch, resident_blocks, stride,
                                       fixed ? budget.fixed_encode : budget.dict_encode);
    uint8_t* ws = allocate_aligned(scratch, stride * (size_t)blocks);
    if (ws == nullptr) return scratch_error();
    if (fixed)
      e = rt.launch(encode_fixed_kernel<D>, (unsigned)blocks, kThreads, stream, x, eb, c.batch,
                    rows, dim, mode, codec, frames, (size_t)c.cap, nbytes, ws, stride);
    else
      e = rt.launch(encode_dict_kernel<D>, (unsigned)blocks, kThreads, stream, x, eb, c.batch,
                    rows, dim, mode, codec, frames, (size_t)c.cap, nbytes, ws, stride);
    return e == 0 ? launch_ok() : runtime_error(e);
  }

  // Decompress (kWrite) or frame status: decode_fast_kernel over every frame, then
  // decode_dict_kernel over those it left (kind kKindGeneric in the parsed headers it writes to
  // scratch).
  template <int D, bool kWrite, class S>
  LaunchResult decode_t(S& scratch, Stream stream, const Chunks& c, const uint8_t* frames,
                        const int32_t* nbytes, uint8_t* x, int32_t* status) {
    if (c.batch == 0) return launch_ok();
    int dev = 0, e = rt.device_of(stream, &dev);
    if (e != 0) return runtime_error(e);
    const uint64_t rows = (uint64_t)c.rows, dim = (uint64_t)c.dim;
    int64_t fast_resident = 0, dict_resident = 0;
    e = resident.get(rt, decode_fast_kernel<D, kWrite>, dev, &fast_resident);
    if (e == 0) e = resident.get(rt, decode_dict_kernel<D, kWrite>, dev, &dict_resident);
    if (e != 0) return runtime_error(e);
    const size_t stride = align256(dict_dec_ws_bytes(rows, dim));
    const int64_t blocks = grid_blocks(c.batch, fast_resident, 0, 0);
    const int64_t dict_blocks = grid_blocks(c.batch, dict_resident, stride, budget.dict_decode);
    const size_t info_bytes = align256(sizeof(FastFrame) * (size_t)c.batch);
    uint8_t* ws = allocate_aligned(scratch, info_bytes + stride * (size_t)dict_blocks);
    if (ws == nullptr) return scratch_error();
    FastFrame* info = reinterpret_cast<FastFrame*>(ws);
    uint8_t* work = ws + info_bytes;
    e = rt.launch(decode_fast_kernel<D, kWrite>, (unsigned)blocks, kThreads, stream, frames,
                  nbytes, c.batch, (size_t)c.cap, rows, dim, x, status, info);
    if (e == 0)
      e = rt.launch(decode_dict_kernel<D, kWrite>, (unsigned)dict_blocks, kThreads, stream,
                    frames, nbytes, c.batch, (size_t)c.cap, rows, dim, x, status,
                    (const FastFrame*)info, work, stride);
    return e == 0 ? launch_ok() : runtime_error(e);
  }

  // The three entry points, dispatched on the dtype.
  template <class S>
  LaunchResult compress(S& scratch, Stream stream, const Chunks& c, const uint8_t* x,
                        const float* eb, int mode, int codec, uint8_t* frames, int32_t* nbytes) {
    if (c.dtype == kBF16)
      return compress_t<kBF16>(scratch, stream, c, x, eb, mode, codec, frames, nbytes);
    if (c.dtype == kF16)
      return compress_t<kF16>(scratch, stream, c, x, eb, mode, codec, frames, nbytes);
    return compress_t<kF32>(scratch, stream, c, x, eb, mode, codec, frames, nbytes);
  }
  template <bool kWrite, class S>
  LaunchResult decode(S& scratch, Stream stream, const Chunks& c, const uint8_t* frames,
                      const int32_t* nbytes, uint8_t* x, int32_t* status) {
    if (c.dtype == kBF16) return decode_t<kBF16, kWrite>(scratch, stream, c, frames, nbytes, x, status);
    if (c.dtype == kF16) return decode_t<kF16, kWrite>(scratch, stream, c, frames, nbytes, x, status);
    return decode_t<kF32, kWrite>(scratch, stream, c, frames, nbytes, x, status);
  }
};

}  // namespace gpu
}  // namespace lc
