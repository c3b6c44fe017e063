// CUDA XLA FFI handlers for the jax_lossy_comm codec: compress, decompress, frame status.
//
// Same operands, attributes and frame format as codec_cpu.cc: a frame made here decodes on the
// CPU to the same values and the reverse (-fmad=false keeps the float operations of both sides
// identical). Leading dimensions of the input are a batch of independent chunks [rows, dim];
// every kernel takes the whole batch in one launch, a grid-stride loop over chunks (the fast
// decoder's over a chunk's tiles too when chunks are few), the grid sized to the occupancy and
// to the call's scratch budget (cuda_launch.h).
// The kernels live in encode_kernels.cuh and decode_kernels.cuh, the launch code (scratch
// sizing and carving, grids, launches) in cuda_launch.h: tests/native/cuda_emu runs both on the CPU.
// This file binds them to the CUDA runtime and to XLA's FFI.
// Scratch memory comes from XLA's allocator (ScratchAllocator), kernels run on XLA's stream,
// byte counts and statuses stay on the device; no synchronisation, no host round trip.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cuda_launch.h"
#include "format.h"
// XLA's FFI headers (jaxlib) warn under nvcc (missing returns after exhaustive switches,
// always_inline on non-inline functions): silenced for these headers only.
#if defined(__NVCC__)
#pragma nv_diag_suppress 940
#pragma nv_diag_suppress 2473
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wreturn-type"
#pragma GCC diagnostic ignored "-Wattributes"
#endif
#include "ffi_args.h"
#include "xla/ffi/api/ffi.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#if defined(__NVCC__)
#pragma nv_diag_default 940
#pragma nv_diag_default 2473
#endif

namespace ffi = xla::ffi;

namespace {

using lc::Chunks;

// The launch code's runtime policy (cuda_launch.h) on the CUDA runtime.
struct CudaRuntime {
  using Stream = cudaStream_t;
  int device_of(cudaStream_t stream, int* device) {
#if CUDART_VERSION >= 12080
    return (int)cudaStreamGetDevice(stream, device);
#else
    (void)stream;
    return (int)cudaGetDevice(device);  // XLA makes the stream's device current
#endif
  }
  // Per-device attributes: asked of `device` by ordinal, the current device is left alone.
  int device_limits(int device, lc::gpu::DeviceLimits* d) {
    struct Q { int* v; cudaDeviceAttr a; } q[] = {
        {&d->sms, cudaDevAttrMultiProcessorCount},
        {&d->max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor},
        {&d->max_blocks_per_sm, cudaDevAttrMaxBlocksPerMultiprocessor},
        {&d->regs_per_sm, cudaDevAttrMaxRegistersPerMultiprocessor},
        {&d->smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor},
        {&d->smem_reserved_per_block, cudaDevAttrReservedSharedMemoryPerBlock}};
    for (const Q& x : q) {
      cudaError_t e = cudaDeviceGetAttribute(x.v, x.a, device);
      if (e != cudaSuccess) return (int)e;
    }
    return 0;
  }
  // Registers and static shared memory of a kernel: the same on every device of the built
  // architectures; on the CUDA runtime this also loads the kernel (lazy module loading) into
  // the calling thread's context, the stream's device that XLA made current.
  template <class K>
  int kernel_resources(K kernel, lc::gpu::KernelResources* r) {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(kernel));
    if (e != cudaSuccess) return (int)e;
    r->regs_per_thread = a.numRegs;
    r->static_smem = a.sharedSizeBytes;
    return 0;
  }
  template <class... P, class... A>
  int launch(void (*kernel)(P...), unsigned grid, unsigned threads, cudaStream_t stream, A... args) {
    kernel<<<grid, threads, 0, stream>>>(static_cast<P>(args)...);
    return (int)cudaGetLastError();
  }
  // Instantiate stage (Launcher::instantiate). A thread of our own: cudaSetDevice there leaves
  // XLA's threads' current device alone, and the runtime's per-thread error state dies with it.
  template <class F>
  int on_own_thread(F f) {
    try {
      std::thread t(f);
      t.join();
    } catch (const std::system_error&) {
      return (int)cudaErrorOperatingSystem;
    }
    return 0;
  }
  // Devices whose primary context is active (XLA's client retained it; XLA uses the primary
  // contexts): only those are loaded, so that no context is made on a GPU this process does not
  // use (one process per GPU with every GPU visible). Asked of the driver through the runtime's
  // entry points (no link to libcuda: the module imports without a driver). No device, or no
  // way to ask: none (the kernels then load at their first call).
  int devices_in_use(std::vector<int>* devices) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    using GetFn = int (*)(int*, int);                     // cuDeviceGet (CUresult, CUdevice)
    using StateFn = int (*)(int, unsigned int*, int*);  // cuDevicePrimaryCtxGetState
    void* get = nullptr;
    void* state = nullptr;
#if CUDART_VERSION >= 12050
    cudaDriverEntryPointQueryResult q1, q2;
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &get, 2000, cudaEnableDefault, &q1) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state, 7000, cudaEnableDefault,
                                         &q2) != cudaSuccess ||
        q1 != cudaDriverEntryPointSuccess || q2 != cudaDriverEntryPointSuccess)
      return 0;
#else
    (void)n;
    return 0;  // toolkits before 12.5: no versioned entry points; kernels load at first use
#endif
    for (int d = 0; d < n; ++d) {
      int dev = 0, active = 0;
      unsigned int flags = 0;
      if (reinterpret_cast<GetFn>(get)(&dev, d) != 0) continue;
      if (reinterpret_cast<StateFn>(state)(dev, &flags, &active) != 0) continue;
      if (active) devices->push_back(d);
    }
    return 0;
  }
  int make_current(int device) { return (int)cudaSetDevice(device); }  // own thread only
};

// One per process: the per-device queries are cached in it.
lc::gpu::Launcher<CudaRuntime>& launcher() {
  static lc::gpu::Launcher<CudaRuntime> instance;
  return instance;
}

ffi::Error to_error(const lc::gpu::LaunchResult& r, const char* op) {
  if (r.kind == lc::gpu::LaunchResult::kScratchError)
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(op) + ": scratch allocation failed");
  if (r.kind == lc::gpu::LaunchResult::kRuntimeError)
    return ffi::Error::Internal(std::string(op) + ": CUDA error: " +
                                cudaGetErrorString((cudaError_t)r.error));
  return ffi::Error::Success();
}

ffi::Error CompressImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                        ffi::Buffer<ffi::F32> eb, ffi::Result<ffi::Buffer<ffi::U8>> frames,
                        ffi::Result<ffi::Buffer<ffi::S32>> nbytes, int32_t mode, int32_t codec) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_compress(x, eb, frames, nbytes, mode, codec, c);
  if (err.failure()) return err;
  return to_error(launcher().compress(scratch, stream, c, static_cast<const uint8_t*>(x.untyped_data()),
                                      eb.typed_data(), mode, codec, frames->typed_data(),
                                      nbytes->typed_data()),
                  "lc_compress");
}

ffi::Error DecompressImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                          ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                          ffi::Result<ffi::AnyBuffer> x, ffi::Result<ffi::Buffer<ffi::S32>> status,
                          ffi::Dictionary attrs) {
  Chunks c;
  bool fixed_rate = false;
  ffi::Error err = lc::ffi_args::check_decompress(frames, nbytes, x, status, c);
  if (err.success()) err = lc::ffi_args::decompress_attrs(attrs, &fixed_rate);
  if (err.failure()) return err;
  return to_error(launcher().decode<true>(scratch, stream, c, frames.typed_data(), nbytes.typed_data(),
                                          static_cast<uint8_t*>(x->untyped_data()),
                                          status->typed_data(), fixed_rate),
                  "lc_decompress");
}

ffi::Error FrameStatusImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                           ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                           ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t rows, int64_t dim,
                           int32_t dtype) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_frame_status(frames, nbytes, status, rows, dim, dtype, c);
  if (err.failure()) return err;
  return to_error(launcher().decode<false>(scratch, stream, c, frames.typed_data(),
                                           nbytes.typed_data(), nullptr, status->typed_data()),
                  "lc_frame_status");
}

// XLA's instantiate stage of every CUDA target (before the executable's first run; no stream,
// no operands): loads all of the codec's kernels and computes their occupancy on every device
// in use (Launcher::instantiate), so that the first step neither loads a module (lazy loading
// while NCCL kernels spin on the same device can deadlock: CUDA's lazy loading guide) nor asks
// the runtime anything. Where XLA skips this stage the kernels load at their first call.
ffi::Error InstantiateImpl() {
  const int e = launcher().instantiate();
  if (e == 0) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("jax_lossy_comm: loading the CUDA kernels (instantiate stage): ") +
                              cudaGetErrorString((cudaError_t)e));
}

// Context of every CUDA target, before its operands (ffi_args.h): XLA's stream (the kernels
// run on it) and its scratch allocator (the workspaces).
auto cuda_bind() {
  return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::ScratchAllocator>();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LcInstantiateCuda, InstantiateImpl, ffi::Ffi::BindInstantiate());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LcCompressCuda, CompressImpl, lc::ffi_args::bind_compress(cuda_bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LcDecompressCuda, DecompressImpl,
                              lc::ffi_args::bind_decompress(cuda_bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LcFrameStatusCuda, FrameStatusImpl,
                              lc::ffi_args::bind_frame_status(cuda_bind()));
