// Generic bf16 kernel sets of the default schedule and of one-knob variants of it
// (schedule_variants.cpp), for the current SIMD target.
#pragma once

#include <vector>

#include "pig/runtime/lsh_kernels.h"

namespace pig::bench {
pig::runtime::lsh::LshKernelSet default_schedule_set();
/// One knob changed from the default each; key.schedule says which.
std::vector<pig::runtime::lsh::LshKernelSet> schedule_variant_sets();
} // namespace pig::bench
