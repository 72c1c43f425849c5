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
  // A series without labels.
  auto scalar = [&](const char *name, const char *type, const char *help, auto value) {
    Head(out, name, type, help);
    out += std::string(name) + " " + Num(value) + "\n";
  };
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
  scalar("pig_memory_budget_bytes", "gauge", "The admission budget (--memory-budget).",
         memory_budget);
  scalar("pig_memory_reserved_bytes", "gauge",
         "Bytes reserved by admitted requests (KV and index at full capacity).", memory_reserved);
  scalar("pig_kv_resident_bytes", "gauge",
         "Bytes of the KV block pools the system has given: the most blocks held at once (blocks "
         "freed by finished requests are reused, not returned).",
         kv_resident);
  scalar("pig_prefix_cache_lookups_total", "counter",
         "Admitted requests that looked their prompt up in the prefix cache.", prefix_lookups);
  scalar("pig_prefix_cache_hits_total", "counter",
         "Lookups that found at least one cached block of the prompt.", prefix_hits);
  scalar("pig_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose KV came from the prefix cache instead of prefill.",
         prefix_hit_tokens);
  scalar("pig_prefix_cache_evictions_total", "counter",
         "Cached blocks evicted (least recently used, held by no request) for memory.",
         prefix_evictions);
  scalar("pig_prefix_cache_bytes", "gauge",
         "KV bytes the prefix cache holds (each block once, however many requests share it).",
         prefix_bytes);
  scalar("pig_prefix_cache_disk_reads_total", "counter",
         "Cached blocks read back from the disk tier (--cache-dir).", prefix_disk_reads);
  scalar("pig_prefix_cache_disk_writes_total", "counter", "Blocks written to the disk tier.",
         prefix_disk_writes);
  scalar("pig_prefix_cache_disk_rejected_total", "counter",
         "Disk tier files refused: truncated, corrupt, another model's or another version's.",
         prefix_disk_rejected);
  scalar("pig_prefix_cache_disk_bytes", "gauge", "Bytes of the disk tier's files.",
         prefix_disk_bytes);
  scalar("pig_shared_index_bytes", "gauge",
         "LSH index bytes over cached prefixes that requests stand on (each once; not in "
         "pig_index_bytes).",
         shared_index_bytes);
  scalar("pig_shared_index_builds_total", "counter",
         "(layer, kv-head) indexes built over a cached prefix for requests to share.",
         shared_index_builds);
  scalar("pig_shared_index_hits_total", "counter",
         "(layer, kv-head) indexes a request stood on instead of building them.",
         shared_index_hits);
  scalar("pig_shared_index_disk_reads_total", "counter",
         "(layer, kv-head) indexes read back from the disk tier (--cache-dir) instead of built.",
         shared_index_disk_reads);
  scalar("pig_shared_index_disk_writes_total", "counter",
         "(layer, kv-head) indexes written to the disk tier.", shared_index_disk_writes);
  scalar("pig_shared_index_disk_rejected_total", "counter",
         "Index files refused: truncated, corrupt, another model's or another version's.",
         shared_index_disk_rejected);
  scalar("pig_engine_steps_total", "counter", "Forward passes of the scheduler.", steps);
  scalar("pig_engine_step_seconds_total", "counter", "Time spent in scheduler steps.",
         step_seconds);
  Head(out, "pig_engine_decode_pass_seconds", "histogram",
       "The decode rows' forward pass of a step, by the number of rows in it.");
  for (const auto &[rows, h] : decode_pass)
    h.Render(out, "pig_engine_decode_pass_seconds", Label("rows", std::to_string(rows)));
  return out;
}

} // namespace pig::serve
