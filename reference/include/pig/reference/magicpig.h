// The MagicPIG estimator (ALGORITHM.md section 1): exact attention over the static tokens (sink
// and local window), LSH-sampled, importance-weighted attention over the indexed rest, one
// softmax over both.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "pig/reference/attention.h"
#include "pig/reference/lsh.h"
#include "pig/reference/matrix.h"
#include "pig/reference/transform.h"

namespace pig::ref {

/// Tokens that are always attended exactly and never indexed: the first `sink` (attention sink)
/// and the last `local` (the recent window).
struct StaticConfig {
  std::size_t sink = 4;
  std::size_t local = 64;
  /// Centring (Centering::mean_of_indexed) on the mean of the first `mean_window` keys after the
  /// sink only (0: every indexed key, the paper's rule). A window fixed in positions makes
  /// the mean, and so every code, a function of the prefix alone: an index built over a cached
  /// prefix then serves every sequence that extends it (runtime index_share.h); lsh.h's
  /// mean_count says how many keys the mean averages.
  std::size_t mean_window = 0;
};

/// Which tokens are indexed: [indexed_begin, indexed_end). Everything else is static. When
/// n <= sink + local the indexed range is empty and MagicPIG is exactly dense attention.
struct TokenSplit {
  std::size_t n = 0;
  std::size_t indexed_begin = 0;
  std::size_t indexed_end = 0;

  std::size_t indexed() const { return indexed_end - indexed_begin; }
  std::size_t static_tokens() const { return n - indexed(); }
  /// The static token ids, ascending.
  std::vector<std::size_t> static_ids() const;
};

TokenSplit split_tokens(std::size_t n, StaticConfig st);

enum class Centering {
  mean_of_indexed, ///< hash k_i - mu, mu = mean of the indexed keys (MagicPIG's default)
  none,            ///< hash the raw keys (for showing why centering matters)
};

/// What is built once per (layer, kv-head) at prefill: the split, the mean, the hash transform
/// fitted to the centred indexed keys (transform.h; the identity for plain MagicPIG) and the
/// codes.
struct LshIndex {
  LshConfig cfg;
  TokenSplit split;
  std::vector<float> mean;          ///< mu (zeros with Centering::none)
  OwnedMatrix centered;             ///< k_i - mu for the indexed tokens (row 0 = indexed_begin)
  HashTransform transform;          ///< fitted on `centered`
  OwnedMatrix hashed;               ///< transform.key(k_i - mu); empty for the identity
  std::vector<std::uint16_t> codes; ///< codes of the hashed indexed keys, token-major

  std::span<const float> centered_key(std::size_t token) const;
  /// The vector token's codes were computed from: hashed, or centered for the identity.
  std::span<const float> hashed_key(std::size_t token) const;
};

/// Throws on an invalid cfg or transform, or on W of the wrong size: W needs
/// transform.hashed_dim(d) rows (d for plain) and at least K*L columns.
LshIndex build_index(Matrix K, Matrix W, const LshConfig &cfg, StaticConfig st = {},
                     Centering centering = Centering::mean_of_indexed,
                     const TransformSpec &transform = {});

/// The static part alone: exact attention over the sink and local tokens (u = 1).
Attention static_attention(std::span<const float> q, Matrix K, Matrix V, const TokenSplit &split,
                           std::optional<double> scale = {});

struct SampledPart {
  std::vector<std::size_t> sample; ///< S: indexed tokens colliding in >= t tables, ascending
  std::vector<double> log_u;       ///< log u_i for each token of `sample`
  Attention attention;             ///< softmax over S of scale q.k_i - log u_i; empty if S is
};

/// Sample set S of the query, and log u_i = log P[token i is sampled] from the cosine between the
/// hashed query and the hashed key (q and the centered key for plain MagicPIG). A sampled token
/// whose u underflows to 0 (only possible at cos = -1, where sampling it has probability zero) gets
/// u = the smallest positive double (denorm_min), so the weight stays finite.
SampledPart sample_tokens(std::span<const float> q, Matrix W, const LshIndex &index);

/// The sampled part alone: softmax over S of `scale q.k_i - log u_i`, on the uncentered keys
/// (the same logits as the static part, so that the two merge exactly).
SampledPart sampled_attention(std::span<const float> q, Matrix K, Matrix V, Matrix W,
                              const LshIndex &index, std::optional<double> scale = {});

struct MagicPigResult {
  Attention attention;
  std::vector<std::size_t> sample; ///< S
  std::size_t indexed = 0;         ///< number of indexed tokens
  std::size_t static_tokens = 0;
  /// Cost2 = |S| / indexed (0 when nothing is indexed).
  double cost() const { return indexed == 0 ? 0.0 : double(sample.size()) / double(indexed); }
};

/// The estimator in one softmax over S together with the static tokens:
/// o = sum_{i in S u static} softmax_i(scale q.k_i - log u_i) v_i, u_i = 1 for static tokens.
/// Its lse is log(sum_static e^{z_i} + sum_{i in S} e^{z_i} / u_i): since token i enters S with
/// probability u_i over the draw of W, exp(lse) is an unbiased estimate of the dense partition
/// function (and exp(lse) * o of its numerator); o itself is a ratio estimate.
MagicPigResult magicpig_attention(std::span<const float> q, Matrix K, Matrix V, Matrix W,
                                  const LshIndex &index, std::optional<double> scale = {});

/// Convenience: build the index and run the estimator.
MagicPigResult magicpig_attention(std::span<const float> q, Matrix K, Matrix V, Matrix W,
                                  const LshConfig &cfg, StaticConfig st = {},
                                  Centering centering = Centering::mean_of_indexed,
                                  std::optional<double> scale = {},
                                  const TransformSpec &transform = {});

} // namespace pig::ref
