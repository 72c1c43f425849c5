//===- GeneratedCudaKernels.h - CUDA kernels from configs/kernels.txt ----===//
//
// Defined by the .cu TU pig-translate --emit=cuda produces at build time (library
// pig_generated_cuda_kernels, built where nvcc exists). Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef PIG_CODEGEN_GENERATEDCUDAKERNELS_H
#define PIG_CODEGEN_GENERATEDCUDAKERNELS_H

#include <vector>

#include "pig/cuda/lsh_cuda.h"

/// Registers the specialised CUDA kernel set of every manifest configuration (see
/// pig::cuda::resolve_cuda_kernels) and returns how many. Idempotent.
int pig_register_generated_cuda_kernels();

/// The manifest's configurations, in the order of their sorted symbols.
std::vector<pig::cuda::CudaKernelKey> pig_generated_cuda_kernel_keys();

#endif // PIG_CODEGEN_GENERATEDCUDAKERNELS_H
