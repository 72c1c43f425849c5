#include "pig/reference/lsh.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>

namespace pig::ref {

namespace {

void require_in(const char *name, int value, int lo, int hi) {
  if (value < lo || value > hi)
    throw std::invalid_argument(std::string("LSH ") + name + " must be in [" + std::to_string(lo) +
                                ", " + std::to_string(hi) + "], got " + std::to_string(value));
}

void check_projection(std::size_t d, Matrix W, const LshConfig &cfg) {
  cfg.validate();
  if (W.rows != d || W.cols < cfg.columns())
    throw std::invalid_argument("LSH: W is " + std::to_string(W.rows) + " x " +
                                std::to_string(W.cols) + " but needs " + std::to_string(d) +
                                " rows and at least K*L = " + std::to_string(cfg.columns()) +
                                " columns");
}

// Codes of one vector. The projections onto all K*L columns are accumulated row by row of W
// (W is row-major), one independent double accumulator per column: the same sums, in the same
// order, as K*L separate dot products, but a loop the compiler can vectorise.
void encode_into(const float *x, std::size_t d, Matrix W, const LshConfig &cfg,
                 std::vector<double> &proj, std::uint16_t *codes) {
  const std::size_t columns = cfg.columns();
  std::fill(proj.begin(), proj.end(), 0.0);
  for (std::size_t r = 0; r < d; ++r) {
    const double xr = x[r];
    const float *w = W.row(r);
    for (std::size_t c = 0; c < columns; ++c)
      proj[c] += xr * double(w[c]);
  }
  for (int l = 0; l < cfg.L; ++l) {
    unsigned code = 0;
    for (int j = 0; j < cfg.K; ++j)
      if (proj[std::size_t(l) * std::size_t(cfg.K) + std::size_t(j)] > 0.0)
        code |= 1u << j;
    codes[l] = std::uint16_t(code);
  }
}

} // namespace

void LshConfig::validate() const {
  require_in("K", K, 1, kMaxK);
  require_in("L", L, 1, kMaxL);
  require_in("t", t, 1, L);
  require_in("r", r, 0, std::min(kMaxR, K - 1));
}

std::size_t mean_count(std::size_t indexed, std::size_t after_sink, std::size_t mean_window) {
  return mean_window == 0 ? indexed : std::min(after_sink, mean_window);
}

std::vector<float> mean_of_rows(Matrix X, std::size_t begin, std::size_t end) {
  if (begin >= end || end > X.rows)
    throw std::invalid_argument("mean_of_rows: range [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") is empty or exceeds " +
                                std::to_string(X.rows) + " rows");
  std::vector<double> acc(X.cols, 0.0);
  for (std::size_t i = begin; i < end; ++i)
    for (std::size_t j = 0; j < X.cols; ++j)
      acc[j] += double(X.row(i)[j]);
  std::vector<float> mean(X.cols);
  for (std::size_t j = 0; j < X.cols; ++j)
    mean[j] = float(acc[j] / double(end - begin));
  return mean;
}

Centered center(Matrix K, std::size_t begin, std::size_t end) {
  Centered c{mean_of_rows(K, begin, end), OwnedMatrix(K.rows, K.cols)};
  for (std::size_t i = 0; i < K.rows; ++i)
    for (std::size_t j = 0; j < K.cols; ++j)
      c.keys.at(i, j) = K.row(i)[j] - c.mean[j];
  return c;
}

Centered center(Matrix K) { return center(K, 0, K.rows); }

std::vector<std::uint16_t> encode(std::span<const float> x, Matrix W, const LshConfig &cfg) {
  return encode_rows(Matrix{x.data(), 1, x.size()}, W, cfg);
}

std::vector<std::uint16_t> encode_rows(Matrix X, Matrix W, const LshConfig &cfg) {
  check_projection(X.cols, W, cfg);
  std::vector<std::uint16_t> codes(X.rows * std::size_t(cfg.L));
  std::vector<double> proj(cfg.columns());
  for (std::size_t i = 0; i < X.rows; ++i)
    encode_into(X.row(i), X.cols, W, cfg, proj, codes.data() + i * std::size_t(cfg.L));
  return codes;
}

int count_collisions(std::span<const std::uint16_t> a, std::span<const std::uint16_t> b, int r) {
  if (a.size() != b.size())
    throw std::invalid_argument("count_collisions: " + std::to_string(a.size()) + " and " +
                                std::to_string(b.size()) + " codes");
  int hits = 0;
  for (std::size_t l = 0; l < a.size(); ++l)
    hits += std::popcount(unsigned(a[l] ^ b[l])) <= r;
  return hits;
}

std::vector<std::size_t> sample_set(std::span<const std::uint16_t> query_codes,
                                    std::span<const std::uint16_t> key_codes, const LshConfig &cfg,
                                    std::size_t begin, std::size_t end) {
  cfg.validate();
  const std::size_t L = std::size_t(cfg.L);
  if (query_codes.size() != L || key_codes.size() % L != 0 || begin > end ||
      end > key_codes.size() / L)
    throw std::invalid_argument("sample_set: " + std::to_string(query_codes.size()) +
                                " query codes, " + std::to_string(key_codes.size()) +
                                " key codes and range [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") do not fit L = " + std::to_string(L));
  std::vector<std::size_t> sample;
  for (std::size_t i = begin; i < end; ++i)
    if (count_collisions(query_codes, key_codes.subspan(i * L, L), cfg.r) >= cfg.t)
      sample.push_back(i);
  return sample;
}

double cosine(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size())
    throw std::invalid_argument("cosine: sizes " + std::to_string(a.size()) + " and " +
                                std::to_string(b.size()) + " differ");
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (std::size_t j = 0; j < a.size(); ++j) {
    ab += double(a[j]) * double(b[j]);
    aa += double(a[j]) * double(a[j]);
    bb += double(b[j]) * double(b[j]);
  }
  if (aa == 0.0 || bb == 0.0)
    return 0.0;
  // One rounded sqrt of the product (exact for parallel vectors with simple entries, where two
  // separate roots would round cos off +-1). No overflow or underflow: the inputs are floats,
  // so aa * bb lies within [1e-180, 1e157 * d^2] in double.
  return ab / std::sqrt(aa * bb);
}

// Probability that one random hyperplane puts both vectors on the same side: 1 - theta / pi.
// Rounding can push a cosine just past +-1, where acos is NaN: clamp first. NaN stays NaN.
static double bit_collision_probability(double cos_theta) {
  if (std::isnan(cos_theta))
    return cos_theta;
  return 1.0 - std::acos(std::clamp(cos_theta, -1.0, 1.0)) / std::numbers::pi;
}

namespace {

double log_sum_exp(const std::vector<double> &terms) {
  const double m = *std::max_element(terms.begin(), terms.end());
  if (m == -std::numeric_limits<double>::infinity())
    return m;
  double sum = 0.0;
  for (double x : terms)
    sum += std::exp(x - m);
  return m + std::log(sum);
}

// log q_r and log(1 - q_r) for 0 < p < 1, r >= 1: the binomial terms of Hamming distance i,
// log C(K, i) + (K - i) log p + i log(1 - p), summed on each side of r (both sums of positive
// terms: no cancellation when q_r is close to 1 or to 0).
void log_table_probability(double p, int K, int r, double &log_q, double &log_1mq) {
  std::vector<double> in, out;
  double logC = 0.0; // log C(K, 0)
  for (int i = 0; i <= K; ++i) {
    (i <= r ? in : out).push_back(logC + (K - i) * std::log(p) + i * std::log1p(-p));
    if (i < K)
      logC += std::log(double(K - i)) - std::log(double(i + 1));
  }
  log_q = log_sum_exp(in);
  log_1mq = log_sum_exp(out);
}

} // namespace

double table_collision_probability(double cos_theta, int K, int r) {
  require_in("K", K, 1, kMaxK);
  require_in("r", r, 0, std::min(kMaxR, K - 1));
  const double p = bit_collision_probability(cos_theta);
  if (r == 0 || std::isnan(p) || p <= 0.0 || p >= 1.0)
    return std::pow(p, K); // at p = 0 or 1 every probe radius below K gives p^K
  double log_q, log_1mq;
  log_table_probability(p, K, r, log_q, log_1mq);
  return std::exp(log_q);
}

double log_collision_probability(double cos_theta, int K, int L, int t, int r) {
  LshConfig{K, L, t, 0, r}.validate();
  const double p = bit_collision_probability(cos_theta);
  if (std::isnan(p))
    return p;
  if (p <= 0.0)
    return -std::numeric_limits<double>::infinity();
  if (p >= 1.0)
    return 0.0;
  // log of each binomial term: log C(L, i) + i log P + (L - i) log(1 - P). Both sides of the
  // threshold are sums of positive terms, accurate to a few ulps; the smaller side decides:
  // u = tail when u is small (no cancellation in 1 - head, which is where the textbook formula
  // fails), u = 1 - head via log1p when u is close to 1. Log-sum-exp keeps everything finite
  // where the terms underflow. log C(L, i) by the recurrence C(L, i+1) = C(L, i) (L-i) / (i+1).
  // log P = K log p, so P = p^K may underflow without losing log u.
  double logP = K * std::log(p);
  double log1mP = std::log1p(-std::exp(logP));
  if (r > 0) // the Hamming ball's probability q_r in place of p^K (ALGORITHM.md section 5)
    log_table_probability(p, K, r, logP, log1mP);
  std::vector<double> head, tail;
  double logC = 0.0; // log C(L, 0)
  for (int i = 0; i <= L; ++i) {
    (i < t ? head : tail).push_back(logC + i * logP + (L - i) * log1mP);
    if (i < L)
      logC += std::log(double(L - i)) - std::log(double(i + 1));
  }
  const double log_head = log_sum_exp(head); // t >= 1, so head is never empty
  if (log_head < -std::numbers::ln2)         // head < 1/2: u > 1/2
    return std::log1p(-std::exp(log_head));
  return std::min(0.0, log_sum_exp(tail)); // tail has L - t + 1 >= 1 terms
}

double collision_probability(double cos_theta, int K, int L, int t, int r) {
  return std::exp(log_collision_probability(cos_theta, K, L, t, r));
}

} // namespace pig::ref
