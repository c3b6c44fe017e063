// Selects the CPU vector kernels (simd_cpu.h) for host code built by a GCC-compatible compiler;
// device code (nvcc) and other compilers take the portable loops alone (LC_CPU_SIMD 0). Only
// the CPU codec's hot loops include this: the format (format.h) and the CUDA kernels do not
// depend on it.
#pragma once

#if !defined(__CUDACC__) && defined(__GNUC__)
#define LC_CPU_SIMD 1
#include "simd_cpu.h"
#else
#define LC_CPU_SIMD 0
#endif
