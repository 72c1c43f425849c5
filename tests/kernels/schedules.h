// Generic kernel sets with non-default schedules, for the current SIMD target (schedules.cpp).
#pragma once

#include <vector>

#include "pig/runtime/lsh_kernels.h"

namespace pig::test {
/// In the sanitizer build only the first (gqa=union block=16): three generic sets cost minutes of
/// sanitized compilation, and the union path is the one code path the others add.
std::vector<pig::runtime::lsh::LshKernelSet> scheduled_generic_sets();

/// The sets to test for one key on the current target (any element type): the generic one, the
/// specialised one when the test binary registered it, and the scheduled generic sets above
/// (defined in lsh_test_util.cpp).
std::vector<pig::runtime::lsh::LshKernelSet> sets_for(const pig::runtime::lsh::KernelKey &key);
} // namespace pig::test
