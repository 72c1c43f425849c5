// What the workflows of pig-tune share (internal to pig_tune_workflows): time, formatting, record
// keys, the runtime's defaults, loading records.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/tune/frontier.h"
#include "pig/tune/point.h"
#include "pig/tune/record.h"
#include "workflows.h"

#ifndef PIG_VERSION
#define PIG_VERSION "0.1"
#endif

namespace pig::tune::workflow {

using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Whether the caller asked to stop (Ctrl-C in pig-tune).
inline bool Stopped(const CommonOptions &c) { return c.stop && c.stop->load(); }

/// Now, UTC, ISO 8601: the timestamp of records and points.
std::string Timestamp();

/// printf of one number.
std::string Fmt(const char *f, double x);

/// The record key of a candidate: "K=10 L=150 d=64 bf16".
std::string KernelKey(const Candidate &c, std::size_t d, runtime::lsh::DType dt);

/// "dense" or "K=10 L=150 t=2".
std::string CandStr(const Candidate &c);

/// The runtime's default dense layers of a model of n_layers layers.
std::vector<std::size_t> DefaultDense(std::size_t n_layers);

/// The runtime's default (K, L, t): the reference of every speed-up and of the evidence.
Candidate DefaultCandidate();

/// The layer count the quality records describe (no model needed for replay); throws when they
/// hold no quality record.
std::size_t LayersOf(const std::vector<Record> &rs);

/// The quality table of --data-hash (pig::tune::build_quality_table): an unknown hash, or none
/// given where the records hold several, is a UsageError naming --data-hash and the hashes held.
QualityTable QualityTableOf(const std::vector<Record> &rs, std::size_t n_layers,
                            const std::string &data_hash);

/// The records of path, a warning on stderr for each line skipped.
LoadedRecords LoadRecords(const std::string &path);

} // namespace pig::tune::workflow
