// Per-element maths of the CUDA LSH kernels, written once for the device and the host.
//
// Every function here is `__host__ __device__` under nvcc and a plain inline function under a
// host compiler, so tests/cuda checks the exact arithmetic the kernels run against pig::ref on
// machines without a GPU. Kernels (lsh_kernels.cuh) only add the thread layout around them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define PIG_HD __host__ __device__ __forceinline__
#else
#define PIG_HD inline
#endif

namespace pig::cuda {

/// bf16 is stored as its raw 16 bits (no cuda_bf16.h, so host code can include this header).
struct bf16 {
  std::uint16_t bits;
};

PIG_HD float to_float(float x) { return x; }
PIG_HD float to_float(bf16 x) {
  // bf16 is the top half of an IEEE float: widening is exact.
  const std::uint32_t u = std::uint32_t(x.bits) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/// Round-to-nearest-even float -> bf16 (NaN stays NaN), for test data and conversions.
PIG_HD bf16 to_bf16(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return bf16{std::uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{std::uint16_t(u >> 16)};
}

// --- Centering -----------------------------------------------------------------------------

/// Mean of one column from its double sum over `count` rows, rounded to float once: the same
/// arithmetic as pig::ref::mean_of_rows (sums in double, one division, one rounding).
PIG_HD float mean_from_sum(double sum, std::int64_t count) { return float(sum / double(count)); }

/// One centered element: `k - mu` in float, as pig::ref::build_index stores centered keys.
template <typename T> PIG_HD float centered(T k, float mu) { return to_float(k) - mu; }

// --- SimHash encoding ----------------------------------------------------------------------

/// One projection `x . W[:, col]` with W row-major (d x ld). Accumulated in double in row order:
/// every float product is exact in double, so the sum is bit-identical to pig::ref::encode's
/// and the sign bit can never disagree with the reference, even for projections near zero.
/// `x` is the (already centered) row in float.
template <int kD = 0>
PIG_HD double projection(const float *x, const float *W, std::int64_t ld, std::int64_t col,
                         int d = kD) {
  const int dims = kD > 0 ? kD : d;
  double acc = 0.0;
  for (int r = 0; r < dims; ++r)
    acc += double(x[r]) * double(W[std::int64_t(r) * ld + col]);
  return acc;
}

/// Bit j of a code: the projection on column l*K + j is strictly positive (zero and NaN: 0).
PIG_HD unsigned code_bit(double projection, int j) { return projection > 0.0 ? 1u << j : 0u; }

/// The code of table `l` from the K projection signs of columns [l*K, (l+1)*K), given as bits
/// (one byte per column, 0 or 1) as the encode kernel stages them in shared memory.
template <int kK = 0> PIG_HD std::uint16_t pack_code(const std::uint8_t *bits, int l, int k = kK) {
  const int K = kK > 0 ? kK : k;
  unsigned code = 0;
  for (int j = 0; j < K; ++j)
    code |= unsigned(bits[l * K + j] != 0) << j;
  return std::uint16_t(code);
}

/// The whole code of one row in table l, for host tests and the single-row query path.
template <int kK = 0, int kD = 0>
PIG_HD std::uint16_t encode_table(const float *x, const float *W, std::int64_t ld, int l,
                                  int k = kK, int d = kD) {
  const int K = kK > 0 ? kK : k;
  unsigned code = 0;
  for (int j = 0; j < K; ++j)
    code |= code_bit(projection<kD>(x, W, ld, std::int64_t(l) * K + j, d), j);
  return std::uint16_t(code);
}

// --- Bucket index --------------------------------------------------------------------------

/// Number of buckets per table (2^K) and the length of one table's offset array (2^K + 1).
PIG_HD std::int64_t bucket_count(int k) { return std::int64_t(1) << k; }
PIG_HD std::int64_t offsets_per_table(int k) { return bucket_count(k) + 1; }

/// Stable rank of element `t` of a chunk among the earlier elements with the same bucket, and
/// whether it is the last of its bucket in the chunk (which then advances the bucket cursor).
/// The index kernel sorts one chunk of tokens per step with this: ids stay ascending inside a
/// bucket, so the index is deterministic (no atomics decide the order).
struct ChunkRank {
  int rank;
  bool last;
};
PIG_HD ChunkRank chunk_rank(const std::uint16_t *chunk, int size, int t) {
  ChunkRank r{0, true};
  for (int j = 0; j < size; ++j) {
    if (chunk[j] != chunk[t])
      continue;
    if (j < t)
      ++r.rank;
    else if (j > t)
      r.last = false;
  }
  return r;
}

// --- Attention -----------------------------------------------------------------------------

/// Token id of the i-th static token: the first `sink`, then the last `local` of n. When
/// sink + local >= n every token is static (pig::ref::split_tokens), so the i-th is i.
PIG_HD std::int64_t static_token(std::int64_t i, std::int64_t n, std::int64_t sink,
                                 std::int64_t local) {
  if (sink + local >= n || i < sink)
    return i;
  return n - local + (i - sink);
}
PIG_HD std::int64_t static_token_count(std::int64_t n, std::int64_t sink, std::int64_t local) {
  return sink + local >= n ? n : sink + local;
}

/// Running state of a streaming (online) softmax: max logit m, sum of e^(logit - m).
struct SoftmaxState {
  float m;
  float s;
};
PIG_HD SoftmaxState softmax_init() { return {-INFINITY, 0.0f}; }

/// Rescale factor for accumulators when the running max moves from `m_old` to `m_new`
/// (0 when nothing was accumulated yet, avoiding inf - inf).
PIG_HD float softmax_rescale(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}

/// Folds one logit in; returns its weight relative to the new max. The caller rescales its
/// output accumulator by `softmax_rescale(old m, new m)` first.
PIG_HD float softmax_push(SoftmaxState &st, float logit, float &rescale) {
  const float m_new = logit > st.m ? logit : st.m;
  rescale = softmax_rescale(st.m, m_new);
  const float w = expf(logit - m_new);
  st.s = st.s * rescale + w;
  st.m = m_new;
  return w;
}

/// Natural-log LSE of the state (-inf when empty), like pig::ref::Attention::lse.
PIG_HD float softmax_lse(const SoftmaxState &st) {
  return st.s > 0.0f ? st.m + logf(st.s) : -INFINITY;
}

/// Scaled logit `scale * q . k` with k in storage type T, accumulated in float.
template <int kD = 0, typename T>
PIG_HD float scaled_logit(const float *q, const T *k, float scale, int d = kD) {
  const int dims = kD > 0 ? kD : d;
  float acc = 0.0f;
  for (int r = 0; r < dims; ++r)
    acc += q[r] * to_float(k[r]);
  return acc * scale;
}

/// Exact merge of two partial results by their LSEs (ALGORITHM.md 1.7): weight of part a.
PIG_HD float merge_weight_a(float lse_a, float lse_b) {
  if (lse_a == -INFINITY)
    return 0.0f;
  if (lse_b == -INFINITY)
    return 1.0f;
  const float m = lse_a > lse_b ? lse_a : lse_b;
  const float ea = expf(lse_a - m), eb = expf(lse_b - m);
  return ea / (ea + eb);
}

/// The LSE of the merged parts: log(e^a + e^b), -inf when both are empty.
PIG_HD float merge_lse(float lse_a, float lse_b) {
  if (lse_a == -INFINITY)
    return lse_b;
  if (lse_b == -INFINITY)
    return lse_a;
  const float m = lse_a > lse_b ? lse_a : lse_b;
  return m + logf(expf(lse_a - m) + expf(lse_b - m));
}

} // namespace pig::cuda
