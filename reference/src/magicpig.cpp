#include "pig/reference/magicpig.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace pig::ref {

std::vector<std::size_t> TokenSplit::static_ids() const {
  std::vector<std::size_t> ids;
  ids.reserve(static_tokens());
  for (std::size_t i = 0; i < indexed_begin; ++i)
    ids.push_back(i);
  for (std::size_t i = indexed_end; i < n; ++i)
    ids.push_back(i);
  return ids;
}

TokenSplit split_tokens(std::size_t n, StaticConfig st) {
  if (st.sink + st.local >= n)
    return TokenSplit{n, n, n}; // everything static: exactly dense attention
  return TokenSplit{n, st.sink, n - st.local};
}

std::span<const float> LshIndex::centered_key(std::size_t token) const {
  return centered.row_span(token - split.indexed_begin);
}

std::span<const float> LshIndex::hashed_key(std::size_t token) const {
  return transform.spec.identity() ? centered_key(token)
                                   : hashed.row_span(token - split.indexed_begin);
}

LshIndex build_index(Matrix K, Matrix W, const LshConfig &cfg, StaticConfig st, Centering centering,
                     const TransformSpec &transform) {
  cfg.validate();
  transform.validate(K.cols);
  if (W.rows != transform.hashed_dim(K.cols) || W.cols < cfg.columns())
    throw std::invalid_argument(
        "build_index: W is " + std::to_string(W.rows) + " x " + std::to_string(W.cols) +
        " but keys have " + std::to_string(K.cols) + " columns, the transform " + transform.str() +
        " hashes " + std::to_string(transform.hashed_dim(K.cols)) +
        " and K*L = " + std::to_string(cfg.columns()));
  LshIndex index;
  index.cfg = cfg;
  index.split = split_tokens(K.rows, st);
  const std::size_t begin = index.split.indexed_begin;
  const std::size_t count = index.split.indexed();
  index.mean.assign(K.cols, 0.0f);
  if (count > 0 && centering == Centering::mean_of_indexed)
    index.mean = mean_of_rows(K, begin, begin + mean_count(count, K.rows - begin, st.mean_window));
  index.centered = OwnedMatrix(count, K.cols);
  for (std::size_t i = 0; i < count; ++i)
    for (std::size_t j = 0; j < K.cols; ++j)
      index.centered.at(i, j) = K.row(begin + i)[j] - index.mean[j];
  index.transform.spec = transform;
  index.transform.d = K.cols;
  index.transform.dim = transform.hashed_dim(K.cols);
  if (transform.identity() || count == 0) {
    index.codes = encode_rows(index.centered, W, cfg);
    return index;
  }
  index.transform = fit_transform(index.centered, transform);
  index.hashed = OwnedMatrix(count, index.transform.dim);
  for (std::size_t i = 0; i < count; ++i) {
    const std::vector<float> x = index.transform.key(index.centered.row_span(i));
    std::copy(x.begin(), x.end(), index.hashed.row(i));
  }
  index.codes = encode_rows(index.hashed, W, cfg);
  return index;
}

Attention static_attention(std::span<const float> q, Matrix K, Matrix V, const TokenSplit &split,
                           std::optional<double> scale) {
  if (split.n != K.rows)
    throw std::invalid_argument("static_attention: split is for " + std::to_string(split.n) +
                                " tokens, keys have " + std::to_string(K.rows));
  return attention_over(q, K, V, split.static_ids(), {}, scale);
}

SampledPart sample_tokens(std::span<const float> q, Matrix W, const LshIndex &index) {
  SampledPart part;
  const TokenSplit &split = index.split;
  if (split.indexed() == 0)
    return part;
  // The query is hashed as is (not centered): centering shifts keys, and q.(k - mu) ranks the
  // keys exactly as q.k does. With a transform, the query's map (transform.h).
  const std::vector<float> qh = index.transform.spec.identity()
                                    ? std::vector<float>(q.begin(), q.end())
                                    : index.transform.query(q);
  const std::vector<std::uint16_t> qcodes = encode(qh, W, index.cfg);
  const std::vector<std::size_t> local =
      sample_set(qcodes, index.codes, index.cfg, 0, split.indexed());
  // u below the smallest positive double only happens at cos = -1; keep the weight finite.
  const double log_u_floor = std::log(std::numeric_limits<double>::denorm_min());
  for (std::size_t i : local) {
    const std::size_t token = split.indexed_begin + i;
    const double c = cosine(qh, index.hashed_key(token));
    const double log_u =
        log_collision_probability(c, index.cfg.K, index.cfg.L, index.cfg.t, index.cfg.r);
    part.sample.push_back(token);
    part.log_u.push_back(std::isnan(log_u) ? log_u : std::max(log_u, log_u_floor));
  }
  return part;
}

SampledPart sampled_attention(std::span<const float> q, Matrix K, Matrix V, Matrix W,
                              const LshIndex &index, std::optional<double> scale) {
  if (index.split.n != K.rows)
    throw std::invalid_argument("sampled_attention: index is for " + std::to_string(index.split.n) +
                                " tokens, keys have " + std::to_string(K.rows));
  SampledPart part = sample_tokens(q, W, index);
  // Logits on the raw keys, like the static part: the two must share one softmax.
  part.attention = attention_over(q, K, V, part.sample, part.log_u, scale);
  return part;
}

MagicPigResult magicpig_attention(std::span<const float> q, Matrix K, Matrix V, Matrix W,
                                  const LshIndex &index, std::optional<double> scale) {
  if (index.split.n != K.rows)
    throw std::invalid_argument("magicpig_attention: index is for " +
                                std::to_string(index.split.n) + " tokens, keys have " +
                                std::to_string(K.rows));
  SampledPart part = sample_tokens(q, W, index);
  // One softmax over static tokens (bias log 1 = 0) and sampled tokens (bias log u_i).
  std::vector<std::size_t> ids = index.split.static_ids();
  std::vector<double> bias(ids.size(), 0.0);
  ids.insert(ids.end(), part.sample.begin(), part.sample.end());
  bias.insert(bias.end(), part.log_u.begin(), part.log_u.end());
  MagicPigResult r;
  r.attention = attention_over(q, K, V, ids, bias, scale);
  r.sample = std::move(part.sample);
  r.indexed = index.split.indexed();
  r.static_tokens = index.split.static_tokens();
  return r;
}

MagicPigResult magicpig_attention(std::span<const float> q, Matrix K, Matrix V, Matrix W,
                                  const LshConfig &cfg, StaticConfig st, Centering centering,
                                  std::optional<double> scale, const TransformSpec &transform) {
  return magicpig_attention(q, K, V, W, build_index(K, W, cfg, st, centering, transform), scale);
}

} // namespace pig::ref
