// Test data shared by the CUDA math (host) and kernel (device) tests: synthetic attention
// problems from pig::ref, their bf16 roundings and helpers to run the reference on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pig/cuda/lsh_math.h"
#include "pig/reference/reference.h"

namespace pig::cuda::testing {

/// One configuration of the manifest shapes (plus odd ones to exercise the generic paths).
struct Shape {
  int K, L, d;
};

/// Keys / values with `kv_heads` heads of n tokens: head h is synthetic_problem(seed + h).
struct Problem {
  int heads = 0, kv_heads = 0, d = 0;
  std::size_t n = 0;
  std::vector<float> q, k, v; ///< heads x d, kv_heads x n x d, kv_heads x n x d
};

inline Problem make_problem(int heads, int kv_heads, std::size_t n, int d, std::uint64_t seed) {
  Problem p{heads, kv_heads, d, n, {}, {}, {}};
  for (int h = 0; h < kv_heads; ++h) {
    ref::SyntheticConfig cfg;
    cfg.n = n;
    cfg.d = std::size_t(d);
    cfg.seed = seed + std::uint64_t(h);
    ref::AttentionProblem ap = ref::synthetic_problem(cfg);
    p.k.insert(p.k.end(), ap.K.data.begin(), ap.K.data.end());
    p.v.insert(p.v.end(), ap.V.data.begin(), ap.V.data.end());
    for (int g = 0; g < heads / kv_heads; ++g) // queries of one group: perturbed copies
      for (int c = 0; c < d; ++c)
        p.q.push_back(ap.q[std::size_t(c)] * (1.0f + 0.05f * float(g)));
  }
  return p;
}

/// Rounds every value to bf16 (in place, as floats) and returns the raw bf16 bits.
inline std::vector<bf16> round_to_bf16(std::vector<float> &values) {
  std::vector<bf16> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    out[i] = to_bf16(values[i]);
    values[i] = to_float(out[i]);
  }
  return out;
}

inline ref::Matrix head_matrix(const std::vector<float> &kv, int head, std::size_t n, int d) {
  return {kv.data() + std::size_t(head) * n * std::size_t(d), n, std::size_t(d)};
}

/// Stable counting sort of token-major codes per table: what the index kernel must produce.
struct HostIndex {
  std::vector<std::int32_t> offsets, ids;
};
inline HostIndex host_index(const std::vector<std::uint16_t> &codes, std::size_t count, int K,
                            int L, std::int32_t id_base) {
  const std::size_t buckets = std::size_t(1) << K;
  HostIndex index{std::vector<std::int32_t>(std::size_t(L) * (buckets + 1), 0),
                  std::vector<std::int32_t>(std::size_t(L) * count)};
  for (int l = 0; l < L; ++l) {
    std::int32_t *off = index.offsets.data() + std::size_t(l) * (buckets + 1);
    for (std::size_t i = 0; i < count; ++i)
      ++off[codes[i * std::size_t(L) + std::size_t(l)] + 1];
    for (std::size_t b = 1; b <= buckets; ++b)
      off[b] += off[b - 1];
    std::vector<std::int32_t> cursor(off, off + buckets);
    for (std::size_t i = 0; i < count; ++i)
      index.ids[std::size_t(l) * count +
                std::size_t(cursor[codes[i * std::size_t(L) + std::size_t(l)]]++)] =
          id_base + std::int32_t(i);
  }
  return index;
}

} // namespace pig::cuda::testing
