// Handler symbols exported to Python by module.cc.
#pragma once
#include "xla/ffi/api/c_api.h"

extern "C" {
XLA_FFI_Error* LcCompressCpu(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* LcDecompressCpu(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* LcFrameStatusCpu(XLA_FFI_CallFrame* call_frame);
#ifdef JLC_WITH_CUDA
// XLA's instantiate stage of the three CUDA targets (loads the kernels before the first step).
XLA_FFI_Error* LcInstantiateCuda(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* LcCompressCuda(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* LcDecompressCuda(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* LcFrameStatusCuda(XLA_FFI_CallFrame* call_frame);
#endif
}
