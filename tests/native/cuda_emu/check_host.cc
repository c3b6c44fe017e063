// Runs the host side of the CUDA handlers (xla_ffi/cuda_launch.h: scratch sizing, allocation and
// carving, grids, launches) on the CPU: the kernels through emu.h, XLA's FFI context through
// stand-ins that enforce its contract, and compares the frames, values and statuses with the CPU
// codec. The stand-ins:
//  * XlaScratch, like XLA's FFI device allocator: an alignment that is not a power of two or is
//    above 16 gets no memory ("Unsupported alignment"), blocks are 16-aligned and never 32-aligned
//    (so nothing may assume more), filled with garbage, poisoned past their end under ASan, and
//    freed when the call returns; it can be told to fail.
//  * EmuRuntime: streams belong to a device other than 0 (nothing may use the current device);
//    every launch must come on the stream the call was given; queries of the device (SMs,
//    occupancy) are counted, so that their caching is checked; kernel_resources "loads" the
//    kernel into the calling thread's current device (make_current, own threads only, as the
//    CUDA runtime's lazy loading does), and with require_loaded every launch must find its
//    kernel loaded on the stream's device: XLA's instantiate stage (Launcher::instantiate) ran
//    before the execution and the execution loads nothing.
// Prints one line per failure and exits non-zero on any.
//
//   g++ -std=c++20 -O1 -g -fsanitize=address,undefined -pthread -DLC_CUDA_EMULATION
//       -include tests/native/cuda_emu/emu.h -Ixla_ffi tests/native/cuda_emu/check_host.cc -o check_host
#include <stdio.h>
#include <stdlib.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../../xla_ffi/codec.h"
#include "../../../xla_ffi/cuda_launch.h"

#if defined(EMU_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace {

using lc::gpu::LaunchResult;

int failures = 0, checks = 0;
void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok && ++failures <= 40) printf("FAIL %s\n", what.c_str());
}

struct XlaScratch {
  bool fail = false;
  int rejected = 0;
  size_t bytes = 0;
  std::vector<void*> blocks;
  std::optional<void*> Allocate(size_t size, size_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 16) {
      ++rejected;  // XLA: "Unsupported alignment"
      return std::nullopt;
    }
    if (fail) return std::nullopt;
    const size_t total = (size + 16 + 31) & ~(size_t)31;
    uint8_t* base = static_cast<uint8_t*>(aligned_alloc(32, total));
    for (size_t i = 0; i < total; ++i) base[i] = 0xA5;
    uint8_t* p = base + 16;  // 16-aligned, not 32-aligned
#if defined(EMU_ASAN)
    ASAN_POISON_MEMORY_REGION(base, 16);
    ASAN_POISON_MEMORY_REGION(p + size, total - 16 - size);
#endif
    blocks.push_back(base);
    bytes += size;
    return p;
  }
  ~XlaScratch() {
    for (void* b : blocks) {
#if defined(EMU_ASAN)
      ASAN_UNPOISON_MEMORY_REGION(b, 16);
#endif
      free(b);
    }
  }
};

struct Stream {
  int device;
};

// The calling thread's current device, as the CUDA runtime keeps it (-1: never set).
thread_local int current_device = -1;

struct EmuRuntime {
  using Stream = const ::Stream*;
  const ::Stream* expected = nullptr;
  int device_queries = 0, sm_queries = 0, occupancy_queries = 0, launches = 0;
  // Instantiate stage: the devices in use, the (kernel, device) pairs loaded, whether a launch
  // must find its kernel loaded, threads run by on_own_thread, make_current calls off them.
  std::vector<int> in_use;
  std::set<std::pair<const void*, int>> loaded;
  bool require_loaded = false;
  int own_threads = 0, current_on_caller = 0;
  std::thread::id caller = std::this_thread::get_id();
  unsigned last_grid = 0;
  std::vector<unsigned> grids;
  // 3 SMs; 2 blocks per SM by the block limit (the kernels' registers and shared memory fit).
  lc::gpu::DeviceLimits limits = {3, 2048, 2, 65536, 233472, 1024};
  lc::gpu::KernelResources resources = {64, 20000};
  std::map<const void*, lc::gpu::KernelResources> per_kernel;  // kernels whose resources differ
  int device_of(Stream s, int* device) {
    ++device_queries;
    *device = s->device;
    return 0;
  }
  int device_limits(int device, lc::gpu::DeviceLimits* d) {
    ++sm_queries;
    check(device == expected->device, "device limits asked of the stream's device");
    *d = limits;
    return 0;
  }
  template <class K>
  int kernel_resources(K kernel, lc::gpu::KernelResources* r) {
    ++occupancy_queries;
    loaded.insert({reinterpret_cast<const void*>(kernel), current_device});
    auto it = per_kernel.find(reinterpret_cast<const void*>(kernel));
    *r = it != per_kernel.end() ? it->second : resources;
    return 0;
  }
  template <class F>
  int on_own_thread(F f) {
    ++own_threads;
    std::thread t(f);
    t.join();
    return 0;
  }
  int devices_in_use(std::vector<int>* devices) {
    *devices = in_use;
    return 0;
  }
  int make_current(int device) {
    if (std::this_thread::get_id() == caller) ++current_on_caller;
    current_device = device;
    return 0;
  }
  template <class... P, class... A>
  int launch(void (*kernel)(P...), unsigned grid, unsigned threads, Stream s, A... args) {
    ++launches;
    check(s == expected, "kernel launched on the stream the call was given");
    if (require_loaded)
      check(loaded.count({reinterpret_cast<const void*>(kernel), s->device}) != 0,
            "kernel loaded on the stream's device before the execution (instantiate stage)");
    check(grid >= 1 && threads == lc::gpu::kThreads, "launch geometry");
    grids.push_back(grid);
    emu::launch(grid, threads, kernel, args...);
    return 0;
  }
};

struct Rng {
  uint64_t s;
  uint32_t next() { s = s * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(s >> 33); }
};

// Hot-row data (a pool of rows, some NaN), as float32 [batch, rows, dim] in `dtype`.
std::vector<uint8_t> make_input(int64_t batch, uint64_t rows, uint64_t dim, int dtype, uint64_t seed) {
  Rng r{seed};
  const uint64_t n = rows * dim, pool = rows / 4 + 1;
  std::vector<uint8_t> out(batch * n * lc::dtype_size(dtype) + 8);
  for (int64_t c = 0; c < batch; ++c)
    for (uint64_t i = 0; i < rows; ++i) {
      const uint64_t src = r.next() % pool;
      for (uint64_t j = 0; j < dim; ++j) {
        float v = (float)((src * 31 + j * 7 + c) % 97) * 0.01f - 0.4f;
        if ((src + j) % 53 == 0) v = lc::u2f(0x7fc00000u);
        lc::store_value(out.data(), dtype, (c * rows + i) * dim + j, v);
      }
    }
  out.resize(batch * n * lc::dtype_size(dtype));
  return out;
}

// One case: compress, decompress and frame status through the launch code, against the CPU.
void run_case(lc::gpu::Launcher<EmuRuntime>& L, const Stream& stream, int dtype, int64_t batch,
              uint64_t rows, uint64_t dim, int codec, uint64_t seed) {
  char name[160];
  snprintf(name, sizeof name, "dtype=%d [%lld,%llu,%llu] codec=%d", dtype, (long long)batch,
           (unsigned long long)rows, (unsigned long long)dim, codec);
  L.rt.expected = &stream;
  const int isz = lc::dtype_size(dtype);
  const size_t cap = lc::raw_frame_bytes(rows, dim, dtype);
  const lc::Chunks c = {dtype, batch, (int64_t)rows, (int64_t)dim, (int64_t)cap};
  const std::vector<uint8_t> x = make_input(batch, rows, dim, dtype, seed);
  std::vector<float> eb(batch, 0.01f);
  // CPU codec.
  std::vector<uint8_t> fc(batch * cap);
  std::vector<int32_t> nc(batch);
  std::vector<uint8_t> wsc(lc::workspace_bytes(rows, dim));
  lc::Workspace w = lc::carve_workspace(wsc.data(), rows, dim);
  for (int64_t k = 0; k < batch; ++k)
    nc[k] = (int32_t)lc::encode_chunk(x.data() + k * rows * dim * isz, rows, dim, dtype, eb[k],
                                      lc::kRel, codec, fc.data() + k * cap, cap, w).nbytes;
  // Launch code: compress.
  std::vector<uint8_t> fg(batch * cap + 1, 0xAB);
  std::vector<int32_t> ng(batch + 1, 12345);
  {
    XlaScratch scratch;
    const LaunchResult r = L.compress(scratch, &stream, c, x.data(), eb.data(), lc::kRel, codec,
                                      fg.data(), ng.data());
    check(r.kind == LaunchResult::kOk, std::string(name) + ": compress launched");
    check(scratch.rejected == 0, std::string(name) + ": compress asked for an alignment XLA rejects");
    const lc::gpu::ScratchPlan plan = lc::gpu::compress_plan(c, codec, 6, 6, L.budget);
    check(batch == 0 || scratch.blocks.size() == (plan.bytes ? 1u : 0u), std::string(name) + ": one scratch block, or none");
    check(batch == 0 || scratch.bytes == plan.bytes, std::string(name) + ": asks for what compress_plan says");
  }
  fg.pop_back();
  ng.pop_back();
  check(fg == fc && ng == nc, std::string(name) + ": frames equal the CPU codec's");
  // Decompress and frame status of the CPU frames.
  std::vector<uint8_t> oc(batch * rows * dim * isz), og(oc.size() + 1, 0xCD);
  std::vector<int32_t> sc(batch), sg(batch + 1, 777), vg(batch + 1, 777);
  for (int64_t k = 0; k < batch; ++k)
    sc[k] = lc::decode_frame<true>(fc.data() + k * cap, nc[k], cap, rows, dim, dtype,
                                   oc.data() + k * rows * dim * isz, w);
  {
    XlaScratch scratch;
    const LaunchResult r = L.decode<true>(scratch, &stream, c, fc.data(), nc.data(), og.data(), sg.data());
    check(r.kind == LaunchResult::kOk && scratch.rejected == 0, std::string(name) + ": decompress");
  }
  {
    XlaScratch scratch;
    const LaunchResult r = L.decode<false>(scratch, &stream, c, fc.data(), nc.data(), nullptr, vg.data());
    check(r.kind == LaunchResult::kOk && scratch.rejected == 0, std::string(name) + ": frame status");
  }
  og.pop_back();
  sg.pop_back();
  vg.pop_back();
  check(og == oc && sg == sc, std::string(name) + ": decoded values and statuses equal the CPU's");
  check(vg == sc, std::string(name) + ": frame statuses equal the CPU's");
  // fixed_rate=1: one launch, no scratch; values and statuses as the CPU's fixed_rate decode.
  {
    std::vector<uint8_t> of(oc.size()), ofg(oc.size() + 1, 0xCD);
    std::vector<int32_t> sf(batch), sfg(batch + 1, 777);
    for (int64_t k = 0; k < batch; ++k)
      sf[k] = lc::decode_frame<true>(fc.data() + k * cap, nc[k], cap, rows, dim, dtype,
                                     of.data() + k * rows * dim * isz, w, true);
    XlaScratch scratch;
    const int launches = L.rt.launches;
    const LaunchResult r = L.decode<true>(scratch, &stream, c, fc.data(), nc.data(), ofg.data(), sfg.data(), true);
    check(r.kind == LaunchResult::kOk && scratch.blocks.empty() && scratch.bytes == 0,
          std::string(name) + ": fixed_rate decompress asks for no scratch");
    check(L.rt.launches == launches + (batch ? 1 : 0), std::string(name) + ": fixed_rate decompress is one launch");
    ofg.pop_back();
    sfg.pop_back();
    check(ofg == of && sfg == sf, std::string(name) + ": fixed_rate decode equals the CPU's");
    if (codec == lc::kCodecFixed || codec == lc::kCodecRaw)
      check(sf == sc && of == oc, std::string(name) + ": fixed_rate changes nothing on fixed-rate frames");
  }
}

// What every handler asks of XLA's allocator on the shapes of a real run, through the plans the
// launch code allocates by (compress_plan, decode_plan), on an H200 (132 SMs) with 16 resident
// blocks per SM (the most 128-thread blocks an SM holds: the largest grid, so the largest
// scratch): at most max(2 x the frames' bytes, 64 MiB); fixed-rate decompress asks for nothing.
void scratch_bounds() {
  struct Shape { const char* name; int64_t batch, rows, dim; };
  const Shape shapes[] = {
      {"DLRM exchange (8 peers x 26 tables of [256, 64])", 8 * 26, 256, 64},
      {"MLPerf DCNv2 (8 peers x 4 tables of [6912, 128])", 8 * 4, 6912, 128},
      {"1 GiB gradient, reduce-scatter (8 peers of [131072, 256])", 8, 131072, 256},
      // compressed_psum re-compresses the reduced shard [131072, 256] as 1024 chunks of 128 rows
      // (allreduce.py, _shard_chunks); as one chunk it asked for 143 MiB (compress auto) and
      // 128.5 MiB (decompress), one block's workspace over the bound.
      {"1 GiB gradient, reduced shard (1024 chunks of [128, 256])", 1024, 128, 256},
  };
  const int64_t resident = 132 * 16;
  const lc::gpu::ScratchBudget budget;
  for (const Shape& sh : shapes)
    for (int dtype : {lc::kF32, lc::kBF16}) {
      if (dtype == lc::kBF16 && sh.dim == 256) continue;  // the gradient is float32
      const uint64_t rows = (uint64_t)sh.rows, dim = (uint64_t)sh.dim;
      const size_t raw = lc::raw_frame_bytes(rows, dim, dtype);
      // fixed: capacity at REL 0.01 with 16 outliers reserved; auto: that capacity or raw
      const size_t fixed = lc::fixed_frame_bytes(rows, dim, lc::rel_bits_for(0.01, dtype), dtype, 16);
      struct Call { const char* op; int codec; size_t cap; };
      const Call calls[] = {{"compress fixed", lc::kCodecFixed, fixed},
                            {"compress auto", lc::kCodecAuto, fixed},
                            {"compress auto (raw capacity)", lc::kCodecAuto, raw},
                            {"decompress", -1, fixed},
                            {"decompress (raw capacity)", -1, raw},
                            {"decompress fixed_rate", -2, fixed}};
      for (const Call& k : calls) {
        const lc::Chunks c = {dtype, sh.batch, sh.rows, sh.dim, (int64_t)k.cap};
        const lc::gpu::ScratchPlan p =
            k.codec >= 0 ? lc::gpu::compress_plan(c, k.codec, resident, resident, budget)
                         : lc::gpu::decode_plan(c, k.codec == -2, resident, budget);
        const size_t frames = (size_t)sh.batch * k.cap;
        const size_t bound = 2 * frames > (size_t(64) << 20) ? 2 * frames : (size_t(64) << 20);
        char line[400];
        snprintf(line, sizeof line, "%s %s, %s: cap %zu, frames %.1f MiB, scratch %.2f MiB (%lld blocks of %zu bytes), bound %.1f MiB",
                 sh.name, dtype == lc::kF32 ? "f32" : "bf16", k.op, k.cap, frames / 1048576.0,
                 p.bytes / 1048576.0, (long long)p.blocks, p.stride, bound / 1048576.0);
        printf("scratch: %s\n", line);
        check(p.bytes <= bound, std::string("scratch within max(2 x frames, 64 MiB): ") + line);
        if (k.codec == -2) check(p.bytes == 0, std::string("fixed_rate decompress asks for nothing: ") + line);
        if (k.codec == lc::kCodecFixed)
          check(p.stride <= lc::gpu::align256(4 * (k.cap / 3)), std::string("fixed outlier scratch bounded by the frame: ") + line);
      }
    }
}

}  // namespace

// occupancy_blocks against NVIDIA's occupancy rules (the CUDA occupancy calculator,
// cuda_occupancy.h), worked by hand for the limits of an H100/H200 (sm_90: 228 KiB of shared
// memory a SM) and an A100 (sm_80: 164 KiB); both: 2048 threads, 32 blocks and 64 K registers a
// SM in 4 sub-partitions, registers given to a warp in units of 256, shared memory in units of
// 128 bytes plus 1 KiB the runtime reserves per block.
void occupancy_known_answers() {
  const lc::gpu::DeviceLimits sm90 = {132, 2048, 32, 65536, 233472, 1024};
  const lc::gpu::DeviceLimits sm80 = {108, 2048, 32, 65536, 167936, 1024};
  struct Case { const char* what; int regs; size_t smem; int threads; int want90, want80; };
  const Case cases[] = {
      // 64 x 32 = 2048 registers a warp; 16384 a sub-partition hold 8 warps: 32 a SM, 8 blocks
      // of 4 warps. Shared: 12936 + 1024 = 13960 -> 14080; 233472 / 14080 = 16, 167936 / 14080
      // = 11. Threads: 16 blocks. -> 8, 8 (decode_fast_kernel).
      {"64 regs, 12936 B, 128 threads", 64, 12936, 128, 8, 8},
      // 128 x 32 = 4096 a warp: 4 a sub-partition, 16 a SM: 4 blocks. Shared 24816 + 1024 ->
      // 25856: 9 (sm_90), 6 (sm_80). -> 4, 4 (encode_dict_kernel).
      {"128 regs, 24816 B, 128 threads", 128, 24816, 128, 4, 4},
      // 68 x 32 = 2176 -> 2304 a warp: 16384 / 2304 = 7 a sub-partition, 28 a SM: 7 blocks.
      // Shared 28848 + 1024 = 29872 -> 29952: 233472 / 29952 = 7, 167936 / 29952 = 5. -> 7, 5.
      {"68 regs, 28848 B, 128 threads", 68, 28848, 128, 7, 5},
      // 85 x 32 = 2720 -> 2816 a warp: 5 a sub-partition, 20 a SM: 5 blocks. -> 5, 5.
      {"85 regs, 28848 B, 128 threads", 85, 28848, 128, 5, 5},
      // 3-warp blocks, 88 x 32 = 2816 a warp: 5 a sub-partition, 20 warps a SM: 6 blocks (the
      // whole register file divided at once would hold 23 warps: 7 blocks, one too many).
      // Threads: 2048 / 96 = 21. -> 6, 6.
      {"88 regs, no shared memory, 96 threads", 88, 0, 96, 6, 6},
      // 255 x 32 = 8160 -> 8192 a warp: 2 a sub-partition, 8 a SM: 2 blocks. -> 2, 2.
      {"255 regs, 16960 B, 128 threads", 255, 16960, 128, 2, 2},
      // 48 KiB static: 49152 + 1024 = 50176: 233472 / 50176 = 4, 167936 / 50176 = 3; registers
      // (32 x 32 = 1024 a warp: 16 a sub-partition) and threads allow more. -> 4, 3.
      {"32 regs, 48 KiB, 32 threads", 32, 49152, 32, 4, 3},
      // 2 warps, 16 registers: 512 a warp, 32 a sub-partition (128 warps); threads 2048 / 64 =
      // 32; the block limit, 32. -> 32, 32.
      {"16 regs, 256 B, 64 threads", 16, 256, 64, 32, 32},
      // 1024 threads (32 warps), 64 registers: 2048 a warp, 8 a sub-partition, 32 warps a SM: 1
      // block (threads alone would allow 2).
      {"64 regs, 0 B, 1024 threads", 64, 0, 1024, 1, 1},
  };
  for (const Case& k : cases) {
    const lc::gpu::KernelResources r = {k.regs, k.smem};
    const int g90 = lc::gpu::occupancy_blocks(sm90, r, k.threads);
    const int g80 = lc::gpu::occupancy_blocks(sm80, r, k.threads);
    check(g90 == k.want90, std::string("occupancy sm_90, ") + k.what + ": " + std::to_string(g90) +
                               " blocks, the calculator says " + std::to_string(k.want90));
    check(g80 == k.want80, std::string("occupancy sm_80, ") + k.what + ": " + std::to_string(g80) +
                               " blocks, the calculator says " + std::to_string(k.want80));
  }
}

// The fixed encoder's grid and parts come from the occupancy of the kernels it launches: on a
// runtime where encode_fixed_parts_kernel holds 4 blocks a SM (128 registers), the one-block
// encoder 8 and the finish kernel 2 (255 registers), 8 chunks of 8 half tiles on 3 SMs run as
// ceil(12 / 8) = 2 parts a chunk on 12 blocks (not 3 parts on 24, the one-block kernel's
// residency), then 6 finishing blocks; frames as the CPU's.
void fixed_grid_by_its_own_occupancy() {
  lc::gpu::Launcher<EmuRuntime> L;
  L.rt.limits = {3, 2048, 16, 65536, 233472, 1024};
  L.rt.resources = {64, 16960};  // 8 blocks a SM
  L.rt.per_kernel[reinterpret_cast<const void*>(lc::gpu::encode_fixed_parts_kernel<lc::kF32>)] = {128, 16960};
  L.rt.per_kernel[reinterpret_cast<const void*>(lc::gpu::encode_fixed_finish_kernel<lc::kF32>)] = {255, 16960};
  const Stream stream{1};
  L.rt.expected = &stream;
  const int64_t batch = 8;
  const uint64_t rows = 256, dim = 64, n = rows * dim;
  const size_t cap = lc::fixed_frame_bytes(rows, dim, lc::rel_bits_for(0.01), lc::kF32, 16);
  const lc::Chunks c = {lc::kF32, batch, (int64_t)rows, (int64_t)dim, (int64_t)cap};
  const std::vector<uint8_t> x = make_input(batch, rows, dim, lc::kF32, 99);
  std::vector<float> eb(batch, 0.01f);
  std::vector<uint8_t> fc(batch * cap), fg(batch * cap, 0xAB);
  std::vector<int32_t> nc(batch), ng(batch, 12345);
  std::vector<uint8_t> wsc(lc::workspace_bytes(rows, dim));
  lc::Workspace w = lc::carve_workspace(wsc.data(), rows, dim);
  for (int64_t k = 0; k < batch; ++k)
    nc[k] = (int32_t)lc::encode_chunk(x.data() + k * n * 4, rows, dim, lc::kF32, eb[k], lc::kRel,
                                      lc::kCodecFixed, fc.data() + k * cap, cap, w).nbytes;
  XlaScratch scratch;
  const LaunchResult r = L.compress(scratch, &stream, c, x.data(), eb.data(), lc::kRel,
                                    lc::kCodecFixed, fg.data(), ng.data());
  check(r.kind == LaunchResult::kOk, "fixed grid by its own occupancy: compress launched");
  check(L.rt.grids == std::vector<unsigned>{12, 6},
        "fixed encoder: 12 parts blocks (2 parts a chunk) and 6 finishing blocks, got " +
            std::to_string(L.rt.grids.size()) + " launches, first " +
            (L.rt.grids.empty() ? std::string("none") : std::to_string(L.rt.grids[0])));
  const lc::gpu::ScratchPlan plan = lc::gpu::compress_plan(c, lc::kCodecFixed, 24, 12, L.budget);
  check(plan.parts == 2 && plan.blocks == 12 && scratch.bytes == plan.bytes,
        "fixed encoder: plan of 2 parts on 12 blocks, as asked of the allocator");
  check(fg == fc && ng == nc, "fixed grid by its own occupancy: frames equal the CPU codec's");
}

int main() {
  occupancy_known_answers();
  fixed_grid_by_its_own_occupancy();
  scratch_bounds();
  lc::gpu::Launcher<EmuRuntime> L;
  const Stream stream{2};  // a device other than the current one (0)
  // The stand-in holds XLA's contract.
  {
    XlaScratch s;
    check(!s.Allocate(64, 256).has_value() && !s.Allocate(64, 24).has_value() && s.rejected == 2,
          "the stand-in rejects alignments XLA rejects");
    auto p = s.Allocate(64, 16);
    check(p.has_value() && ((uintptr_t)*p & 15) == 0 && ((uintptr_t)*p & 31) != 0,
          "the stand-in's blocks are 16-aligned only");
  }
  // Every dtype, both encode kernels, empty chunks and batches.
  uint64_t seed = 1;
  for (int dtype : {lc::kF32, lc::kBF16, lc::kF16})
    for (int codec : {lc::kCodecFixed, lc::kCodecRaw, lc::kCodecAuto, lc::kCodecEntropy})
      run_case(L, stream, dtype, 5, 64, 16, codec, seed++);
  for (int codec : {lc::kCodecFixed, lc::kCodecAuto}) {
    run_case(L, stream, lc::kF32, 3, 0, 8, codec, seed++);  // empty chunks
    run_case(L, stream, lc::kF32, 3, 4, 0, codec, seed++);
  }
  // Zero-size batch: nothing allocated, nothing launched.
  {
    const int launches = L.rt.launches;
    XlaScratch scratch;
    const lc::Chunks c = {lc::kF32, 0, 64, 16, (int64_t)lc::raw_frame_bytes(64, 16, lc::kF32)};
    L.rt.expected = &stream;
    const LaunchResult a = L.compress(scratch, &stream, c, nullptr, nullptr, lc::kRel, lc::kCodecAuto, nullptr, nullptr);
    const LaunchResult b = L.decode<true>(scratch, &stream, c, nullptr, nullptr, nullptr, nullptr);
    check(a.kind == LaunchResult::kOk && b.kind == LaunchResult::kOk && scratch.blocks.empty() &&
              L.rt.launches == launches, "zero-size batch: no allocation, no launch");
  }
  // Allocation failure: an error, no launch.
  {
    const int launches = L.rt.launches;
    XlaScratch scratch;
    scratch.fail = true;
    const lc::Chunks c = {lc::kF32, 2, 8, 8, (int64_t)lc::raw_frame_bytes(8, 8, lc::kF32)};
    std::vector<uint8_t> x(2 * 64 * 4), f(2 * c.cap);
    std::vector<float> eb(2, 0.01f);
    std::vector<int32_t> nb(2), st(2);
    check(L.compress(scratch, &stream, c, x.data(), eb.data(), lc::kRel, lc::kCodecFixed, f.data(), nb.data()).kind ==
              LaunchResult::kScratchError, "compress reports a failed allocation");
    check(L.compress(scratch, &stream, c, x.data(), eb.data(), lc::kRel, lc::kCodecAuto, f.data(), nb.data()).kind ==
              LaunchResult::kScratchError, "compress (dictionary) reports a failed allocation");
    check(L.decode<true>(scratch, &stream, c, f.data(), nb.data(), x.data(), st.data()).kind ==
              LaunchResult::kScratchError, "decompress reports a failed allocation");
    check(L.rt.launches == launches, "nothing launched without scratch");
  }
  // Device queries are cached: another round of the same kernels asks nothing more.
  {
    const int sm = L.rt.sm_queries, occ = L.rt.occupancy_queries;
    for (int codec : {lc::kCodecFixed, lc::kCodecAuto}) run_case(L, stream, lc::kF32, 5, 64, 16, codec, seed++);
    check(L.rt.sm_queries == sm && L.rt.occupancy_queries == occ, "device queries cached");
    check(occ == 8 * 3 && sm == occ, "one query per kernel (8) and dtype (3), then none");
    // The first call of a dtype asks about all eight kernels of that dtype at once.
    lc::gpu::Launcher<EmuRuntime> fresh;
    fresh.rt.expected = &stream;
    XlaScratch scratch;
    const lc::Chunks c1 = {lc::kF32, 1, 4, 4, (int64_t)lc::raw_frame_bytes(4, 4, lc::kF32)};
    std::vector<uint8_t> x1(64), f1(c1.cap);
    std::vector<float> e1(1, 0.01f);
    std::vector<int32_t> n1(1);
    fresh.compress(scratch, &stream, c1, x1.data(), e1.data(), lc::kRel, lc::kCodecFixed, f1.data(), n1.data());
    check(fresh.rt.occupancy_queries == 8, "the first call loads and sizes every kernel of its dtype");
  }
  // XLA's instantiate stage: every kernel of every dtype loaded and sized on each device in use
  // (2), on a thread of the library's own (the caller's current device untouched), once; the
  // executions that follow load nothing and ask the runtime nothing.
  {
    lc::gpu::Launcher<EmuRuntime> inst;
    inst.rt.expected = &stream;
    inst.rt.in_use = {stream.device};
    check(!inst.preloaded(stream.device), "instantiate: nothing preloaded before the stage");
    check(inst.instantiate() == 0, "instantiate: succeeds");
    check(inst.preloaded(stream.device) && !inst.preloaded(0), "instantiate: the device in use preloaded");
    check(inst.rt.own_threads == 1 && inst.rt.current_on_caller == 0 && current_device == -1,
          "instantiate: devices made current on the library's own thread only");
    check(inst.rt.occupancy_queries == 8 * 3 && inst.rt.sm_queries == 8 * 3,
          "instantiate: all eight kernels of all three dtypes loaded and sized");
    const int occ = inst.rt.occupancy_queries, sm = inst.rt.sm_queries;
    check(inst.instantiate() == 0 && inst.rt.occupancy_queries == occ,
          "instantiate: a device done once is not visited again");
    inst.rt.require_loaded = true;
    for (int dtype : {lc::kF32, lc::kBF16, lc::kF16})
      for (int codec : {lc::kCodecFixed, lc::kCodecAuto}) {
        run_case(inst, stream, dtype, 5, 64, 16, codec, seed++);
        run_case(inst, stream, dtype, 2, 256, 64, codec, seed++);  // multi-block (parts) kernels
      }
    check(inst.rt.launches > 0 && inst.rt.occupancy_queries == occ && inst.rt.sm_queries == sm,
          "instantiate: the executions after it load nothing and ask the runtime nothing");
    // Without the stage (no device in use yet, or an XLA without it): loaded at the first call.
    lc::gpu::Launcher<EmuRuntime> late;
    late.rt.expected = &stream;
    check(late.instantiate() == 0 && !late.preloaded(stream.device) && late.rt.occupancy_queries == 0,
          "instantiate: no device in use, nothing loaded");
  }
  // Grids: resident blocks (3 SMs x 2), at most one per chunk, within the scratch budget.
  {
    L.rt.grids.clear();
    run_case(L, stream, lc::kF32, 9, 64, 16, lc::kCodecFixed, seed++);
    check(!L.rt.grids.empty() && L.rt.grids[0] == 6, "fixed-rate grid: the resident blocks");
    L.rt.grids.clear();
    run_case(L, stream, lc::kF32, 2, 64, 16, lc::kCodecFixed, seed++);
    check(!L.rt.grids.empty() && L.rt.grids[0] == 2, "fixed-rate grid: one block per chunk");
    // A budget of two workspaces (plus the alignment slack and decode's parsed headers, which
    // count against it too) caps the fixed-rate grid (it was unbounded) and the others.
    const size_t cap = lc::raw_frame_bytes(64, 16, lc::kF32);
    const size_t slack = lc::gpu::kWsAlign - lc::gpu::kScratchAlign;
    L.budget.floor = size_t(1) << 40;  // the caps bind, not twice the frames
    L.budget.fixed_encode = 2 * lc::gpu::align256(4 * lc::outlier_slots(64, 16, lc::kF32, cap)) + slack;
    L.budget.dict_encode = 2 * lc::gpu::align256(lc::gpu::dict_ws_bytes(64, 16, lc::kF32, cap)) + slack;
    L.budget.dict_decode = 2 * lc::gpu::align256(lc::gpu::dict_dec_ws_bytes(64, 16, lc::kF32)) + slack +
                           lc::gpu::align256(sizeof(lc::gpu::FastFrame) * 9);
    for (int codec : {lc::kCodecFixed, lc::kCodecAuto}) {
      L.rt.grids.clear();
      run_case(L, stream, lc::kF32, 9, 64, 16, codec, seed++);
      // compress; decompress: fast (no workspace), dictionary; frame status: the same two
      // (and the one launch of the fixed_rate decompress)
      const std::vector<unsigned> want = {2, 6, 2, 6, 2, 6};
      std::string got;
      for (unsigned g : L.rt.grids) got += " " + std::to_string(g);
      check(L.rt.grids == want, "grids within the scratch budget, codec " + std::to_string(codec) + ":" + got);
    }
    // Without the 64 MiB floor, twice the frames' bytes binds: 9 frames of 1035 bytes leave room
    // for no dictionary workspace (about 120 KiB): one block.
    L.budget = lc::gpu::ScratchBudget();
    L.budget.floor = 0;
    L.rt.grids.clear();
    run_case(L, stream, lc::kF32, 9, 64, 16, lc::kCodecAuto, seed++);
    check(!L.rt.grids.empty() && L.rt.grids[0] == 1, "grid within twice the frames' bytes");
    L.budget = lc::gpu::ScratchBudget();
  }
  // Few chunks of several tiles: decompress spreads each frame over ceil(6 / 2) = 3 blocks (of
  // its 4 tiles), frame status keeps one block per frame.
  for (int dtype : {lc::kF32, lc::kBF16})
    for (int codec : {lc::kCodecFixed, lc::kCodecRaw, lc::kCodecAuto}) {
      L.rt.grids.clear();
      run_case(L, stream, dtype, 2, 256, 64, codec, seed++);
      // compress (fixed: 3 parts a chunk on 6 blocks, then 2 blocks finish); decompress: fast
      // over 3 blocks a frame, dictionary; frame status: fast, dictionary; decompress with
      // fixed_rate: fast over 3 blocks a frame
      std::vector<unsigned> want = {2, 6, 2, 2, 2, 6};
      if (codec == lc::kCodecFixed) want = {6, 2, 6, 2, 2, 2, 6};
      std::string got;
      for (unsigned g : L.rt.grids) got += " " + std::to_string(g);
      check(L.rt.grids == want, "multi-block decode grids, codec " + std::to_string(codec) + ":" + got);
    }
  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
