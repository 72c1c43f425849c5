// Exact attention and its sparse baselines (TopK, oracle sampling), one query head at a time.
//
// Conventions shared by every function in pig::ref:
// - q has d entries; K is n x d; V is n x dv (dv may differ from d). Scores are computed in
//   double from the float inputs (each product is exact), outputs are rounded to float once.
// - The scale defaults to 1/sqrt(d). Logits are `scale * q.k_i` (minus a bias where stated).
// - `lse` is the NATURAL-log log-sum-exp of the scaled logits over the attended set. (The public
//   MagicPIG kernels return base 2; a runtime converting uses lse2 = lse / ln 2.)
// - An empty attended set is represented by lse = -inf and a zero output of dv entries; merge()
//   treats it as the identity.
// - Shape errors and invalid parameters throw std::invalid_argument. Values are NOT validated:
//   NaN or inf inputs propagate through the arithmetic deterministically and never crash. A NaN
//   (or +inf) logit makes the whole output and the lse NaN; a NaN in a value row that carries
//   weight makes that output coordinate NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "pig/reference/matrix.h"

namespace pig::ref {

struct Attention {
  std::vector<float> out; ///< dv entries
  double lse = 0.0;       ///< natural-log log-sum-exp of the attended logits; -inf when empty

  static Attention empty(std::size_t dv);
  bool is_empty() const;
};

/// An estimate that read only part of the tokens. `attended` is the number of distinct tokens
/// whose key/value rows were read to form the output (the paper's Cost2 numerator) and `total`
/// the number of tokens it could have read.
struct SparseEstimate {
  Attention attention;
  std::size_t attended = 0;
  std::size_t total = 0;
  double cost() const { return total == 0 ? 0.0 : double(attended) / double(total); }
};

double default_scale(std::size_t d);

/// Scaled logits `scale * q.k_i` for every row of K, in double.
std::vector<double> logits(std::span<const float> q, Matrix K, std::optional<double> scale = {});

/// The exact softmax weights over all rows of K (sum to 1), in double.
std::vector<double> attention_weights(std::span<const float> q, Matrix K,
                                      std::optional<double> scale = {});

/// o = softmax(scale * q K^T) V over all n tokens.
Attention dense_attention(std::span<const float> q, Matrix K, Matrix V,
                          std::optional<double> scale = {});

/// Softmax attention over the listed token indices only, with logits
/// `scale * q.k_i - logit_bias[j]` for the j-th listed index i (an empty bias means zero). This
/// is the building block of every sparse method: importance weights enter as bias = log u_i.
/// Indices are used as given (a repeated index counts twice); out of range throws.
Attention attention_over(std::span<const float> q, Matrix K, Matrix V,
                         std::span<const std::size_t> indices,
                         std::span<const double> logit_bias = {}, std::optional<double> scale = {});

/// Exact merge of two attentions over disjoint token sets by their LSEs:
/// o = (e^a o_a + e^b o_b) / (e^a + e^b), lse = log(e^a + e^b). An empty part is the identity.
Attention merge(const Attention &a, const Attention &b);

/// Keep the m highest logits (ties broken by lower index), renormalise over them. m in [0, n].
SparseEstimate topk_attention(std::span<const float> q, Matrix K, Matrix V, std::size_t m,
                              std::optional<double> scale = {});

/// Oracle sampling (paper Definition 3.1): B i.i.d. draws from the exact softmax, output the mean
/// of the drawn values, o = sum_i f_i/B v_i. attended = number of unique draws (the cost that
/// Theorem 3.3 bounds: E|S| <= 1 + B(1 - max_i w_i)). The lse returned is the exact one (the
/// oracle knows every score). Deterministic for a given seed. B must be >= 1.
SparseEstimate oracle_sampling(std::span<const float> q, Matrix K, Matrix V, std::size_t B,
                               std::uint64_t seed, std::optional<double> scale = {});

/// Expected unique draws of oracle sampling, sum_i 1 - (1 - w_i)^B, for budget matching.
double expected_unique_draws(std::span<const double> weights, std::size_t B);

/// ||estimate - truth||_2 / ||truth||_2 in double. When ||truth|| == 0 it returns the absolute
/// error ||estimate||_2 instead (a relative error is undefined there). Sizes must match.
double relative_l2_error(std::span<const float> estimate, std::span<const float> truth);

/// Grouped-query attention: the kv-head read by query head `head` is head / (n_heads /
/// n_kv_heads). Throws unless n_kv_heads >= 1 divides n_heads and head < n_heads.
std::size_t kv_head_for(std::size_t head, std::size_t n_heads, std::size_t n_kv_heads);

} // namespace pig::ref
