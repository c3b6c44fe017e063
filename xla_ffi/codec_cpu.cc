// CPU XLA FFI handlers for the jax_lossy_comm codec: compress, decompress, frame status.
// Leading dimensions are a batch of independent chunks [rows, dim]; the codec itself lives
// in codec.h (format.h, encoder.h, decoder.h); the CUDA kernels share its format and pieces.
#include <cstdint>
#include <string>
#include <vector>

#include "ffi_args.h"
#include "codec.h"
#include "xla/ffi/api/ffi.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace ffi = xla::ffi;

namespace {

// Per-thread scratch grown on demand: no allocation once warmed up.
uint8_t* scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

// XLA:CPU runs its threads with flush-to-zero and denormals-are-zero; the codec needs IEEE
// subnormals (else they compare as 0 and the error bound breaks for them). Saved, cleared for
// the handler's body and restored.
class IeeeSubnormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  // FTZ | DAZ off, rounding to nearest (RC = 0: the vector paths round explicitly so).
  IeeeSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~0xE040u); }
  ~IeeeSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
#endif
};

using lc::ffi_args::Chunks;

void encode_all(const uint8_t* in, const float* eb, const Chunks& c, int mode, int codec,
                uint8_t* out, int32_t* nb) {
  IeeeSubnormals ieee;
  const size_t chunk_bytes = (size_t)(c.rows * c.dim) * lc::dtype_size(c.dtype);
  lc::Workspace w = lc::carve_workspace(scratch(lc::workspace_bytes(c.rows, c.dim)), c.rows, c.dim);
  for (int64_t k = 0; k < c.batch; ++k) {
    lc::EncodeResult r = lc::encode_chunk(in + k * chunk_bytes, c.rows, c.dim, c.dtype, eb[k], mode,
                                          codec, out + k * c.cap, (size_t)c.cap, w);
    nb[k] = r.nbytes < INT32_MIN ? INT32_MIN : (int32_t)r.nbytes;
  }
}

template <bool kWrite>
void decode_all(const uint8_t* f, const int32_t* nb, const Chunks& c, uint8_t* out, int32_t* status,
                bool fixed_rate = false) {
  IeeeSubnormals ieee;
  const size_t chunk_bytes = (size_t)(c.rows * c.dim) * lc::dtype_size(c.dtype);
  lc::Workspace w = lc::carve_workspace(scratch(lc::workspace_bytes(c.rows, c.dim)), c.rows, c.dim);
  for (int64_t k = 0; k < c.batch; ++k)
    status[k] = lc::decode_frame<kWrite>(f + k * c.cap, nb[k], (size_t)c.cap, c.rows, c.dim, c.dtype,
                                         kWrite ? out + k * chunk_bytes : nullptr, w, fixed_rate);
}

ffi::Error CompressImpl(ffi::AnyBuffer x, ffi::Buffer<ffi::F32> eb,
                        ffi::Result<ffi::Buffer<ffi::U8>> frames,
                        ffi::Result<ffi::Buffer<ffi::S32>> nbytes, int32_t mode, int32_t codec) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_compress(x, eb, frames, nbytes, mode, codec, c);
  if (err.failure()) return err;
  encode_all(static_cast<const uint8_t*>(x.untyped_data()), eb.typed_data(), c, mode, codec,
             frames->typed_data(), nbytes->typed_data());
  return ffi::Error::Success();
}

ffi::Error DecompressImpl(ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                          ffi::Result<ffi::AnyBuffer> x, ffi::Result<ffi::Buffer<ffi::S32>> status,
                          ffi::Dictionary attrs) {
  Chunks c;
  bool fixed_rate = false;
  ffi::Error err = lc::ffi_args::check_decompress(frames, nbytes, x, status, c);
  if (err.success()) err = lc::ffi_args::decompress_attrs(attrs, &fixed_rate);
  if (err.failure()) return err;
  decode_all<true>(frames.typed_data(), nbytes.typed_data(), c,
                   static_cast<uint8_t*>(x->untyped_data()), status->typed_data(), fixed_rate);
  return ffi::Error::Success();
}

ffi::Error FrameStatusImpl(ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                           ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t rows, int64_t dim,
                           int32_t dtype) {
  Chunks c;
  ffi::Error err = lc::ffi_args::check_frame_status(frames, nbytes, status, rows, dim, dtype, c);
  if (err.failure()) return err;
  decode_all<false>(frames.typed_data(), nbytes.typed_data(), c, nullptr, status->typed_data());
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LcCompressCpu, CompressImpl,
                              lc::ffi_args::bind_compress(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LcDecompressCpu, DecompressImpl,
                              lc::ffi_args::bind_decompress(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LcFrameStatusCpu, FrameStatusImpl,
                              lc::ffi_args::bind_frame_status(ffi::Ffi::Bind()));
