#include "pig/reference/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "pig/reference/random.h"

namespace pig::ref {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_shapes(std::span<const float> q, Matrix K, Matrix V) {
  if (q.size() != K.cols)
    throw std::invalid_argument("attention: query has " + std::to_string(q.size()) +
                                " entries but keys have " + std::to_string(K.cols) + " columns");
  if (K.rows != V.rows)
    throw std::invalid_argument("attention: " + std::to_string(K.rows) + " keys but " +
                                std::to_string(V.rows) + " values");
  if (q.empty())
    throw std::invalid_argument("attention: head dimension must be >= 1");
}

double dot(std::span<const float> a, const float *b) {
  double s = 0.0;
  for (std::size_t j = 0; j < a.size(); ++j)
    s += double(a[j]) * double(b[j]);
  return s;
}

double resolve(std::optional<double> scale, std::size_t d) {
  return scale ? *scale : default_scale(d);
}

// Softmax over given logits of the given value rows. The max is taken over the non-NaN logits;
// a NaN logit then turns the sum, hence the lse and every weight, into NaN (documented policy).
Attention softmax_values(std::span<const double> z, std::span<const std::size_t> rows, Matrix V) {
  double m = -kInf;
  for (double x : z)
    if (x > m)
      m = x;
  Attention a = Attention::empty(V.cols);
  if (m == -kInf) {
    // No logit above -inf: the set carries no mass. Still propagate a NaN if there is one.
    for (double x : z)
      if (std::isnan(x)) {
        a.lse = x;
        std::fill(a.out.begin(), a.out.end(), std::numeric_limits<float>::quiet_NaN());
      }
    return a;
  }
  double sum = 0.0;
  for (double x : z)
    sum += std::exp(x - m);
  std::vector<double> acc(V.cols, 0.0);
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double w = std::exp(z[i] - m) / sum;
    const float *v = V.row(rows[i]);
    for (std::size_t j = 0; j < V.cols; ++j)
      acc[j] += w * double(v[j]);
  }
  for (std::size_t j = 0; j < V.cols; ++j)
    a.out[j] = float(acc[j]);
  a.lse = m + std::log(sum);
  return a;
}

} // namespace

Attention Attention::empty(std::size_t dv) {
  return Attention{std::vector<float>(dv, 0.0f), -kInf};
}

bool Attention::is_empty() const { return lse == -kInf; }

double default_scale(std::size_t d) { return 1.0 / std::sqrt(double(d)); }

std::vector<double> logits(std::span<const float> q, Matrix K, std::optional<double> scale) {
  if (q.size() != K.cols)
    throw std::invalid_argument("logits: query has " + std::to_string(q.size()) +
                                " entries but keys have " + std::to_string(K.cols) + " columns");
  const double s = resolve(scale, q.size());
  std::vector<double> z(K.rows);
  for (std::size_t i = 0; i < K.rows; ++i)
    z[i] = s * dot(q, K.row(i));
  return z;
}

std::vector<double> attention_weights(std::span<const float> q, Matrix K,
                                      std::optional<double> scale) {
  std::vector<double> w = logits(q, K, scale);
  if (w.empty())
    return w;
  const double m = *std::max_element(w.begin(), w.end());
  double sum = 0.0;
  for (double &x : w)
    sum += (x = std::exp(x - m));
  for (double &x : w)
    x /= sum;
  return w;
}

Attention dense_attention(std::span<const float> q, Matrix K, Matrix V,
                          std::optional<double> scale) {
  check_shapes(q, K, V);
  std::vector<std::size_t> all(K.rows);
  std::iota(all.begin(), all.end(), std::size_t{0});
  return attention_over(q, K, V, all, {}, scale);
}

Attention attention_over(std::span<const float> q, Matrix K, Matrix V,
                         std::span<const std::size_t> indices, std::span<const double> logit_bias,
                         std::optional<double> scale) {
  check_shapes(q, K, V);
  if (!logit_bias.empty() && logit_bias.size() != indices.size())
    throw std::invalid_argument("attention_over: " + std::to_string(logit_bias.size()) +
                                " biases for " + std::to_string(indices.size()) + " indices");
  const double s = resolve(scale, q.size());
  std::vector<double> z(indices.size());
  for (std::size_t j = 0; j < indices.size(); ++j) {
    if (indices[j] >= K.rows)
      throw std::invalid_argument("attention_over: index " + std::to_string(indices[j]) +
                                  " out of range for " + std::to_string(K.rows) + " tokens");
    z[j] = s * dot(q, K.row(indices[j])) - (logit_bias.empty() ? 0.0 : logit_bias[j]);
  }
  return softmax_values(z, indices, V);
}

Attention merge(const Attention &a, const Attention &b) {
  if (a.out.size() != b.out.size())
    throw std::invalid_argument("merge: outputs have " + std::to_string(a.out.size()) + " and " +
                                std::to_string(b.out.size()) + " entries");
  if (a.is_empty())
    return b;
  if (b.is_empty())
    return a;
  // Weights relative to the larger LSE, so neither exponential overflows.
  const double m = std::max(a.lse, b.lse);
  const double wa = std::exp(a.lse - m);
  const double wb = std::exp(b.lse - m);
  Attention r;
  r.out.resize(a.out.size());
  for (std::size_t j = 0; j < r.out.size(); ++j)
    r.out[j] = float((wa * double(a.out[j]) + wb * double(b.out[j])) / (wa + wb));
  // log(wa + wb) with one of them exactly 1: log1p of the other keeps precision.
  r.lse = m + std::log1p(std::min(wa, wb));
  if (std::isnan(a.lse) || std::isnan(b.lse))
    r.lse = std::numeric_limits<double>::quiet_NaN();
  return r;
}

SparseEstimate topk_attention(std::span<const float> q, Matrix K, Matrix V, std::size_t m,
                              std::optional<double> scale) {
  check_shapes(q, K, V);
  if (m > K.rows)
    throw std::invalid_argument("TopK m must be in [0, n = " + std::to_string(K.rows) + "], got " +
                                std::to_string(m));
  const std::vector<double> z = logits(q, K, scale);
  std::vector<std::size_t> order(K.rows);
  std::iota(order.begin(), order.end(), std::size_t{0});
  // NaN ranks above everything (so it is kept and propagates) and ties go to the lower index:
  // a strict weak order even with NaN, and a deterministic selection.
  auto rank = [&](std::size_t i) { return std::isnan(z[i]) ? kInf : z[i]; };
  std::partial_sort(
      order.begin(), order.begin() + std::ptrdiff_t(m), order.end(),
      [&](std::size_t a, std::size_t b) { return rank(a) != rank(b) ? rank(a) > rank(b) : a < b; });
  order.resize(m);
  std::sort(order.begin(), order.end());
  return {attention_over(q, K, V, order, {}, scale), m, K.rows};
}

SparseEstimate oracle_sampling(std::span<const float> q, Matrix K, Matrix V, std::size_t B,
                               std::uint64_t seed, std::optional<double> scale) {
  check_shapes(q, K, V);
  if (B == 0)
    throw std::invalid_argument("oracle sampling budget B must be >= 1, got 0");
  const std::size_t n = K.rows;
  SparseEstimate r{dense_attention(q, K, V, scale), 0, n};
  if (n == 0 || std::isnan(r.attention.lse))
    return r; // nothing to draw from, or NaN scores: the dense NaN result stands
  const std::vector<double> w = attention_weights(q, K, scale);
  // Inverse-CDF sampling on the cumulative weights; a zero-weight token has an empty interval.
  std::vector<double> cdf(n);
  std::partial_sum(w.begin(), w.end(), cdf.begin());
  std::vector<std::size_t> count(n, 0);
  Rng rng(seed);
  for (std::size_t b = 0; b < B; ++b) {
    const double x = rng.uniform() * cdf.back();
    const auto it = std::upper_bound(cdf.begin(), cdf.end(), x);
    ++count[std::min<std::size_t>(std::size_t(it - cdf.begin()), n - 1)];
  }
  std::vector<double> acc(V.cols, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (count[i] == 0)
      continue;
    ++r.attended;
    const double f = double(count[i]) / double(B);
    for (std::size_t j = 0; j < V.cols; ++j)
      acc[j] += f * double(V.row(i)[j]);
  }
  for (std::size_t j = 0; j < V.cols; ++j)
    r.attention.out[j] = float(acc[j]);
  return r;
}

double expected_unique_draws(std::span<const double> weights, std::size_t B) {
  double e = 0.0;
  for (double w : weights) // 1 - (1-w)^B, without cancellation for small w
    e += -std::expm1(double(B) * std::log1p(-w));
  return e;
}

double relative_l2_error(std::span<const float> estimate, std::span<const float> truth) {
  if (estimate.size() != truth.size())
    throw std::invalid_argument("relative_l2_error: sizes " + std::to_string(estimate.size()) +
                                " and " + std::to_string(truth.size()) + " differ");
  double num = 0.0, den = 0.0;
  for (std::size_t j = 0; j < truth.size(); ++j) {
    const double e = double(estimate[j]) - double(truth[j]);
    num += e * e;
    den += double(truth[j]) * double(truth[j]);
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

std::size_t kv_head_for(std::size_t head, std::size_t n_heads, std::size_t n_kv_heads) {
  if (n_kv_heads == 0 || n_heads % n_kv_heads != 0)
    throw std::invalid_argument("GQA: " + std::to_string(n_kv_heads) + " kv-heads must divide " +
                                std::to_string(n_heads) + " query heads");
  if (head >= n_heads)
    throw std::invalid_argument("GQA: query head " + std::to_string(head) + " out of range for " +
                                std::to_string(n_heads) + " heads");
  return head / (n_heads / n_kv_heads);
}

} // namespace pig::ref
