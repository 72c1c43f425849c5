// pig-bench-attention's Google Benchmark definitions (attention_benchmarks.cpp): registered by
// main after its own options are parsed, run after benchmark::Initialize took the --benchmark_*
// flags.
#pragma once

#include <optional>

#include "pig/runtime/lsh_schedule.h"

namespace pig::bench {

/// Registers every benchmark; with `only` (--schedule), the knob pairs of that variant alone.
void RegisterAttentionBenchmarks(const std::optional<runtime::lsh::Schedule> &only);

/// Prints the last-level cache and the working set, runs the benchmarks the --benchmark_* flags
/// select, then prints the ratio lines and the knob table from their medians.
void RunAttentionBenchmarks();

} // namespace pig::bench
