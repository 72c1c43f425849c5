#include "pig/runtime/sampler.h"

#include <algorithm>
#include <cmath>

namespace pig::runtime {

int32_t ArgMax(const float *x, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    if (x[i] > x[best])
      best = i;
  }
  return int32_t(best);
}

int32_t Sampler::Sample(const float *logits, size_t n) {
  if (p_.temperature <= 0.0f)
    return ArgMax(logits, n);
  const float mx = logits[ArgMax(logits, n)];
  probs_.resize(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const float e = std::exp((logits[i] - mx) / p_.temperature);
    probs_[i] = {e, int32_t(i)};
    sum += e;
  }
  // Nucleus: the smallest set of most likely tokens whose mass reaches top_p.
  std::sort(probs_.begin(), probs_.end(), [](const auto &a, const auto &b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  const double target = std::clamp<double>(p_.top_p, 0.0, 1.0) * sum;
  size_t keep = 0;
  double kept = 0;
  while (keep < n && (keep == 0 || kept < target))
    kept += probs_[keep++].first;
  const double u = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[i].first;
    if (u < acc)
      return probs_[i].second;
  }
  return probs_[keep - 1].second;
}

} // namespace pig::runtime
