// Host side of the CUDA handlers: sizes, allocates and carves the scratch, chooses the grids and
// launches the kernels, over a runtime policy so that it runs in two places: codec_cuda.cu
// instantiates it with the CUDA runtime and XLA's scratch allocator, tests/native/cuda_emu/check_host.cc
// with the CPU emulation of the kernels and a stand-in allocator that enforces XLA's contract.
//
// Runtime policy Rt (every int result: 0 on success, else the runtime's error code):
//   using Stream;
//   int device_of(Stream s, int* device);          the device the stream belongs to
//   int device_limits(int device, DeviceLimits* l); the device's SMs and per-SM limits
//   template <class K> int kernel_resources(K kernel, KernelResources* r);
//                                                  registers and static shared memory (this
//                                                  loads the kernel's module on the CUDA runtime)
//   template <class K, class... A>
//   int launch(K kernel, unsigned grid, unsigned threads, Stream s, A... args);
// and, for XLA's instantiate stage (Launcher::instantiate):
//   template <class F> int on_own_thread(F f);      runs f() on a thread of the library's own
//                                                  (never one of XLA's), waits for it
//   int devices_in_use(std::vector<int>* devices);  devices whose context exists already
//   int make_current(int device);                   on that own thread only
// No query needs the calling thread's current device to change (no cudaSetDevice on XLA's
// thread): occupancy is computed here (occupancy_blocks) from the kernel's resources and the
// device's limits.
// Scratch allocator S, the interface of ffi::ScratchAllocator:
//   std::optional<void*> Allocate(size_t bytes, size_t alignment);
// XLA's FFI device allocator accepts alignments up to 16 only (a power of two), may fail, and
// frees the blocks when the handler returns; kernels only run on the stream they are given.
//
// Scratch of one call (each a formula of its shapes: `batch` chunks of n = rows * dim values of
// isz bytes, frames of `cap` bytes, B blocks in the grid, align256 rounding each block's part up):
//   compress, codec fixed/raw:   B * align256(4 * slots), slots = lc::outlier_slots(rows, dim,
//                                dtype, cap) <= min(n, cap / (pos_bytes + isz)); 0 when no
//                                outlier fits the frame (then nothing is allocated); codec
//                                fixed over P = encode_parts blocks a chunk (few chunks):
//                                batch * P * align256(64 + 4 min(slots, ceil(tiles / P) 4096))
//                                (P lowered until that fits the budget; P = 1: as above)
//   compress, auto/dedup/entropy: B * align256(dict_ws_bytes) = B * align256(4 n + 4 slots +
//                                [rows > 2048: 4 hash_size(rows)] + 16 rows + 120 KiB)
//   decompress, fixed_rate=1:    0 (one kernel, decode_fast_kernel)
//   decompress / frame status:   align256(sizeof(FastFrame) * batch) + B * align256(isz n + 4 rows)
// plus 240 bytes of alignment slack per allocation; B is at most the resident blocks, one per
// chunk, and no more than call_budget bytes of workspaces (at least one block).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "decode_kernels.cuh"
#include "encode_kernels.cuh"
#include "format.h"

namespace lc {
namespace gpu {

constexpr size_t kScratchAlign = 16;  // the largest alignment XLA's FFI allocator accepts
constexpr size_t kWsAlign = 256;      // of each block's workspace, aligned inside the scratch

// Scratch the workspaces of one launch may take, at most (the grid shrinks to fit; one block
// always runs). Every launch sizes its grid by these and by call_budget.
struct ScratchBudget {
  size_t fixed_encode = size_t(1) << 28;  // outlier positions of encode_fixed_kernel's blocks
  size_t dict_encode = size_t(1) << 29;   // encode_dict_kernel's workspaces
  size_t dict_decode = size_t(1) << 28;   // decode_dict_kernel's workspaces
  size_t floor = size_t(1) << 26;         // a call may always take 64 MiB (below the caps)
};

// Workspace bytes one call may take: twice its frames' bytes (batch * cap), at least
// budget.floor, at most `limit` (one of the caps above). XLA preallocates most of the GPU for
// the model: scratch in proportion to what the call moves anyway fits where the frames fit.
inline size_t call_budget(const Chunks& c, size_t limit, const ScratchBudget& budget) {
  const size_t frames = (size_t)c.batch * (size_t)c.cap;
  size_t b = 2 * frames > budget.floor ? 2 * frames : budget.floor;
  return b < limit ? b : limit;
}

// A device's SMs and per-SM limits (cudaDeviceGetAttribute) and a kernel's resources
// (cudaFuncGetAttributes).
struct DeviceLimits {
  int sms, max_threads_per_sm, max_blocks_per_sm, regs_per_sm, smem_per_sm, smem_reserved_per_block;
};
struct KernelResources {
  int regs_per_thread;
  size_t static_smem;
};

// Blocks of `threads` threads of a kernel that fit on one SM, by the occupancy calculator's rules
// (cuda_occupancy.h, sm_70 and later): warps; registers allocated per warp in units of 256 from
// each of the SM's 4 sub-partitions (a quarter of the register file each); shared memory in
// units of 128 bytes plus the runtime's reservation per block; the block limit. At least 1.
inline int occupancy_blocks(const DeviceLimits& d, const KernelResources& k, int threads) {
  constexpr int kSubPartitions = 4;
  const int warps = (threads + 31) / 32;
  int b = d.max_blocks_per_sm > 0 ? d.max_blocks_per_sm : 1;
  if (d.max_threads_per_sm > 0 && d.max_threads_per_sm / (32 * warps) < b) b = d.max_threads_per_sm / (32 * warps);
  const int regs_warp = ((k.regs_per_thread * 32 + 255) / 256) * 256;
  if (regs_warp > 0 && d.regs_per_sm > 0) {
    const int by_regs = (d.regs_per_sm / kSubPartitions / regs_warp) * kSubPartitions / warps;
    if (by_regs < b) b = by_regs;
  }
  const size_t smem = ((k.static_smem + 127) / 128) * 128 + (size_t)d.smem_reserved_per_block;
  if (smem > 0 && d.smem_per_sm > 0 && (int)((size_t)d.smem_per_sm / smem) < b)
    b = (int)((size_t)d.smem_per_sm / smem);
  return b < 1 ? 1 : b;
}

// How one call uses scratch: `blocks` workspaces of `stride` bytes, `bytes` asked of the
// allocator in one block (0: nothing asked).
struct ScratchPlan {
  size_t stride, head;  // head: bytes before the workspaces (decode: the parsed headers)
  int64_t blocks;
  size_t bytes;
  int64_t parts = 1;  // fixed-rate compress: blocks per chunk (encode_parts)
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

// Blocks per frame of decode_fast_kernel: when the chunks are fewer than the resident blocks,
// a frame's values are spread over up to ceil(resident / batch) blocks, at most one per half
// tile (kUnit values) and at most kMaxDecodeParts (each part checks the whole frame's checksum:
// the frame is read, from L2, once per part); frame status (no values) takes one block per
// frame. The DLRM exchange's 208 frames of 4 tiles: 8 parts of half a tile, 1664 blocks.
constexpr int64_t kMaxDecodeParts = 8;
inline int64_t decode_parts(const Chunks& c, int64_t resident, bool values) {
  const uint64_t n = (uint64_t)c.rows * (uint64_t)c.dim;
  const int64_t units = (int64_t)((n + kUnit - 1) / kUnit);
  if (!values || c.batch <= 0 || c.batch >= resident || units <= 1) return 1;
  int64_t p = (resident + c.batch - 1) / c.batch;
  if (p > kMaxDecodeParts) p = kMaxDecodeParts;
  return p < units ? p : units;
}

// Blocks per chunk of the fixed-rate encoder (encode_fixed_parts_kernel) as decode_parts: when
// the chunks are fewer than the resident blocks, up to kMaxEncodeParts, at most one per half
// tile (each part reads the whole chunk once for its range: from L2 after the first).
constexpr int64_t kMaxEncodeParts = 8;
inline int64_t encode_parts(const Chunks& c, int64_t resident) {
  const uint64_t n = (uint64_t)c.rows * (uint64_t)c.dim;
  const int64_t units = (int64_t)((n + kUnit - 1) / kUnit);
  if (c.batch <= 0 || c.batch >= resident || units <= 1) return 1;
  int64_t p = (resident + c.batch - 1) / c.batch;
  if (p > kMaxEncodeParts) p = kMaxEncodeParts;
  return p < units ? p : units;
}

inline ScratchPlan make_plan(size_t head, size_t stride, int64_t blocks) {
  const size_t ws = head + stride * (size_t)blocks;
  return {stride, head, blocks, ws == 0 ? 0 : ws + kWsAlign - kScratchAlign};
}

// What is left of a call's budget `b` for the workspaces once the `head` bytes and the
// alignment slack are taken, so that the whole request stays within `b`.
inline size_t workspace_budget(size_t b, size_t head) {
  const size_t fixed = head + kWsAlign - kScratchAlign;
  return b > fixed ? b - fixed : 0;
}

// The compress call's grid and scratch (see the formulas at the top): `resident` blocks of the
// one-block-a-chunk kernel (encode_fixed_kernel or encode_dict_kernel), `parts_resident` of
// encode_fixed_parts_kernel, which sizes the parts and the grid when a chunk is spread.
inline ScratchPlan compress_plan(const Chunks& c, int codec, int64_t resident,
                                 int64_t parts_resident, const ScratchBudget& budget) {
  const uint64_t rows = (uint64_t)c.rows, dim = (uint64_t)c.dim;
  const bool fixed = codec == kCodecFixed || codec == kCodecRaw;
  const size_t stride =
      fixed ? align256(4 * (size_t)lc::outlier_slots(rows, dim, c.dtype, (size_t)c.cap))
            : align256(dict_ws_bytes(rows, dim, c.dtype, (size_t)c.cap));
  const size_t b = call_budget(c, fixed ? budget.fixed_encode : budget.dict_encode, budget);
  // Every (chunk, part) keeps its record until the finishing launch: batch * parts of them;
  // fewer parts when they do not fit the budget.
  for (int64_t parts = codec == kCodecFixed && c.cap > 0 ? encode_parts(c, parts_resident) : 1;
       parts > 1; --parts) {
    const size_t pstride = align256(part_ws_bytes(rows, dim, c.dtype, (size_t)c.cap, parts));
    const int64_t items = c.batch * parts;
    if (pstride * (size_t)items <= workspace_budget(b, 0)) {
      ScratchPlan p = make_plan(0, pstride, items);
      p.blocks = items < parts_resident ? items : parts_resident;
      p.parts = parts;
      return p;
    }
  }
  return make_plan(0, stride, grid_blocks(c.batch, resident, stride, workspace_budget(b, 0)));
}

// The decompress / frame-status call's dictionary grid and scratch (fixed_rate: none).
inline ScratchPlan decode_plan(const Chunks& c, bool fixed_rate, int64_t dict_resident,
                               const ScratchBudget& budget) {
  if (fixed_rate) return {0, 0, 0, 0};
  const size_t stride = align256(dict_dec_ws_bytes((uint64_t)c.rows, (uint64_t)c.dim, c.dtype));
  const size_t b = call_budget(c, budget.dict_decode, budget);
  const size_t head = align256(sizeof(FastFrame) * (size_t)c.batch);
  return make_plan(head, stride, grid_blocks(c.batch, dict_resident, stride, workspace_budget(b, head)));
}

// `bytes` of scratch starting at a kWsAlign boundary: asks for kScratchAlign (XLA rejects more)
// and rounds the pointer up inside a block kWsAlign - kScratchAlign bytes larger.
template <class S>
uint8_t* allocate_aligned(S& scratch, size_t bytes) {
  std::optional<void*> ws = scratch.Allocate(bytes + kWsAlign - kScratchAlign, kScratchAlign);
  if (!ws.has_value() || *ws == nullptr) return nullptr;
  return reinterpret_cast<uint8_t*>(align256(reinterpret_cast<uintptr_t>(*ws)));
}

// Resident blocks (SMs times blocks per SM) of each kernel on each device, computed from the
// runtime's answers once and then read from here (thread-safe: handlers may run on several
// threads).
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
    DeviceLimits d = {};
    KernelResources k = {};
    int e = rt.device_limits(device, &d);
    if (e == 0) e = rt.kernel_resources(kernel, &k);
    if (e != 0) return e;
    const int64_t g = (int64_t)(d.sms > 0 ? d.sms : 1) * occupancy_blocks(d, k, kThreads);
    std::lock_guard<std::mutex> lock(mu_);
    cache_[key] = g;
    *blocks = g;
    return 0;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<const void*, int>, int64_t> cache_;
};

// Resident blocks (SMs x blocks a SM) of each kernel of one dtype on one device.
struct Resident {
  int64_t enc_fixed = 0, enc_parts = 0, enc_finish = 0, enc_dict = 0;
  int64_t dec_fast = 0, dec_dict = 0, st_fast = 0, st_dict = 0;  // decompress / frame status
};

// The runtime, its per-device cache and the scratch budget: one per process in codec_cuda.cu.
template <class Rt>
struct Launcher {
  using Stream = typename Rt::Stream;
  Rt rt;
  ResidentBlocks resident;
  ScratchBudget budget;

 private:
  std::mutex instantiate_mu_;
  std::set<int> preloaded_;

 public:

  // Resident blocks of every kernel of dtype D on `dev`, asked of the runtime together the first
  // time (which, on the CUDA runtime, loads all of the codec's kernels of that dtype at the first
  // call rather than one at a time at each kernel's first use), then cached.
  template <int D>
  int resident_all(int dev, Resident* r) {
    int e = resident.get(rt, encode_fixed_kernel<D>, dev, &r->enc_fixed);
    if (e == 0) e = resident.get(rt, encode_fixed_parts_kernel<D>, dev, &r->enc_parts);
    if (e == 0) e = resident.get(rt, encode_fixed_finish_kernel<D>, dev, &r->enc_finish);
    if (e == 0) e = resident.get(rt, encode_dict_kernel<D>, dev, &r->enc_dict);
    if (e == 0) e = resident.get(rt, decode_fast_kernel<D, true>, dev, &r->dec_fast);
    if (e == 0) e = resident.get(rt, decode_dict_kernel<D, true>, dev, &r->dec_dict);
    if (e == 0) e = resident.get(rt, decode_fast_kernel<D, false>, dev, &r->st_fast);
    if (e == 0) e = resident.get(rt, decode_dict_kernel<D, false>, dev, &r->st_dict);
    return e;
  }

  // Every kernel of every dtype on `dev` (the current device of the calling thread): on the CUDA
  // runtime this loads all of the codec's kernels into the device's context and computes their
  // occupancy, so that no later call on `dev` loads a module or asks the runtime anything.
  int preload(int dev) {
    Resident r;
    int e = resident_all<kF32>(dev, &r);
    if (e == 0) e = resident_all<kBF16>(dev, &r);
    if (e == 0) e = resident_all<kF16>(dev, &r);
    return e;
  }

  // XLA's instantiate stage (before the first execution of an executable that calls the codec):
  // preload() on every device in use (its context exists: XLA's client made it) and not done
  // yet, on a thread of the library's own that makes each device current in turn, so XLA's
  // threads keep their current device and error state. A device done once is not visited again;
  // a device that is not in use yet loads at its first call instead (resident_all), as does
  // every device where XLA has no instantiate stage. Returns the first runtime error (0: none).
  int instantiate() {
    std::lock_guard<std::mutex> lock(instantiate_mu_);
    int e = 0;
    const int t = rt.on_own_thread([&]() {
      std::vector<int> devices;
      e = rt.devices_in_use(&devices);
      for (size_t i = 0; e == 0 && i < devices.size(); ++i) {
        if (preloaded_.count(devices[i])) continue;
        e = rt.make_current(devices[i]);
        if (e == 0) e = preload(devices[i]);
        if (e == 0) preloaded_.insert(devices[i]);
      }
    });
    return t != 0 ? t : e;
  }
  // Devices instantiate() has preloaded.
  bool preloaded(int dev) {
    std::lock_guard<std::mutex> lock(instantiate_mu_);
    return preloaded_.count(dev) != 0;
  }

  // Compress: encode_fixed_kernel for "fixed" and "raw", encode_dict_kernel for the others.
  template <int D, class S>
  LaunchResult compress_t(S& scratch, Stream stream, const Chunks& c, const uint8_t* x,
                          const float* eb, int mode, int codec, uint8_t* frames, int32_t* nbytes) {
    if (c.batch == 0) return launch_ok();
    int dev = 0, e = rt.device_of(stream, &dev);
    if (e != 0) return runtime_error(e);
    const uint64_t rows = (uint64_t)c.rows, dim = (uint64_t)c.dim;
    const bool fixed = codec == kCodecFixed || codec == kCodecRaw;
    Resident r;
    e = resident_all<D>(dev, &r);
    if (e != 0) return runtime_error(e);
    const ScratchPlan plan = compress_plan(c, codec, fixed ? r.enc_fixed : r.enc_dict, r.enc_parts, budget);
    uint8_t* ws = nullptr;
    if (plan.bytes != 0) {
      ws = allocate_aligned(scratch, plan.bytes - (kWsAlign - kScratchAlign));
      if (ws == nullptr) return scratch_error();
    }
    if (plan.parts > 1) {  // a chunk over plan.parts blocks, then one block per chunk finishes
      e = rt.launch(encode_fixed_parts_kernel<D>, (unsigned)plan.blocks, kThreads, stream, x, eb,
                    c.batch, rows, dim, mode, codec, frames, (size_t)c.cap, nbytes, ws, plan.stride,
                    plan.parts);
      const int64_t fin = c.batch < r.enc_finish ? c.batch : r.enc_finish;
      if (e == 0)
        e = rt.launch(encode_fixed_finish_kernel<D>, (unsigned)fin, kThreads, stream, x, eb,
                      c.batch, rows, dim, mode, codec, frames, (size_t)c.cap, nbytes, ws,
                      plan.stride, plan.parts);
    } else if (fixed)
      e = rt.launch(encode_fixed_kernel<D>, (unsigned)plan.blocks, kThreads, stream, x, eb, c.batch,
                    rows, dim, mode, codec, frames, (size_t)c.cap, nbytes, ws, plan.stride);
    else
      e = rt.launch(encode_dict_kernel<D>, (unsigned)plan.blocks, kThreads, stream, x, eb, c.batch,
                    rows, dim, mode, codec, frames, (size_t)c.cap, nbytes, ws, plan.stride);
    return e == 0 ? launch_ok() : runtime_error(e);
  }

  // Decompress (kWrite) or frame status: decode_fast_kernel over every frame, then, unless the
  // caller declared every frame fixed-rate (fixed_rate: one launch, no scratch),
  // decode_dict_kernel over those it left (kind kKindGeneric in the parsed headers it writes to
  // scratch).
  template <int D, bool kWrite, class S>
  LaunchResult decode_t(S& scratch, Stream stream, const Chunks& c, const uint8_t* frames,
                        const int32_t* nbytes, uint8_t* x, int32_t* status, bool fixed_rate) {
    if (c.batch == 0) return launch_ok();
    int dev = 0, e = rt.device_of(stream, &dev);
    if (e != 0) return runtime_error(e);
    const uint64_t rows = (uint64_t)c.rows, dim = (uint64_t)c.dim;
    Resident r;
    e = resident_all<D>(dev, &r);
    if (e != 0) return runtime_error(e);
    const int64_t fast_resident = kWrite ? r.dec_fast : r.st_fast;
    const int64_t dict_resident = kWrite ? r.dec_dict : r.st_dict;
    const int64_t parts = decode_parts(c, fast_resident, kWrite);
    const int64_t blocks = grid_blocks(c.batch * parts, fast_resident, 0, 0);
    const ScratchPlan plan = decode_plan(c, fixed_rate, dict_resident, budget);
    if (fixed_rate) {
      e = rt.launch(decode_fast_kernel<D, kWrite>, (unsigned)blocks, kThreads, stream, frames,
                    nbytes, c.batch, (size_t)c.cap, rows, dim, x, status, (FastFrame*)nullptr, parts);
      return e == 0 ? launch_ok() : runtime_error(e);
    }
    uint8_t* ws = allocate_aligned(scratch, plan.bytes - (kWsAlign - kScratchAlign));
    if (ws == nullptr) return scratch_error();
    FastFrame* info = reinterpret_cast<FastFrame*>(ws);
    uint8_t* work = ws + plan.head;
    e = rt.launch(decode_fast_kernel<D, kWrite>, (unsigned)blocks, kThreads, stream, frames,
                  nbytes, c.batch, (size_t)c.cap, rows, dim, x, status, info, parts);
    if (e == 0)
      e = rt.launch(decode_dict_kernel<D, kWrite>, (unsigned)plan.blocks, kThreads, stream,
                    frames, nbytes, c.batch, (size_t)c.cap, rows, dim, x, status,
                    (const FastFrame*)info, work, plan.stride);
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
                      const int32_t* nbytes, uint8_t* x, int32_t* status, bool fixed_rate = false) {
    if (c.dtype == kBF16)
      return decode_t<kBF16, kWrite>(scratch, stream, c, frames, nbytes, x, status, fixed_rate);
    if (c.dtype == kF16)
      return decode_t<kF16, kWrite>(scratch, stream, c, frames, nbytes, x, status, fixed_rate);
    return decode_t<kF32, kWrite>(scratch, stream, c, frames, nbytes, x, status, fixed_rate);
  }
};

}  // namespace gpu
}  // namespace lc
