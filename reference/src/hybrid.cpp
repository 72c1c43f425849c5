#include "pig/reference/hybrid.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "pig/reference/lsh.h"
#include "pig/reference/random.h"

namespace pig::ref {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double norm(std::span<const float> x) {
  double s = 0;
  for (float v : x)
    s += double(v) * double(v);
  return std::sqrt(s);
}

double dot(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += double(a[i]) * double(b[i]);
  return s;
}

} // namespace

HybridLowRank HybridLowRank::fit(Matrix centered_keys, int dims) {
  if (dims < 1 || std::size_t(dims) > centered_keys.cols)
    throw std::invalid_argument("lsh-hybrid: dims=" + std::to_string(dims) + " but the keys have " +
                                std::to_string(centered_keys.cols) + " dimensions");
  if (centered_keys.rows == 0)
    throw std::invalid_argument("lsh-hybrid: the lowrank ranker needs indexed keys to fit");
  TransformSpec ts;
  ts.linear = TransformSpec::Linear::pca;
  ts.rank = std::size_t(dims);
  return HybridLowRank{fit_transform(centered_keys, ts)};
}

namespace {
// Each component rounded to [-top, top] with one scale (max |x_j| / top).
HybridLowRank::Key round_to(const std::vector<float> &k, int top) {
  HybridLowRank::Key out;
  out.x.assign(k.size(), 0);
  float m = 0;
  for (float x : k) {
    if (!std::isfinite(x)) { // NaN or inf: the score becomes NaN, ranked -inf
      out.scale = std::numeric_limits<float>::quiet_NaN();
      return out;
    }
    m = std::max(m, std::fabs(x));
  }
  if (m == 0)
    return out;
  out.scale = m / float(top);
  for (std::size_t j = 0; j < k.size(); ++j)
    out.x[j] =
        std::int8_t(std::clamp<long>(std::lround(double(k[j]) / double(out.scale)), -top, top));
  return out;
}
} // namespace

HybridLowRank::Key HybridLowRank::key(std::span<const float> centered, int kbits) const {
  return round_to(transform.key(centered), kbits == 4 ? 7 : 127);
}

HybridLowRank::Key HybridLowRank::round_key(const std::vector<float> &k, int kbits) {
  return round_to(k, kbits == 4 ? 7 : 127);
}

HybridLowRank::Key HybridLowRank::query8(std::span<const float> q_mapped) {
  return round_to(std::vector<float>(q_mapped.begin(), q_mapped.end()), 127);
}

double HybridLowRank::dot8(const Key &q, const Key &k) {
  std::int64_t acc = 0;
  for (std::size_t j = 0; j < k.x.size(); ++j)
    acc += std::int64_t(q.x[j]) * std::int64_t(k.x[j]);
  return double(q.scale) * double(k.scale) * double(acc);
}

double HybridLowRank::dot(std::span<const float> q_mapped, const Key &k) {
  double acc = 0;
  for (std::size_t j = 0; j < k.x.size(); ++j)
    acc += double(q_mapped[j]) * double(k.x[j]);
  return acc * double(k.scale);
}

std::vector<double> hybrid_scores(std::span<const float> q, Matrix V, Matrix W,
                                  const LshIndex &index, const HybridConfig &cfg,
                                  std::optional<double> scale) {
  const TokenSplit &split = index.split;
  const std::size_t count = split.indexed();
  std::vector<double> score(count, -kInf);
  if (count == 0)
    return score;
  if (cfg.value_norm && V.rows != split.n)
    throw std::invalid_argument("hybrid_scores: " + std::to_string(V.rows) + " value rows for " +
                                std::to_string(split.n) + " tokens");
  const std::vector<float> qh = index.transform.spec.identity()
                                    ? std::vector<float>(q.begin(), q.end())
                                    : index.transform.query(q);
  const std::vector<std::uint16_t> qc = encode(qh, W, index.cfg);
  const int K = index.cfg.K, L = index.cfg.L;
  const double sc = scale.value_or(default_scale(q.size())), s = sc * norm(qh);
  const int bits = cfg.bits > 0 ? cfg.bits : K * L;
  if (bits > K * L)
    throw std::invalid_argument("lsh-hybrid: bits=" + std::to_string(bits) + " but the index has " +
                                std::to_string(K * L) + " (K L)");
  if (cfg.candidates > L)
    throw std::invalid_argument("lsh-hybrid: cand=" + std::to_string(cfg.candidates) +
                                " but the index has L = " + std::to_string(L) + " tables");
  if (cfg.prefilter > 0 && cfg.prebits > K * L)
    throw std::invalid_argument("lsh-hybrid: prebits=" + std::to_string(cfg.prebits) +
                                " but the index has " + std::to_string(K * L) + " (K L)");
  // The cascade's coarse ranker: step 1's score over the first prebits columns, for every token;
  // the best `prefilter` share of them is scored below with every column, the rest keep it.
  std::vector<char> kept;
  std::vector<double> coarse_of; // the coarse score of every token
  if (cfg.prefilter > 0) {
    std::vector<std::pair<double, std::size_t>> coarse(count);
    // The key norm of the coarse score: each token's (prenorm=1), or their mean, so that the
    // coarse score is a function of the coarse distance alone (a kernel can then handle the
    // tokens below the cut per distance, not per token).
    // (The sum in position order, then one division: a kernel keeps the running sum.)
    double mean_norm = 0;
    if (!cfg.prenorm) {
      for (std::size_t i = 0; i < count; ++i)
        mean_norm += norm(index.hashed_key(split.indexed_begin + i));
      mean_norm /= double(count);
    }
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint16_t *codes = index.codes.data() + i * std::size_t(L);
      const int H = hybrid_hamming(cfg.prebits, K, codes, qc.data());
      const double kn = cfg.prenorm ? norm(index.hashed_key(split.indexed_begin + i)) : mean_norm;
      double x = s * kn * hamming_cosine(H, cfg.prebits);
      if (cfg.value_norm)
        x += std::log(norm(V.row_span(split.indexed_begin + i)));
      coarse[i] = {std::isnan(x) ? -kInf : x, i};
    }
    const std::size_t m =
        std::clamp<std::size_t>(std::size_t(std::llround(cfg.prefilter * double(count))), 1, count);
    // Score descending, position ascending: a total order, so the kept set is unique.
    std::nth_element(coarse.begin(), coarse.begin() + std::ptrdiff_t(m - 1), coarse.end(),
                     [](const auto &a, const auto &b) {
                       return a.first != b.first ? a.first > b.first : a.second < b.second;
                     });
    coarse_of.resize(count);
    for (const auto &[x, i] : coarse)
      coarse_of[i] = x;
    kept.assign(count, 0);
    for (std::size_t j = 0; j < m; ++j)
      kept[coarse[j].second] = 1;
  }
  std::optional<HybridLowRank> low;
  std::vector<float> qp;
  HybridLowRank::Key q8;
  const int kbits = cfg.effective_kbits();
  if (cfg.rank == HybridRank::lowrank) {
    low = HybridLowRank::fit(index.centered, cfg.dims);
    qp = low->transform.query(q);
    if (kbits == 4)
      q8 = HybridLowRank::query8(qp);
  }
  if (cfg.rank == HybridRank::quant)
    q8 = HybridLowRank::query8(qh);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint16_t *codes = index.codes.data() + i * std::size_t(L);
    if (cfg.candidates > 0 && hybrid_collisions(L, codes, qc.data()) < cfg.candidates)
      continue; // not retrieved: unscored
    if (!kept.empty() && !kept[i]) {
      score[i] = coarse_of[i]; // below the coarse ranker's cut: its coarse score
      continue;
    }
    if (low) {
      const HybridLowRank::Key k = low->key(index.centered_key(split.indexed_begin + i), kbits);
      score[i] = sc * (kbits == 4 ? HybridLowRank::dot8(q8, k) : low->dot(qp, k));
    } else if (cfg.rank == HybridRank::quant) {
      const std::span<const float> kc = index.centered_key(split.indexed_begin + i);
      const HybridLowRank::Key k =
          HybridLowRank::round_key(std::vector<float>(kc.begin(), kc.end()), kbits);
      score[i] = sc * HybridLowRank::dot8(q8, k);
    } else {
      const double cos_hat = hybrid_cosine(cfg.rank, cfg.bits, K, L, codes, qc.data());
      score[i] = s * norm(index.hashed_key(split.indexed_begin + i)) * cos_hat;
    }
    if (cfg.value_norm)
      score[i] += std::log(norm(V.row_span(split.indexed_begin + i)));
    if (std::isnan(score[i]))
      score[i] = -kInf;
  }
  return score;
}

SplitInclusion inclusion_probabilities(std::span<const double> scores, std::size_t unscored,
                                       double budget, double floor) {
  const std::size_t ns = scores.size(), n = ns + unscored;
  if (!(budget >= 0) || !(floor > 0 && floor <= 1))
    throw std::invalid_argument("inclusion_probabilities: budget " + std::to_string(budget) +
                                ", floor " + std::to_string(floor));
  SplitInclusion out;
  if (n == 0)
    return out;
  const double B = std::min(budget, double(n));
  if (B >= double(n)) {
    out.pi.assign(ns, 1.0);
    out.pi_unscored = 1.0;
    return out;
  }
  double m = -kInf;
  for (double x : scores)
    if (!std::isnan(x))
      m = std::max(m, x);
  // r: the softmax of the scores (uniform when nothing is scored), then the floor.
  std::vector<double> r(ns);
  double z = 0;
  for (std::size_t i = 0; i < ns; ++i) {
    r[i] =
        (std::isnan(scores[i]) || m == -kInf) ? (m == -kInf ? 1.0 : 0.0) : std::exp(scores[i] - m);
    z += r[i];
  }
  double ru = m == -kInf ? 1.0 : 0.0;
  z += double(unscored) * ru; // 0, or (every r being 1) an exact integer sum
  for (double &x : r)
    x = (1.0 - floor) * x / z + floor / double(n);
  ru = (1.0 - floor) * ru / z + floor / double(n);
  // Water-filling without a sort: cap the tokens that reach 1 at the current lambda, set lambda
  // so that the others make up the rest, repeat. lambda only grows and the capped set with it, so
  // this ends (usually after 2-3 passes) with sum min(1, lambda r_i) = B and every uncapped
  // lambda r_i < 1: the water-filling solution, in O(n) per pass (O(scored) with `unscored`).
  std::vector<bool> capped(ns, false);
  bool ucapped = unscored == 0;
  std::size_t ncapped = 0;
  double lambda = B;
  for (;;) {
    double rest = 0;
    for (std::size_t i = 0; i < ns; ++i)
      if (!capped[i])
        rest += r[i];
    if (!ucapped)
      rest += double(unscored) * ru;
    lambda = (B - double(ncapped)) / rest;
    std::size_t more = 0;
    for (std::size_t i = 0; i < ns; ++i)
      if (!capped[i] && lambda * r[i] >= 1.0) {
        capped[i] = true;
        ++more;
      }
    if (!ucapped && lambda * ru >= 1.0) {
      ucapped = true;
      more += unscored;
    }
    if (more == 0)
      break;
    ncapped += more;
  }
  out.pi.resize(ns);
  for (std::size_t i = 0; i < ns; ++i)
    out.pi[i] = std::min(1.0, lambda * r[i]);
  out.pi_unscored = std::min(1.0, lambda * ru);
  return out;
}

std::vector<double> inclusion_probabilities(std::span<const double> scores, double budget,
                                            double floor) {
  std::vector<double> scored;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < scores.size(); ++i)
    if (!std::isnan(scores[i]) && scores[i] != -kInf) {
      scored.push_back(scores[i]);
      at.push_back(i);
    }
  const SplitInclusion s =
      inclusion_probabilities(scored, scores.size() - scored.size(), budget, floor);
  if (scores.empty())
    return {};
  std::vector<double> pi(scores.size(), s.pi_unscored);
  for (std::size_t j = 0; j < at.size(); ++j)
    pi[at[j]] = s.pi[j];
  return pi;
}

double hybrid_error_quantile(double delta) {
  // erfc(z / sqrt 2) = delta by bisection (erfc is decreasing).
  double lo = 0, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (std::erfc(mid / std::numbers::sqrt2) > delta ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double hybrid_uniform(std::uint64_t seed, std::size_t token) {
  std::uint64_t state = seed ^ (0x9E3779B97F4A7C15ull * (std::uint64_t(token) + 1));
  splitmix64(state);
  return double(splitmix64(state) >> 11) * 0x1.0p-53;
}

std::vector<std::size_t> hybrid_skip_draw(std::uint64_t seed, std::size_t n, double p) {
  std::vector<std::size_t> out;
  if (!(p > 0) || n == 0)
    return out;
  if (p >= 1) {
    out.resize(n);
    std::iota(out.begin(), out.end(), std::size_t(0));
    return out;
  }
  // P(gap >= g) = P(U <= (1 - p)^g) = (1 - p)^g: the gaps of a Bernoulli(p) process.
  const double log_q = std::log1p(-p);
  double next = -1; // the last drawn position, as a double (gaps can exceed any size_t)
  for (std::uint64_t k = 0;; ++k) {
    const double u = hybrid_uniform(seed ^ kHybridSkipStream, k);
    next += 1.0 + std::floor(std::log(u) / log_q); // u = 0: +inf, the end
    if (!(next < double(n)))
      break;
    out.push_back(std::size_t(next));
  }
  return out;
}

int hybrid_collisions(int L, const std::uint16_t *codes, const std::uint16_t *query_codes) {
  int c = 0;
  for (int l = 0; l < L; ++l)
    c += codes[l] == query_codes[l];
  return c;
}

int hybrid_hamming(int bits, int K, const std::uint16_t *codes, const std::uint16_t *query_codes) {
  const int full_tables = bits / K, rest_bits = bits % K;
  int h = 0, l = 0;
  // Four codes at a time: a 64-bit popcount is the sum of its four 16-bit lanes' popcounts.
  for (; l + 4 <= full_tables; l += 4) {
    std::uint64_t a, b;
    std::memcpy(&a, codes + l, 8);
    std::memcpy(&b, query_codes + l, 8);
    h += std::popcount(a ^ b);
  }
  for (; l < full_tables; ++l)
    h += std::popcount(unsigned(codes[l] ^ query_codes[l]));
  if (rest_bits)
    h += std::popcount(unsigned(codes[full_tables] ^ query_codes[full_tables]) &
                       ((1u << rest_bits) - 1));
  return h;
}

double hybrid_cosine(HybridRank rank, int bits, int K, int L, const std::uint16_t *codes,
                     const std::uint16_t *query_codes) {
  if (rank == HybridRank::collisions) {
    const int c = hybrid_collisions(L, codes, query_codes);
    const double p = std::pow((c + 0.5) / (L + 1.0), 1.0 / K);
    return std::cos(std::numbers::pi * (1.0 - p));
  }
  const int B = bits > 0 ? bits : K * L;
  return hamming_cosine(hybrid_hamming(B, K, codes, query_codes), B);
}

HybridResult hybrid_estimate(std::span<const double> score, const HybridTokens &t,
                             const HybridConfig &cfg) {
  cfg.validate();
  const std::size_t N = score.size();
  HybridResult r;
  r.indexed = N;
  r.static_tokens = t.static_ids.size();
  std::vector<std::size_t> ids(t.static_ids.begin(), t.static_ids.end());
  std::vector<double> bias(ids.size(), 0.0);
  if (N == 0) {
    r.attention = t.attend(ids, bias);
    return r;
  }

  // 1-2: rank, keep the best `head` exactly (ties: the lower position).
  const double target = cfg.budget * double(N);
  const std::size_t head =
      std::min<std::size_t>(N, std::size_t(std::llround(cfg.head_share * target)));
  std::vector<std::size_t> order(N);
  std::iota(order.begin(), order.end(), std::size_t(0));
  // The head is a set: a partition by (score desc, position asc) picks the same tokens as a
  // stable sort by score would, in O(N).
  if (head < N)
    std::nth_element(order.begin(), order.begin() + std::ptrdiff_t(head), order.end(),
                     [&](std::size_t a, std::size_t b) {
                       return score[a] != score[b] ? score[a] > score[b] : a < b;
                     });
  std::vector<bool> in_head(N, false);
  for (std::size_t j = 0; j < head; ++j)
    in_head[order[j]] = true;
  // The tail: its scored tokens (drawn one by one) and its unscored ones (score -inf or NaN, one
  // shared pi, drawn by skips over the indexed positions).
  std::vector<std::size_t> tail_ids; // index-relative, ascending
  std::vector<double> tail_score;
  std::vector<bool> unscored_tail(N, false);
  std::size_t n_unscored = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const bool scored = !std::isnan(score[i]) && score[i] != -kInf;
    r.scored += scored;
    if (in_head[i])
      r.head.push_back(t.indexed_begin + i);
    else if (scored) {
      tail_ids.push_back(i);
      tail_score.push_back(score[i]);
    } else {
      unscored_tail[i] = true;
      ++n_unscored;
    }
  }
  // The cut: the tail's scored tokens below its best score - cut join the unscored ones (drawn by
  // skips), so that a sampler need visit only the tokens above it.
  if (cfg.cut > 0 && !tail_score.empty()) {
    const double best = *std::max_element(tail_score.begin(), tail_score.end());
    std::size_t kept = 0;
    for (std::size_t j = 0; j < tail_ids.size(); ++j) {
      if (tail_score[j] >= best - cfg.cut) {
        tail_ids[kept] = tail_ids[j];
        tail_score[kept++] = tail_score[j];
        continue;
      }
      unscored_tail[tail_ids[j]] = true;
      ++n_unscored;
      ++r.cut_off;
    }
    tail_ids.resize(kept);
    tail_score.resize(kept);
  }
  ids.insert(ids.end(), r.head.begin(), r.head.end());
  bias.resize(ids.size(), 0.0);

  // 3-4: the tail, growing its budget while the estimated error is above epsilon.
  const double z = hybrid_error_quantile(cfg.delta);
  const double cap = std::max(0.0, std::max(cfg.max_budget, cfg.budget) * double(N) - double(head));
  double T = std::max(0.0, target - double(head));
  if (cfg.epsilon > 0)
    T = std::min(T, cap);
  std::vector<double> U(tail_ids.size());
  for (std::size_t j = 0; j < U.size(); ++j)
    U[j] = hybrid_uniform(cfg.seed, t.indexed_begin + tail_ids[j]);
  for (;;) {
    r.tail.clear();
    r.pi.clear();
    if (T > 0) {
      const SplitInclusion pi = inclusion_probabilities(tail_score, n_unscored, T, cfg.floor);
      std::vector<std::pair<std::size_t, double>> drawn; // (index-relative, pi)
      for (std::size_t j = 0; j < tail_ids.size(); ++j)
        if (U[j] < pi.pi[j])
          drawn.emplace_back(tail_ids[j], pi.pi[j]);
      if (n_unscored > 0)
        for (std::size_t i : hybrid_skip_draw(cfg.seed, N, pi.pi_unscored))
          if (unscored_tail[i])
            drawn.emplace_back(i, pi.pi_unscored);
      std::sort(drawn.begin(), drawn.end());
      for (const auto &[i, p] : drawn) {
        r.tail.push_back(t.indexed_begin + i);
        r.pi.push_back(p);
      }
    }
    r.tail_budget = T;
    std::vector<std::size_t> all = ids;
    std::vector<double> all_bias = bias;
    for (std::size_t j = 0; j < r.tail.size(); ++j) {
      all.push_back(r.tail[j]);
      all_bias.push_back(std::log(r.pi[j]));
    }
    r.attention = t.attend(all, all_bias);
    if (cfg.epsilon <= 0)
      break; // the bound is only needed to grow the tail
    // V^ = sum_S (1 - pi)/pi^2 a_i^2 |v_i - o^|^2 with a_i = e^{l_i - lse}: then D^ = 1 and
    // the relative error bound is z sqrt(V^) / |o^|.
    double var = 0, onorm = 0;
    for (float x : r.attention.out)
      onorm += double(x) * double(x);
    onorm = std::sqrt(onorm);
    for (std::size_t j = 0; j < r.tail.size(); ++j) {
      const double a = std::exp(t.logit(r.tail[j]) - r.attention.lse);
      var +=
          (1.0 - r.pi[j]) / (r.pi[j] * r.pi[j]) * a * a * t.value_dist2(r.tail[j], r.attention.out);
    }
    r.estimated_error = r.tail.empty() ? 0.0 : z * std::sqrt(var) / onorm;
    if (!(r.estimated_error > cfg.epsilon) || T >= cap || r.tail.size() + head >= N)
      break;
    T = std::min(cap, std::max(2.0 * T, 1.0));
  }
  return r;
}

HybridResult hybrid_attention(std::span<const float> q, Matrix K, Matrix V, Matrix W,
                              const LshIndex &index, const HybridConfig &cfg,
                              std::optional<double> scale) {
  cfg.validate();
  const TokenSplit &split = index.split;
  if (split.n != K.rows || V.rows != K.rows)
    throw std::invalid_argument("hybrid_attention: index is for " + std::to_string(split.n) +
                                " tokens, keys have " + std::to_string(K.rows) + " and values " +
                                std::to_string(V.rows));
  const std::vector<double> score = hybrid_scores(q, V, W, index, cfg, scale);
  const std::vector<std::size_t> statics = split.static_ids();
  const double s = scale.value_or(default_scale(q.size()));
  HybridTokens t;
  t.static_ids = statics;
  t.indexed_begin = split.indexed_begin;
  t.attend = [&](std::span<const std::size_t> ids, std::span<const double> bias) {
    return attention_over(q, K, V, ids, bias, scale);
  };
  t.logit = [&](std::size_t token) { return s * dot(q, K.row_span(token)); };
  t.value_dist2 = [&](std::size_t token, std::span<const float> o) {
    double dv = 0;
    for (std::size_t c = 0; c < V.cols; ++c) {
      const double e = double(V.row(token)[c]) - double(o[c]);
      dv += e * e;
    }
    return dv;
  };
  return hybrid_estimate(score, t, cfg);
}

Attention hybrid_reuse(std::span<const float> q, Matrix K, Matrix V, const HybridResult &sel,
                       std::size_t sink, std::size_t indexed_end, std::optional<double> scale) {
  const std::size_t n = K.rows;
  if (V.rows != n || sink > indexed_end || indexed_end > n || sel.tail.size() != sel.pi.size())
    throw std::invalid_argument("hybrid_reuse: sink " + std::to_string(sink) + ", indexed end " +
                                std::to_string(indexed_end) + ", " + std::to_string(n) +
                                " keys and " + std::to_string(V.rows) + " values");
  std::vector<std::size_t> ids;
  std::vector<double> bias;
  auto put = [&](std::size_t token, double b) {
    if (token < sink || token >= indexed_end)
      throw std::invalid_argument("hybrid_reuse: the selection's token " + std::to_string(token) +
                                  " is outside its indexed part [" + std::to_string(sink) + ", " +
                                  std::to_string(indexed_end) + ")");
    ids.push_back(token);
    bias.push_back(b);
  };
  for (std::size_t i = 0; i < sink; ++i) {
    ids.push_back(i);
    bias.push_back(0.0);
  }
  for (std::size_t i = indexed_end; i < n; ++i) {
    ids.push_back(i);
    bias.push_back(0.0);
  }
  for (std::size_t i : sel.head)
    put(i, 0.0);
  for (std::size_t j = 0; j < sel.tail.size(); ++j)
    put(sel.tail[j], std::log(sel.pi[j]));
  return attention_over(q, K, V, ids, bias, scale);
}

} // namespace pig::ref
