#include "pig/serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pig::serve {
namespace {

std::string Num(double v) {
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  char buf[64]; // the shortest text that reads back as v (0.1, not 0.10000000000000001)
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

std::string Num(uint64_t v) { return std::to_string(v); }

void Head(std::string &out, const char *name, const char *type, const char *help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

std::string Label(const std::string &key, const std::string &value) {
  return key + "=\"" + value + "\""; // values are our own names: no escaping needed
}

// Seconds: from 1 ms steps to minutes-long prefills of long prompts on a small machine.
const std::vector<double> kTtftBounds{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                      5,    10,    20,   40,  80,   160, 320, 640};
const std::vector<double> kItlBounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                     0.15,  0.2,    0.3,   0.5,  0.75,  1,    2.5,   5};
const std::vector<double> kE2eBounds{0.1, 0.25, 0.5, 1,   2.5, 5,   10,
                                     20,  40,   80,  160, 320, 640, 1280};

} // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += v;
}

void Histogram::Render(std::string &out, const std::string &name, const std::string &labels) const {
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const double le = i < bounds_.size() ? bounds_[i] : INFINITY;
    out += name + "_bucket{" + labels + "," + Label("le", Num(le)) + "} " + Num(cum) + "\n";
  }
  out += name + "_sum{" + labels + "} " + Num(sum_) + "\n";
  out += name + "_count{" + labels + "} " + Num(count_) + "\n";
}

MethodMetrics::MethodMetrics() : ttft(kTtftBounds), itl(kItlBounds), e2e(kE2eBounds) {}

ServerMetrics::ServerMetrics() = default;

Histogram DecodePassHistogram() { return Histogram(kItlBounds); }

std::string ServerMetrics::Render() const {
  std::string out;
  auto gauge = [&](const char *name, const char *help, auto field) {
    Head(out, name, "gauge", help);
    for (const auto &[m, mm] : methods)
      out += std::string(name) + "{" + Label("method", m) + "} " + Num(uint64_t(mm.*field)) + "\n";
  };
  auto counter = [&](const char *name, const char *help, auto field) {
    Head(out, name, "counter", help);
    for (const auto &[m, mm] : methods)
      out += std::string(name) + "{" + Label("method", m) + "} " + Num(uint64_t(mm.*field)) + "\n";
  };
  gauge("pig_requests_running", "Requests admitted (prefilling or decoding).",
        &MethodMetrics::running);
  gauge("pig_requests_waiting", "Requests queued for admission.", &MethodMetrics::waiting);
  counter("pig_prompt_tokens_total", "Prompt tokens of admitted requests.",
          &MethodMetrics::prompt_tokens);
  counter("pig_generation_tokens_total", "Tokens generated.", &MethodMetrics::generated_tokens);
  gauge("pig_kv_bytes", "KV cache bytes held by running requests.", &MethodMetrics::kv_bytes);
  gauge("pig_index_bytes", "LSH index bytes held by running requests.",
        &MethodMetrics::index_bytes);
  Head(out, "pig_requests_finished_total", "counter", "Requests finished, by reason.");
  for (const auto &[m, mm] : methods)
    for (const auto &[reason, n] : mm.finished)
      out += "pig_requests_finished_total{" + Label("method", m) + "," + Label("reason", reason) +
             "} " + Num(n) + "\n";
  Head(out, "pig_time_to_first_token_seconds", "histogram",
       "Time from the request's arrival to its first token.");
  for (const auto &[m, mm] : methods)
    mm.ttft.Render(out, "pig_time_to_first_token_seconds", Label("method", m));
  Head(out, "pig_inter_token_latency_seconds", "histogram", "Time between a request's tokens.");
  for (const auto &[m, mm] : methods)
    mm.itl.Render(out, "pig_inter_token_latency_seconds", Label("method", m));
  Head(out, "pig_request_latency_seconds", "histogram",
       "Time from the request's arrival to its last token.");
  for (const auto &[m, mm] : methods)
    mm.e2e.Render(out, "pig_request_latency_seconds", Label("method", m));
  Head(out, "pig_requests_rejected_total", "counter",
       "Requests refused before admission, by reason.");
  for (const auto &[reason, n] : rejected)
    out += "pig_requests_rejected_total{" + Label("reason", reason) + "} " + Num(n) + "\n";
  Head(out, "pig_memory_budget_bytes", "gauge", "The admission budget (--memory-budget).");
  out += "pig_memory_budget_bytes " + Num(memory_budget) + "\n";
  Head(out, "pig_memory_reserved_bytes", "gauge",
       "Bytes reserved by admitted requests (KV and index at full capacity).");
  out += "pig_memory_reserved_bytes " + Num(memory_reserved) + "\n";
  Head(out, "pig_kv_resident_bytes", "gauge",
       "Bytes of the KV block pools the system has given: the most blocks held at once (blocks "
       "freed by finished requests are reused, not returned).");
  out += "pig_kv_resident_bytes " + Num(kv_resident) + "\n";
  Head(out, "pig_prefix_cache_lookups_total", "counter",
       "Admitted requests that looked their prompt up in the prefix cache.");
  out += "pig_prefix_cache_lookups_total " + Num(prefix_lookups) + "\n";
  Head(out, "pig_prefix_cache_hits_total", "counter",
       "Lookups that found at least one cached block of the prompt.");
  out += "pig_prefix_cache_hits_total " + Num(prefix_hits) + "\n";
  Head(out, "pig_prefix_cache_hit_tokens_total", "counter",
       "Prompt tokens whose KV came from the prefix cache instead of prefill.");
  out += "pig_prefix_cache_hit_tokens_total " + Num(prefix_hit_tokens) + "\n";
  Head(out, "pig_prefix_cache_evictions_total", "counter",
       "Cached blocks evicted (least recently used, held by no request) for memory.");
  out += "pig_prefix_cache_evictions_total " + Num(prefix_evictions) + "\n";
  Head(out, "pig_prefix_cache_bytes", "gauge",
       "KV bytes the prefix cache holds (each block once, however many requests share it).");
  out += "pig_prefix_cache_bytes " + Num(prefix_bytes) + "\n";
  Head(out, "pig_prefix_cache_disk_reads_total", "counter",
       "Cached blocks read back from the disk tier (--cache-dir).");
  out += "pig_prefix_cache_disk_reads_total " + Num(prefix_disk_reads) + "\n";
  Head(out, "pig_prefix_cache_disk_writes_total", "counter", "Blocks written to the disk tier.");
  out += "pig_prefix_cache_disk_writes_total " + Num(prefix_disk_writes) + "\n";
  Head(out, "pig_prefix_cache_disk_rejected_total", "counter",
       "Disk tier files refused: truncated, corrupt, another model's or another version's.");
  out += "pig_prefix_cache_disk_rejected_total " + Num(prefix_disk_rejected) + "\n";
  Head(out, "pig_prefix_cache_disk_bytes", "gauge", "Bytes of the disk tier's files.");
  out += "pig_prefix_cache_disk_bytes " + Num(prefix_disk_bytes) + "\n";
  Head(out, "pig_shared_index_bytes", "gauge",
       "LSH index bytes over cached prefixes that requests stand on (each once; not in "
       "pig_index_bytes).");
  out += "pig_shared_index_bytes " + Num(shared_index_bytes) + "\n";
  Head(out, "pig_shared_index_builds_total", "counter",
       "(layer, kv-head) indexes built over a cached prefix for requests to share.");
  out += "pig_shared_index_builds_total " + Num(shared_index_builds) + "\n";
  Head(out, "pig_shared_index_hits_total", "counter",
       "(layer, kv-head) indexes a request stood on instead of building them.");
  out += "pig_shared_index_hits_total " + Num(shared_index_hits) + "\n";
  Head(out, "pig_engine_steps_total", "counter", "Forward passes of the scheduler.");
  out += "pig_engine_steps_total " + Num(steps) + "\n";
  Head(out, "pig_engine_step_seconds_total", "counter", "Time spent in scheduler steps.");
  out += "pig_engine_step_seconds_total " + Num(step_seconds) + "\n";
  Head(out, "pig_engine_decode_pass_seconds", "histogram",
       "The decode rows' forward pass of a step, by the number of rows in it.");
  for (const auto &[rows, h] : decode_pass)
    h.Render(out, "pig_engine_decode_pass_seconds", Label("rows", std::to_string(rows)));
  return out;
}

} // namespace pig::serve
