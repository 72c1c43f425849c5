// generated_cuda_kernels.h: the CUDA runtime's interface to the kernels generated from a manifest.
//
// Defined by the .cu TU pig-translate --emit=cuda produces at build time (library
// pig_generated_cuda_kernels, built where nvcc exists). Plain C++.

#ifndef PIG_CUDA_GENERATED_CUDA_KERNELS_H
#define PIG_CUDA_GENERATED_CUDA_KERNELS_H

#include <vector>

#include "pig/cuda/lsh_cuda.h"

/// Registers the specialised CUDA kernel set of every manifest configuration (see
/// pig::cuda::resolve_cuda_kernels) and returns how many. Idempotent.
int pig_register_generated_cuda_kernels();

/// The manifest's configurations, in the order of their sorted symbols.
std::vector<pig::cuda::CudaKernelKey> pig_generated_cuda_kernel_keys();

#endif // PIG_CUDA_GENERATED_CUDA_KERNELS_H
