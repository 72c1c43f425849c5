// Next-token choice: greedy (temperature 0) or seeded temperature + top-p (nucleus) sampling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace pig::runtime {

struct SamplingParams {
  float temperature = 0.0f; // <= 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 0;
};

class Sampler {
public:
  explicit Sampler(const SamplingParams &p) : p_(p), rng_(p.seed) {}
  int32_t Sample(const float *logits, size_t n);

private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> probs_;
};

int32_t ArgMax(const float *x, size_t n);

} // namespace pig::runtime
