// Synthetic attention problems shaped like the ones MagicPIG meets in real models (paper
// section 4): keys in a narrow cone whose axis points away from the query, a strong attention
// sink, a long tail of small but non-negligible weights, and values correlated with scores (so
// that keeping only the top scores is biased, as in the paper's Figure 6).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pig/reference/matrix.h"

namespace pig::ref {

struct SyntheticConfig {
  std::size_t n = 16384;
  std::size_t d = 128;
  std::uint64_t seed = 1;
  /// Standard deviation of the scaled logits of non-sink tokens: the tail's heaviness. Logits are
  /// Gaussian, so weights are log-normal: larger means more peaked.
  double logit_std = 2.0;
  /// Fraction of the softmax mass carried by token 0 (the sink); 0 disables the sink.
  double sink_mass = 0.3;
  /// Distance of the key cone's axis from the origin, in units of the keys' noise norm. The
  /// query points against it (cosine ~ -0.8 with the axis).
  double cone_offset = 3.0;
  /// Correlation of neighbouring tokens' key noise (an AR(1) process over positions; each key's
  /// marginal distribution is unchanged). Real keys drift slowly along the sequence, so
  /// high-scoring tokens come in runs: the premise of page-based methods such as Quest.
  double key_locality = 0.9;
  /// How strongly values follow their token's score along one direction (0: independent).
  double value_score_correlation = 1.0;
  /// Common component of all values (real value vectors are not centred), relative to noise.
  double value_mean = 1.0;
};

struct AttentionProblem {
  std::vector<float> q; ///< d
  OwnedMatrix K;        ///< n x d
  OwnedMatrix V;        ///< n x d
};

/// Deterministic for a given config. Uses the default scale 1/sqrt(d) to place the logits.
AttentionProblem synthetic_problem(const SyntheticConfig &cfg);

} // namespace pig::ref
