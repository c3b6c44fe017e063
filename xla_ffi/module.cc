// nanobind module: exports the FFI handlers as capsules (CUDA: a dict of capsules by XLA FFI stage,
// {"instantiate", "execute"}, as jax.ffi.register_ffi_target takes), keyed by platform then
// target name, and the frame format of format.h (constants, enums, status codes, size functions), which
// jax_lossy_comm/frame.py reads instead of keeping its own copy.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "format.h"
#include "handlers.h"
#include "simd.h"

namespace nb = nanobind;

namespace {
template <typename T>
nb::capsule encapsulate(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

void export_format(nb::module_& m) {
  m.attr("MAGIC") = (int)lc::kMagic;
  m.attr("VERSION") = (int)lc::kVersion;
  m.attr("HEADER_FIXED_BYTES") = lc::kHeaderFixed;
  m.attr("CHECKSUM_OFFSET") = lc::kChecksumOffset;
  m.attr("MAX_BITS") = lc::kMaxBits;
  m.attr("HALF_STEP_FLOOR") = (double)lc::kHalfStepFloor;
  m.attr("MAX_HUFFMAN_LENGTH") = lc::kMaxHuffLen;
  m.attr("MAX_HUFFMAN_SYMBOLS") = lc::kMaxHuffSymbols;
  m.attr("SEGMENT_SYMBOLS") = lc::kSeg;
  m.attr("MAX_FRAME_BYTES") = lc::kMaxFrameBytes;
  nb::dict forms, flags, codecs, modes, dtypes;
  forms["RAW"] = (int)lc::kFormRaw;
  forms["QUANT"] = (int)lc::kFormQuant;
  flags["ABS"] = (int)lc::kFlagAbs;
  flags["DEDUP"] = (int)lc::kFlagDedup;
  flags["CODES_HUFFMAN"] = (int)lc::kFlagCodesHuff;
  flags["INDEX_HUFFMAN"] = (int)lc::kFlagIndexHuff;
  codecs["auto"] = (int)lc::kCodecAuto;
  codecs["raw"] = (int)lc::kCodecRaw;
  codecs["fixed"] = (int)lc::kCodecFixed;
  codecs["dedup"] = (int)lc::kCodecDedup;
  codecs["entropy"] = (int)lc::kCodecEntropy;
  modes["rel"] = (int)lc::kRel;
  modes["abs"] = (int)lc::kAbs;
  dtypes["float32"] = (int)lc::kF32;
  dtypes["bfloat16"] = (int)lc::kBF16;
  dtypes["float16"] = (int)lc::kF16;
  m.attr("FORMS") = forms;
  m.attr("FLAGS") = flags;
  m.attr("CODECS") = codecs;
  m.attr("MODES") = modes;
  m.attr("DTYPES") = dtypes;
  nb::list status;  // (name, code, description) in code order
  int code = 0;
  for (const lc::StatusText& s : lc::kStatusText)
    status.append(nb::make_tuple(s.name, code++, s.description));
  m.attr("STATUS") = status;

  m.def("header_bytes", [](uint64_t rows, uint64_t dim) { return lc::header_bytes(rows, dim); },
        nb::arg("rows"), nb::arg("dim"), "Bytes of the header and varint shape of a [rows, dim] chunk.");
  m.def("raw_frame_bytes",
        [](uint64_t rows, uint64_t dim, int dtype) { return lc::raw_frame_bytes(rows, dim, dtype); },
        nb::arg("rows"), nb::arg("dim"), nb::arg("dtype"),
        "Bytes of the raw frame of a [rows, dim] chunk of dtype code `dtype`.");
  m.def("fixed_frame_bytes",
        [](uint64_t rows, uint64_t dim, int bits, int dtype, uint64_t n_outliers) {
          return lc::fixed_frame_bytes(rows, dim, bits, dtype, n_outliers);
        },
        nb::arg("rows"), nb::arg("dim"), nb::arg("bits"), nb::arg("dtype"), nb::arg("n_outliers"),
        "Bytes of a fixed-rate frame with `bits`-bit codes and n_outliers exact values.");
  m.def("rel_bits_for", [](double eb_rel, int dtype) { return lc::rel_bits_for(eb_rel, dtype); },
        nb::arg("eb_rel"), nb::arg("dtype") = 0,
        "Code bits in REL mode for relative bounds >= eb_rel and dtype code dtype (32: more "
        "than MAX_BITS).");
  m.def("pos_bytes_for", [](uint64_t n) { return lc::pos_bytes_for(n); }, nb::arg("n"),
        "Bytes of one outlier position in a chunk of n values.");
}
}  // namespace

NB_MODULE(_ext, m) {
  m.def("registrations", []() {
    nb::dict cpu, cuda, out;
    cpu["lc_compress"] = encapsulate(LcCompressCpu);
    cpu["lc_decompress"] = encapsulate(LcDecompressCpu);
    cpu["lc_frame_status"] = encapsulate(LcFrameStatusCpu);
#ifdef JLC_WITH_CUDA
    // A handler bundle by XLA FFI stage: "instantiate" loads the kernels before the first
    // step (codec_cuda.cu), "execute" runs them.
    auto bundle = [](XLA_FFI_Error* (*execute)(XLA_FFI_CallFrame*)) {
      nb::dict d;
      d["instantiate"] = encapsulate(LcInstantiateCuda);
      d["execute"] = encapsulate(execute);
      return d;
    };
    cuda["lc_compress"] = bundle(LcCompressCuda);
    cuda["lc_decompress"] = bundle(LcDecompressCuda);
    cuda["lc_frame_status"] = bundle(LcFrameStatusCuda);
#endif
    out["cpu"] = cpu;
    out["CUDA"] = cuda;
    return out;
  });
  export_format(m);
  m.def("simd_level", []() {
#if LC_CPU_SIMD && defined(__x86_64__)
    static const char* names[] = {"sse2", "avx2", "avx512"};
    return std::string(names[lc::simd::level()]);
#else
    return std::string("portable");
#endif
  }, "CPU kernel set the handlers use: sse2, avx2 (+BMI2), avx512, or portable (JLC_SIMD caps it).");
  m.def("simd_pdep", []() {
#if LC_CPU_SIMD && defined(__x86_64__)
    return lc::simd::has_fast_pdep();
#else
    return false;
#endif
  }, "Whether the bit (un)packing uses pext/pdep (not on AMD Zen 1/2, where they are microcoded; JLC_PDEP=0/1 overrides).");
  m.attr("HAS_CUDA") =
#ifdef JLC_WITH_CUDA
      true;
#else
      false;
#endif
}
