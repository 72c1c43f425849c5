// generated_kernels.h: the runtime's interface to the kernels generated from a manifest
// (configs/kernels.txt, or a deployment's own).
//
// Defined by the TUs pig-translate emits at build time (library pig_generated_kernels, and
// pig_generated_cuda_kernels where nvcc exists). Plain C++: the runtime includes it without MLIR.

#ifndef PIG_RUNTIME_GENERATED_KERNELS_H
#define PIG_RUNTIME_GENERATED_KERNELS_H

#include <vector>

#include "pig/runtime/lsh_kernels.h"

/// Registers the specialised CPU kernel set of every manifest configuration in
/// KernelRegistry::global() and returns how many. Idempotent. Call it once at start-up: it is
/// what keeps the generated object files (and their static registrars) in a statically linked
/// program.
int pig_register_generated_kernels();

/// The manifest's configurations (target cpu), in the order of the manifest's sorted symbols.
std::vector<pig::runtime::lsh::KernelKey> pig_generated_kernel_keys();

#endif // PIG_RUNTIME_GENERATED_KERNELS_H
