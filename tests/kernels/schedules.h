// Generic kernel sets with non-default schedules, for the current SIMD target (schedules.cpp).
#pragma once

#include <vector>

#include "pig/runtime/lsh_kernels.h"

namespace pig::test {
/// Empty in the sanitizer build (which does not compile them: three more generic sets cost
/// minutes of sanitized compilation and test no code path the others do not).
std::vector<pig::runtime::lsh::LshKernelSet> scheduled_generic_sets();
} // namespace pig::test
