// The kernels a tool serves with.
#pragma once

namespace pig::app {

/// Registers the specialised kernel sets generated from configs/kernels.txt (codegen's
/// pig_register_generated_kernels) in the runtime's registry, where the build generated them;
/// returns how many (0 without the generated kernels). Idempotent. Every tool that loads a
/// model calls it before building an Attention, so that it decodes with the kernels the
/// README's figures are measured with.
int RegisterKernels();

} // namespace pig::app
