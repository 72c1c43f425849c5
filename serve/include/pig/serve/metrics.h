// The server's counters in Prometheus' text exposition format (version 0.0.4), labelled by
// attention method: what vLLM's and llama-server's /metrics report, under pig_ names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pig::serve {

/// A cumulative histogram with fixed upper bounds (seconds), as Prometheus expects.
class Histogram {
public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  /// `name{labels,le="..."} count` lines, then _sum and _count.
  void Render(std::string &out, const std::string &name, const std::string &labels) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_; // per bound, not cumulative; the last is +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

/// The buckets of the inter-token latency, for the engine's decode pass too.
Histogram DecodePassHistogram();

/// Per attention method.
struct MethodMetrics {
  MethodMetrics();
  uint64_t running = 0, waiting = 0;                ///< gauges
  uint64_t prompt_tokens = 0, generated_tokens = 0; ///< counters
  std::map<std::string, uint64_t> finished; ///< by finish reason: stop, length, cancelled, error
  uint64_t kv_bytes = 0, index_bytes = 0;   ///< gauges: in use by running requests
  Histogram ttft, itl, e2e;
};

struct ServerMetrics {
  std::map<std::string, MethodMetrics> methods; ///< by method name
  std::map<std::string, uint64_t> rejected;     ///< requests refused before admission, by reason
  uint64_t memory_budget = 0, memory_reserved = 0;
  uint64_t kv_resident = 0; ///< the KV pools' committed bytes: the most blocks held at once
  /// The prefix cache (runtime::PrefixCache::Stats): lookups, hits, prompt tokens served from
  /// it, blocks evicted (counters); bytes of the blocks it holds (gauge).
  uint64_t prefix_lookups = 0, prefix_hits = 0, prefix_hit_tokens = 0, prefix_evictions = 0;
  uint64_t prefix_bytes = 0;
  /// Its disk tier: blocks read back, written, files refused (counters); its files' bytes.
  uint64_t prefix_disk_reads = 0, prefix_disk_writes = 0, prefix_disk_rejected = 0;
  uint64_t prefix_disk_bytes = 0;
  // Magicpig's LSH indexes shared over cached prefixes (runtime::IndexShare).
  uint64_t shared_index_bytes = 0, shared_index_builds = 0, shared_index_hits = 0;
  uint64_t shared_index_disk_reads = 0, shared_index_disk_writes = 0,
           shared_index_disk_rejected = 0;
  ServerMetrics();
  uint64_t steps = 0;
  double step_seconds = 0;
  /// The decode rows' forward pass of each step (the engine's own cost per token of a batch,
  /// without the prefill work beside it, the HTTP threads or the clients), by rows in the pass.
  std::map<size_t, Histogram> decode_pass;
  /// The whole exposition text.
  std::string Render() const;
};

} // namespace pig::serve
