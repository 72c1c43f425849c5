// What a run reports after decoding: the attention's figures (kernels, cost2 and cost1, the GQA
// sample sets, KV and index memory) and the process's peak memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/runtime/ops.h"

namespace pig::app {

/// The peak resident set of this process, MiB (memory-mapped weights count as they are read).
double PeakRssMiB();

/// The machine's limits as the benchmarks measure them in their own process, so a figure is
/// printed beside what bounds it.
/// Streaming read bandwidth, bytes/s: every thread of the pool reads its share of 256 MiB (far
/// beyond the caches); best of five passes.
double MeasureReadBandwidth(runtime::ThreadPool &pool);
/// A weight kernel's multiply-accumulate rate, MAC/s over the pool: each thread multiplies its own
/// cache-resident 256 x 576 Q4_1 matrix by `tokens` rows on `path` (ops.h); best of five passes.
double MeasureWeightMacRate(runtime::ThreadPool &pool, runtime::MatMulPath path, size_t tokens);
/// The better of the f32 path at 64 tokens and the integer path at 16 (their best row counts).
double MeasureWeightMacRate(runtime::ThreadPool &pool);
/// The machine's peak for one instruction: a register-only loop (Kernels::int8_peak_loop or
/// f32_peak_loop) on every thread of the pool at once, MAC/s; best of five passes.
double MeasurePeakMacRate(runtime::ThreadPool &pool, uint64_t (*loop)(size_t iters));

/// The attention's summary lines, to `out`: the kernels that served, cost2 and cost1 (or why
/// nothing was indexed), the GQA sample sets' overlap, the KV cache's and the index's memory
/// (`positions`: the sequence's length, for the index's bytes per token).
void PrintAttentionSummary(const runtime::Attention &attn, const runtime::LlamaConfig &cfg,
                           size_t positions, std::FILE *out = stderr);

} // namespace pig::app
