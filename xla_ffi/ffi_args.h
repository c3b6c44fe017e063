// Argument checks shared by the CPU and CUDA handlers. Misuse (wrong dtypes, shapes or
// attributes) is an ffi::Error naming the target; bad frames are per-frame statuses instead.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "format.h"
#include "xla/ffi/api/ffi.h"

namespace lc {
namespace ffi_args {

namespace ffi = xla::ffi;

using lc::Chunks;

inline int dtype_code(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return kF32;
    case ffi::DataType::BF16: return kBF16;
    case ffi::DataType::F16: return kF16;
    default: return -1;
  }
}

// Splits dims [..., rows, dim] into (batch, rows, dim); false when rank < 2.
inline bool split_chunks(ffi::AnyBuffer::Dimensions d, Chunks& c) {
  if (d.size() < 2) return false;
  c.batch = 1;
  for (size_t i = 0; i + 2 < d.size(); ++i) c.batch *= d[i];
  c.rows = d[d.size() - 2];
  c.dim = d[d.size() - 1];
  return true;
}

inline ffi::Error invalid(const char* op, const char* what) {
  return ffi::Error::InvalidArgument(std::string(op) + ": " + what);
}

// Frames count their bytes in int32 and outlier positions in uint32: chunks stay below 2 GiB.
inline bool chunk_fits(const Chunks& c) {
  if (c.rows < 0 || c.dim < 0 || c.rows > INT32_MAX || c.dim > INT32_MAX) return false;
  return raw_frame_bytes((uint64_t)c.rows, (uint64_t)c.dim, c.dtype) <= (size_t)INT32_MAX;
}

// frames [..., cap] against `batch` byte counts.
inline ffi::Error check_frames(ffi::AnyBuffer::Dimensions fd, int64_t frame_elems, int64_t batch,
                               Chunks& c, const char* op) {
  if (!chunk_fits(c)) return invalid(op, "chunks must be smaller than 2 GiB");
  if (fd.size() == 0) return invalid(op, "frames must have rank >= 1");
  c.cap = fd.back();
  if (frame_elems != batch * c.cap) return invalid(op, "frames must be [..., capacity] with nbytes [...]");
  return ffi::Error::Success();
}

inline ffi::Error check_compress(const ffi::AnyBuffer& x, const ffi::Buffer<ffi::F32>& eb,
                                 ffi::Result<ffi::Buffer<ffi::U8>>& frames,
                                 ffi::Result<ffi::Buffer<ffi::S32>>& nbytes, int32_t mode,
                                 int32_t codec, Chunks& c) {
  const char* op = "lc_compress";
  c.dtype = dtype_code(x.element_type());
  if (c.dtype < 0) return invalid(op, "x must be float32, bfloat16 or float16");
  if (!split_chunks(x.dimensions(), c)) return invalid(op, "x must have rank >= 2 ([..., rows, dim])");
  if ((int64_t)eb.element_count() != c.batch || (int64_t)nbytes->element_count() != c.batch)
    return invalid(op, "error_bound, frames and nbytes must have one entry per chunk");
  if (mode != kRel && mode != kAbs) return invalid(op, "bad mode");
  if (codec < kCodecAuto || codec > kCodecEntropy) return invalid(op, "bad codec");
  return check_frames(frames->dimensions(), (int64_t)frames->element_count(), c.batch, c, op);
}

inline ffi::Error check_decompress(const ffi::Buffer<ffi::U8>& frames,
                                   const ffi::Buffer<ffi::S32>& nbytes,
                                   ffi::Result<ffi::AnyBuffer>& x,
                                   ffi::Result<ffi::Buffer<ffi::S32>>& status, Chunks& c) {
  const char* op = "lc_decompress";
  c.dtype = dtype_code(x->element_type());
  if (c.dtype < 0) return invalid(op, "output must be float32, bfloat16 or float16");
  if (!split_chunks(x->dimensions(), c)) return invalid(op, "output must have rank >= 2 ([..., rows, dim])");
  if ((int64_t)nbytes.element_count() != c.batch || (int64_t)status->element_count() != c.batch)
    return invalid(op, "nbytes and status must have one entry per chunk");
  return check_frames(frames.dimensions(), (int64_t)frames.element_count(), c.batch, c, op);
}

// The optional attribute of lc_decompress: fixed_rate (int32, 0 or 1; absent: 0). 1 declares
// every frame raw or fixed-rate (codec "fixed" or "raw", static in the caller): the CUDA
// handler then asks for no dictionary workspace and launches one kernel; a frame of another
// form decodes to NaN with status UNSUPPORTED_FORM on both platforms.
inline ffi::Error decompress_attrs(const ffi::Dictionary& attrs, bool* fixed_rate) {
  const char* op = "lc_decompress";
  *fixed_rate = false;
  if (attrs.size() == 0) return ffi::Error::Success();
  if (attrs.size() != 1 || !attrs.contains("fixed_rate"))
    return invalid(op, "the only attribute is fixed_rate (int32)");
  ffi::ErrorOr<int32_t> v = attrs.get<int32_t>("fixed_rate");
  if (v.has_error()) return invalid(op, "fixed_rate must be an int32 (0 or 1)");
  if (*v != 0 && *v != 1) return invalid(op, "fixed_rate must be 0 or 1");
  *fixed_rate = *v == 1;
  return ffi::Error::Success();
}

inline ffi::Error check_frame_status(const ffi::Buffer<ffi::U8>& frames,
                                     const ffi::Buffer<ffi::S32>& nbytes,
                                     ffi::Result<ffi::Buffer<ffi::S32>>& status, int64_t rows,
                                     int64_t dim, int32_t dtype, Chunks& c) {
  const char* op = "lc_frame_status";
  if (dtype < kF32 || dtype > kF16) return invalid(op, "bad dtype");
  if (nbytes.element_count() != status->element_count()) return invalid(op, "status must match nbytes");
  c.dtype = dtype;
  c.rows = rows;
  c.dim = dim;
  c.batch = (int64_t)nbytes.element_count();
  return check_frames(frames.dimensions(), (int64_t)frames.element_count(), c.batch, c, op);
}

// Operands and attributes of the three targets, after the platform's context arguments (none on
// the CPU; stream and scratch allocator on CUDA): one binding per target for both platforms.
template <typename B>
auto bind_compress(B&& b) {
  return std::forward<B>(b)
      .template Arg<ffi::AnyBuffer>()          // x: [..., rows, dim]
      .template Arg<ffi::Buffer<ffi::F32>>()   // error bound per chunk [...]
      .template Ret<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
      .template Ret<ffi::Buffer<ffi::S32>>()   // nbytes [...], < 0: overflow
      .template Attr<int32_t>("mode")          // lc::Mode
      .template Attr<int32_t>("codec");        // lc::Codec
}
template <typename B>
auto bind_decompress(B&& b) {
  return std::forward<B>(b)
      .template Arg<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
      .template Arg<ffi::Buffer<ffi::S32>>()   // nbytes [...]
      .template Ret<ffi::AnyBuffer>()          // x_hat [..., rows, dim]
      .template Ret<ffi::Buffer<ffi::S32>>()   // status [...]
      .template Attrs<ffi::Dictionary>();      // optional: fixed_rate (decompress_attrs)
}
template <typename B>
auto bind_frame_status(B&& b) {
  return std::forward<B>(b)
      .template Arg<ffi::Buffer<ffi::U8>>()    // frames [..., capacity]
      .template Arg<ffi::Buffer<ffi::S32>>()   // nbytes [...]
      .template Ret<ffi::Buffer<ffi::S32>>()   // status [...]
      .template Attr<int64_t>("rows")
      .template Attr<int64_t>("dim")
      .template Attr<int32_t>("dtype");        // lc::DType
}

}  // namespace ffi_args
}  // namespace lc
