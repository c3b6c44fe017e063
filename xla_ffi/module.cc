// nanobind module: exports the FFI handlers as capsules, keyed by platform then target name.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

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
  m.def("simd_level", []() {
#if LC_CPU_SIMD && defined(__x86_64__)
    static const char* names[] = {"sse2", "avx2", "avx512"};
    return std::string(names[lc::simd::level()]);
#else
    return std::string("portable");
#endif
  }, "CPU kernel set the handlers use: sse2, avx2 (+BMI2), avx512, or portable (JLC_SIMD caps it).");
  m.attr("FRAME_VERSION") = (int)lc::kVersion;
  m.attr("HAS_CUDA") =
#ifdef JLC_WITH_CUDA
      true;
#else
      false;
#endif
}
