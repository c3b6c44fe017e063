// CUDA XLA FFI handlers for the jax_lossy_comm codec: compress, decompress, frame status.
//
// Same operands, attributes and frame format as codec_cpu.cc: a frame made here decodes on the
// CPU to the same values and the reverse (-fmad=false keeps the float operations of both sides
// identical). Leading dimensions of the input are a batch of independent chunks [rows, dim];
// every kernel takes the whole batch in one launch, one thread block per chunk at a time (a
// grid-stride loop over chunks, the grid sized to the occupancy and to the scratch budget).
// The kernels live in encode_kernels.cuh and decode_kernels.cuh (tests/cuda_emu runs them on
// the CPU); this file holds the host side: scratch sizing and carving, grids, launches.
// Scratch memory comes from XLA's allocator (ScratchAllocator), kernels run on XLA's stream,
// byte counts and statuses stay on the device; no synchronisation, no host round trip.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "decode_kernels.cuh"
#include "encode_kernels.cuh"
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

using namespace lc::gpu;  // NOLINT: the kernels and their launch constants
using lc::ffi_args::Chunks;

ffi::Error cuda_error(const char* op, cudaError_t e) {
  return ffi::Error::Internal(std::string(op) + ": CUDA error: " + cudaGetErrorString(e));
}

// Blocks for a grid-stride loop over `batch` chunks: as many as fit on the device at once.
template <typename Kernel>
cudaError_t resident_blocks(Kernel kernel, int threads, int64_t batch, int64_t* blocks) {
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);  // XLA makes the stream's device current
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
  if (e != cudaSuccess) return e;
  int64_t g = (int64_t)(sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
  *blocks = batch < g ? batch : g;
  return cudaSuccess;
}

size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

// Blocks of a kernel whose blocks each need ws_stride bytes of scratch: at most `budget` bytes.
int64_t cap_blocks(int64_t blocks, size_t ws_stride, size_t budget) {
  const int64_t by_mem = (int64_t)(budget / (ws_stride ? ws_stride : 1));
  if (blocks > by_mem) blocks = by_mem;
  return blocks < 1 ? 1 : blocks;
}

// `bytes` of scratch starting at a 256-byte boundary. XLA's FFI scratch allocator rejects any
// alignment above 16 ("Unsupported alignment": Allocate returns nothing), so ask for 16 and
// round the pointer up inside a block 240 bytes larger.
uint8_t* allocate_aligned256(ffi::ScratchAllocator& scratch, size_t bytes) {
  auto ws = scratch.Allocate(bytes + 240, 16);
  if (!ws.has_value()) return nullptr;
  return reinterpret_cast<uint8_t*>(align256(reinterpret_cast<uintptr_t>(*ws)));
}

ffi::Error scratch_error(const char* op) {
  return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(op) + ": scratch allocation failed");
}

template <int D>
ffi::Error LaunchCompress(cudaStream_t stream, ffi::ScratchAllocator& scratch, const uint8_t* x,
                          const float* eb, int64_t batch, int64_t rows, int64_t dim, int mode,
                          int codec, uint8_t* frames, int64_t cap, int32_t* nbytes) {
  const char* op = "lc_compress";
  if (batch == 0) return ffi::Error::Success();
  const uint64_t n = (uint64_t)rows * (uint64_t)dim;
  int64_t blocks = 0;
  if (codec == lc::kCodecFixed || codec == lc::kCodecRaw) {
    cudaError_t e = resident_blocks(encode_fixed_kernel<D>, kThreads, batch, &blocks);
    if (e != cudaSuccess) return cuda_error(op, e);
    const size_t stride = align256(4 * (size_t)n);  // outlier positions of one chunk
    uint8_t* ws = allocate_aligned256(scratch, stride * (size_t)blocks + 256);
    if (ws == nullptr) return scratch_error(op);
    encode_fixed_kernel<D><<<(unsigned)blocks, kThreads, 0, stream>>>(
        x, eb, batch, rows, dim, mode, codec, frames, (size_t)cap, nbytes, ws, stride);
  } else {
    cudaError_t e = resident_blocks(encode_dict_kernel<D>, kThreads, batch, &blocks);
    if (e != cudaSuccess) return cuda_error(op, e);
    const size_t stride = align256(dict_ws_bytes(rows, dim));
    blocks = cap_blocks(blocks, stride, kDictEncodeScratch);
    uint8_t* ws = allocate_aligned256(scratch, stride * (size_t)blocks);
    if (ws == nullptr) return scratch_error(op);
    encode_dict_kernel<D><<<(unsigned)blocks, kThreads, 0, stream>>>(
        x, eb, batch, rows, dim, mode, codec, frames, (size_t)cap, nbytes, ws, stride);
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? ffi::Error::Success() : cuda_error(op, e);
}

// decode_fast_kernel over every frame, then decode_dict_kernel over those it left (kind
// kKindGeneric in the parsed headers it writes to scratch).
template <int D, bool kWrite>
ffi::Error LaunchDecode(cudaStream_t stream, ffi::ScratchAllocator& scratch, const uint8_t* frames,
                        const int32_t* nbytes, int64_t batch, int64_t cap, int64_t rows,
                        int64_t dim, uint8_t* x, int32_t* status, const char* op) {
  if (batch == 0) return ffi::Error::Success();
  int64_t blocks = 0, dict_blocks = 0;
  cudaError_t e = resident_blocks(decode_fast_kernel<D, kWrite>, kThreads, batch, &blocks);
  if (e == cudaSuccess) e = resident_blocks(decode_dict_kernel<D, kWrite>, kThreads, batch, &dict_blocks);
  if (e != cudaSuccess) return cuda_error(op, e);
  const size_t stride = align256(dict_dec_ws_bytes(rows, dim));
  dict_blocks = cap_blocks(dict_blocks, stride, kDictDecodeScratch);
  const size_t info_bytes = align256(sizeof(FastFrame) * (size_t)batch);
  uint8_t* ws = allocate_aligned256(scratch, info_bytes + stride * (size_t)dict_blocks);
  if (ws == nullptr) return scratch_error(op);
  FastFrame* info = reinterpret_cast<FastFrame*>(ws);
  uint8_t* work = ws + info_bytes;
  decode_fast_kernel<D, kWrite><<<(unsigned)blocks, kThreads, 0, stream>>>(
      frames, nbytes, batch, (size_t)cap, rows, dim, x, status, info);
  decode_dict_kernel<D, kWrite><<<(unsigned)dict_blocks, kThreads, 0, stream>>>(
      frames, nbytes, batch, (size_t)cap, rows, dim, x, status, info, work, stride);
  e = cudaGetLastError();
  return e == cudaSuccess ? ffi::Error::Success() : cuda_error(op, e);
}

ffi::Error CompressImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                        ffi::Buffer<ffi::F32> eb, ffi::Result<ffi::Buffer<ffi::U8>> frames,
                        ffi::Result<ffi::Buffer<ffi::S32>> nbytes, int32_t mode, int32_t codec) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_compress(x, eb, frames, nbytes, mode, codec, c);
  if (err.failure()) return err;
  const uint8_t* in = static_cast<const uint8_t*>(x.untyped_data());
  uint8_t* out = frames->typed_data();
  int32_t* nb = nbytes->typed_data();
  const float* ebs = eb.typed_data();
  switch (c.dtype) {
    case lc::kBF16:
      return LaunchCompress<lc::kBF16>(stream, scratch, in, ebs, c.batch, c.rows, c.dim, mode, codec, out, c.cap, nb);
    case lc::kF16:
      return LaunchCompress<lc::kF16>(stream, scratch, in, ebs, c.batch, c.rows, c.dim, mode, codec, out, c.cap, nb);
    default:
      return LaunchCompress<lc::kF32>(stream, scratch, in, ebs, c.batch, c.rows, c.dim, mode, codec, out, c.cap, nb);
  }
}

template <bool kWrite>
ffi::Error DecodeAll(cudaStream_t stream, ffi::ScratchAllocator& scratch, const Chunks& c,
                     const uint8_t* f, const int32_t* nb, uint8_t* out, int32_t* status,
                     const char* op) {
  switch (c.dtype) {
    case lc::kBF16:
      return LaunchDecode<lc::kBF16, kWrite>(stream, scratch, f, nb, c.batch, c.cap, c.rows, c.dim, out, status, op);
    case lc::kF16:
      return LaunchDecode<lc::kF16, kWrite>(stream, scratch, f, nb, c.batch, c.cap, c.rows, c.dim, out, status, op);
    default:
      return LaunchDecode<lc::kF32, kWrite>(stream, scratch, f, nb, c.batch, c.cap, c.rows, c.dim, out, status, op);
  }
}

ffi::Error DecompressImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                          ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                          ffi::Result<ffi::AnyBuffer> x, ffi::Result<ffi::Buffer<ffi::S32>> status) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_decompress(frames, nbytes, x, status, c);
  if (err.failure()) return err;
  return DecodeAll<true>(stream, scratch, c, frames.typed_data(), nbytes.typed_data(),
                         static_cast<uint8_t*>(x->untyped_data()), status->typed_data(), "lc_decompress");
}

ffi::Error FrameStatusImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                           ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                           ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t rows, int64_t dim,
                           int32_t dtype) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_frame_status(frames, nbytes, status, rows, dim, dtype, c);
  if (err.failure()) return err;
  return DecodeAll<false>(stream, scratch, c, frames.typed_data(), nbytes.typed_data(), nullptr,
                          status->typed_data(), "lc_frame_status");
}

// Context of every CUDA target, before its operands (ffi_args.h): XLA's stream (the kernels
// run on it) and its scratch allocator (the workspaces).
auto cuda_bind() {
  return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::ScratchAllocator>();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LcCompressCuda, CompressImpl, lc::ffi_args::bind_compress(cuda_bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LcDecompressCuda, DecompressImpl,
                              lc::ffi_args::bind_decompress(cuda_bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LcFrameStatusCuda, FrameStatusImpl,
                              lc::ffi_args::bind_frame_status(cuda_bind()));
