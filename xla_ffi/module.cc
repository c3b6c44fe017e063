// nanobind module: exports the FFI handlers as capsules, keyed by platform then target name.
#include <nanobind/nanobind.h>

#include "frame.h"
#include "handlers.h"

namespace nb = nanobind;

namespace {
template <typename T>
nb::capsule encapsulate(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}
}  // namespace

NB_MODULE(_ext, m) {
  m.def("registrations", []() {
    nb::dict cpu, cuda, out;
    cpu["lc_compress"] = encapsulate(LcCompressCpu);
    cpu["lc_decompress"] = encapsulate(LcDecompressCpu);
    cpu["lc_frame_status"] = encapsulate(LcFrameStatusCpu);
#ifdef JLC_WITH_CUDA
    cuda["lc_compress"] = encapsulate(LcCompressCuda);
    cuda["lc_decompress"] = encapsulate(LcDecompressCuda);
    cuda["lc_frame_status"] = encapsulate(LcFrameStatusCuda);
#endif
    out["cpu"] = cpu;
    out["CUDA"] = cuda;
    return out;
  });
  m.def("workspace_bytes", [](uint64_t rows, uint64_t dim) { return lc::workspace_bytes(rows, dim); },
        "Scratch bytes the codec needs for one chunk [rows, dim].");
  m.attr("FRAME_VERSION") = (int)lc::kVersion;
  m.attr("HAS_CUDA") =
#ifdef JLC_WITH_CUDA
      true;
#else
      false;
#endif
}
