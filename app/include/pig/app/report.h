// What a run reports after decoding: the attention's figures (kernels, cost2 and cost1, the GQA
// sample sets, KV and index memory) and the process's peak memory.
#pragma once

#include <cstddef>
#include <cstdio>

#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"

namespace pig::app {

/// The peak resident set of this process, MiB (memory-mapped weights count as they are read).
double PeakRssMiB();

/// The attention's summary lines, to `out`: the kernels that served, cost2 and cost1 (or why
/// nothing was indexed), the GQA sample sets' overlap, the KV cache's and the index's memory
/// (`positions`: the sequence's length, for the index's bytes per token).
void PrintAttentionSummary(const runtime::Attention &attn, const runtime::LlamaConfig &cfg,
                           size_t positions, std::FILE *out = stderr);

} // namespace pig::app
