// CPU XLA FFI handlers for the jax_lossy_comm codec: compress, decompress, frame status.
// Leading dimensions are a batch of independent chunks [rows, dim]; the codec itself lives
// in frame.h and is shared with the CUDA handlers.
#include <cstdint>
#include <string>
#include <vector>

#include "frame.h"
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
  IeeeSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~0x8040u); }  // FTZ | DAZ
  ~IeeeSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned int saved_;
#endif
};

int dtype_code(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return lc::kF32;
    case ffi::DataType::BF16: return lc::kBF16;
    case ffi::DataType::F16: return lc::kF16;
    default: return -1;
  }
}

// Splits dims [..., a, b] into (batch, a, b); false when rank < 2.
bool split_chunks(ffi::AnyBuffer::Dimensions d, int64_t& batch, int64_t& a, int64_t& b) {
  if (d.size() < 2) return false;
  batch = 1;
  for (size_t i = 0; i + 2 < d.size(); ++i) batch *= d[i];
  a = d[d.size() - 2];
  b = d[d.size() - 1];
  return true;
}

ffi::Error CompressImpl(ffi::AnyBuffer x, ffi::Buffer<ffi::F32> eb,
                        ffi::Result<ffi::Buffer<ffi::U8>> frames,
                        ffi::Result<ffi::Buffer<ffi::S32>> nbytes, int32_t mode, int32_t codec) {
  int dtype = dtype_code(x.element_type());
  if (dtype < 0) return ffi::Error::InvalidArgument("lc_compress: x must be float32, bfloat16 or float16");
  int64_t batch, rows, dim;
  if (!split_chunks(x.dimensions(), batch, rows, dim))
    return ffi::Error::InvalidArgument("lc_compress: x must have rank >= 2 ([..., rows, dim])");
  auto fd = frames->dimensions();
  if (fd.size() == 0) return ffi::Error::InvalidArgument("lc_compress: frames must have rank >= 1");
  const int64_t cap = fd.back();
  if ((int64_t)eb.element_count() != batch || (int64_t)nbytes->element_count() != batch ||
      (int64_t)frames->element_count() != batch * cap)
    return ffi::Error::InvalidArgument("lc_compress: error_bound, frames and nbytes must have one entry per chunk");
  if (mode != lc::kRel && mode != lc::kAbs) return ffi::Error::InvalidArgument("lc_compress: bad mode");
  if (codec < lc::kCodecAuto || codec > lc::kCodecEntropy) return ffi::Error::InvalidArgument("lc_compress: bad codec");
  IeeeSubnormals ieee;
  const uint8_t* in = static_cast<const uint8_t*>(x.untyped_data());
  const size_t chunk_bytes = (size_t)(rows * dim) * lc::dtype_size(dtype);
  lc::Workspace w = lc::carve_workspace(scratch(lc::workspace_bytes(rows, dim)), rows, dim);
  uint8_t* out = frames->typed_data();
  int32_t* nb = nbytes->typed_data();
  const float* ebs = eb.typed_data();
  for (int64_t c = 0; c < batch; ++c) {
    lc::EncodeResult r = lc::encode_chunk(in + c * chunk_bytes, rows, dim, dtype, ebs[c], mode,
                                          codec, out + c * cap, (size_t)cap, w);
    nb[c] = r.nbytes < INT32_MIN ? INT32_MIN : (int32_t)r.nbytes;
  }
  return ffi::Error::Success();
}

template <bool kWrite>
ffi::Error DecodeAll(const ffi::Buffer<ffi::U8>& frames, const ffi::Buffer<ffi::S32>& nbytes,
                     int64_t rows, int64_t dim, int dtype, uint8_t* out, int32_t* status,
                     const char* op) {
  auto fd = frames.dimensions();
  if (fd.size() == 0) return ffi::Error::InvalidArgument(std::string(op) + ": frames must have rank >= 1");
  const int64_t cap = fd.back();
  const int64_t batch = (int64_t)nbytes.element_count();
  if ((int64_t)frames.element_count() != batch * cap)
    return ffi::Error::InvalidArgument(std::string(op) + ": frames must be [..., capacity] with nbytes [...]");
  const size_t chunk_bytes = (size_t)(rows * dim) * lc::dtype_size(dtype);
  IeeeSubnormals ieee;
  lc::Workspace w = lc::carve_workspace(scratch(lc::workspace_bytes(rows, dim)), rows, dim);
  const uint8_t* f = frames.typed_data();
  const int32_t* nb = nbytes.typed_data();
  for (int64_t c = 0; c < batch; ++c)
    status[c] = lc::decode_frame<kWrite>(f + c * cap, nb[c], (size_t)cap, rows, dim, dtype,
                                         kWrite ? out + c * chunk_bytes : nullptr, w);
  return ffi::Error::Success();
}

ffi::Error DecompressImpl(ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                          ffi::Result<ffi::AnyBuffer> x, ffi::Result<ffi::Buffer<ffi::S32>> status) {
  int dtype = dtype_code(x->element_type());
  if (dtype < 0) return ffi::Error::InvalidArgument("lc_decompress: output must be float32, bfloat16 or float16");
  int64_t batch, rows, dim;
  if (!split_chunks(x->dimensions(), batch, rows, dim))
    return ffi::Error::InvalidArgument("lc_decompress: output must have rank >= 2 ([..., rows, dim])");
  if ((int64_t)nbytes.element_count() != batch || (int64_t)status->element_count() != batch)
    return ffi::Error::InvalidArgument("lc_decompress: nbytes and status must have one entry per chunk");
  return DecodeAll<true>(frames, nbytes, rows, dim, dtype, static_cast<uint8_t*>(x->untyped_data()),
                         status->typed_data(), "lc_decompress");
}

ffi::Error FrameStatusImpl(ffi::Buffer<ffi::U8> frames, ffi::Buffer<ffi::S32> nbytes,
                           ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t rows, int64_t dim,
                           int32_t dtype) {
  if (dtype < lc::kF32 || dtype > lc::kF16 || rows < 0 || dim < 0)
    return ffi::Error::InvalidArgument("lc_frame_status: bad rows, dim or dtype");
  if (nbytes.element_count() != status->element_count())
    return ffi::Error::InvalidArgument("lc_frame_status: status must match nbytes");
  return DecodeAll<false>(frames, nbytes, rows, dim, dtype, nullptr, status->typed_data(),
                          "lc_frame_status");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LcCompressCpu, CompressImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()          // x: [..., rows, dim]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // error bound per chunk [...]
                                  .Ret<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
                                  .Ret<ffi::Buffer<ffi::S32>>()   // nbytes [...], < 0: overflow
                                  .Attr<int32_t>("mode")          // lc::Mode
                                  .Attr<int32_t>("codec"));       // lc::Codec

XLA_FFI_DEFINE_HANDLER_SYMBOL(LcDecompressCpu, DecompressImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
                                  .Arg<ffi::Buffer<ffi::S32>>()   // nbytes [...]
                                  .Ret<ffi::AnyBuffer>()          // x_hat [..., rows, dim]
                                  .Ret<ffi::Buffer<ffi::S32>>()); // status [...]

XLA_FFI_DEFINE_HANDLER_SYMBOL(LcFrameStatusCpu, FrameStatusImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
                                  .Arg<ffi::Buffer<ffi::S32>>()   // nbytes [...]
                                  .Ret<ffi::Buffer<ffi::S32>>()   // status [...]
                                  .Attr<int64_t>("rows")
                                  .Attr<int64_t>("dim")
                                  .Attr<int32_t>("dtype"));        // lc::DType
