// MeasuredDenseCrossover: where a magicpig decode step starts to cost less than a dense one, timed
// on this machine (AttentionSpec::dense_below = measured).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/runtime/thread_pool.h"

namespace pig::runtime {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kProbes[] = {512, 1024, 2048, 4096, 8192};
constexpr size_t kNever = 16384; // sampling was slower at every probe
constexpr size_t kSteps = 12;    // timed steps per probe and method (the median is kept)

// The median seconds of a decode step of `spec` over n synthetic positions (one layer of the
// model's kv-heads), after an untimed first step (which builds the index).
double StepSeconds(const AttentionSpec &spec, const AttentionShape &one, const KvCache &src,
                   size_t n, const std::vector<float> &rows, ThreadPool &pool) {
  const size_t row = one.n_kv_heads * one.head_dim, G = one.group();
  auto attn = MakeAttention(spec, one);
  attn->LoadPrefix(src, n);
  std::vector<float> out(one.n_heads * one.head_dim);
  std::vector<double> seconds;
  for (size_t s = 0; s <= kSteps; ++s) {
    // The step's query: its heads are keys of the prefix (a query that attends somewhere), its
    // new key and value are further rows.
    const float *q = rows.data() + ((s * 7919) % (n - G)) * row;
    const float *kv = rows.data() + ((s * 104729 + 1) % (n - 1)) * row;
    const auto t0 = Clock::now();
    attn->Forward(0, n + s, 1, q, kv, kv, out.data(), pool);
    if (s > 0)
      seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + std::ptrdiff_t(seconds.size() / 2),
                   seconds.end());
  return seconds[seconds.size() / 2];
}

size_t Measure(const AttentionSpec &spec, const AttentionShape &shape) {
  // One layer of the model's kv-heads on a pool of the machine's threads: the step's split over
  // the threads (3 kv-heads on 2) is part of what it costs.
  const size_t d = shape.head_dim, H = shape.n_kv_heads;
  const size_t most = kProbes[std::size(kProbes) - 1];
  const AttentionShape one{1, shape.n_heads, H, d, most + kSteps + 1};
  AttentionSpec lsh = spec;
  lsh.dense_below = 0;
  lsh.layers.clear();
  lsh.dense_layers.clear();
  lsh.dense_layers_set = true; // the one layer samples
  lsh.mean_window = 0;
  AttentionSpec dense;
  dense.kv_dtype = spec.kv_dtype;
  // Keys as real ones are: a large offset shared by all (what the centring mean removes) plus
  // noise; values are noise. A fixed seed: the rows never change, only the timings do.
  std::mt19937 rng(20261206);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> offset(H * d), rows(most * H * d);
  for (float &x : offset)
    x = 3.0f * normal(rng);
  for (size_t i = 0; i < most; ++i)
    for (size_t j = 0; j < H * d; ++j)
      rows[i * H * d + j] = offset[j] + normal(rng);
  KvCache src(one, spec.kv_dtype);
  src.Append(0, 0, most, rows.data(), rows.data());
  ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()));
  double prev_gap = 0;
  size_t prev_n = 0;
  for (size_t n : kProbes) {
    const double gap = StepSeconds(lsh, one, src, n, rows, pool) -
                       StepSeconds(dense, one, src, n, rows, pool); // > 0: sampling is slower
    if (gap < 0) {
      if (prev_n == 0)
        return n; // sampling pays already at the shortest probe
      // The crossing between the two probes, linear in the gap.
      const double f = prev_gap / (prev_gap - gap);
      return prev_n + size_t(std::lround(f * double(n - prev_n)));
    }
    prev_gap = gap;
    prev_n = n;
  }
  return kNever;
}

} // namespace

size_t MeasuredDenseCrossover(const AttentionSpec &spec, const AttentionShape &shape) {
  spec.Validate(shape.n_layers);
  static std::mutex mu;
  static std::map<std::string, size_t> measured;
  const std::string key = std::to_string(spec.K) + "," + std::to_string(spec.L) + "," +
                          std::to_string(spec.t) + "," + std::to_string(spec.r) + "," +
                          std::to_string(spec.sink) + "," + std::to_string(spec.local) + "," +
                          spec.transform.str() + "," + spec.schedule.str() + "," +
                          std::to_string(shape.head_dim) + "," + std::to_string(shape.n_kv_heads) +
                          "," + std::to_string(shape.group()) + "," + lsh::to_string(spec.kv_dtype);
  std::lock_guard lock(mu); // one measurement at a time: two at once would time each other
  if (const auto it = measured.find(key); it != measured.end())
    return it->second;
  const size_t n = Measure(spec, shape);
  measured.emplace(key, n);
  return n;
}

} // namespace pig::runtime
