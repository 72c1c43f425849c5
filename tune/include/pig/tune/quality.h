// The quality measurement of `pig-tune accuracy`: for one (layer, kv-head) of a real KV cache,
// the attention error and cost2 of many LSH candidates (K, L, t) at once, equal to what
// pig::ref's MagicPIG estimator gives for each candidate (ref::build_index + ref::
// magicpig_attention), but sharing everything the candidates have in common: the projections of
// the keys onto W (once per call), the codes (once per K and prefix length), the per-table
// collision counts (once per query and K, read off at every L), the cosines and the exact
// attention (once per query).
#pragma once

#include <cstddef>
#include <vector>

#include "pig/reference/magicpig.h"
#include "pig/reference/matrix.h"
#include "pig/spec/lsh_params.h"

namespace pig::tune {

/// One LSH candidate: K bits per table, L tables, sampled at >= t collisions.
using LshPoint = spec::LshParams;

struct QualityQuery {
  std::vector<float> q;   ///< one query head, d floats
  std::size_t length = 0; ///< attends to positions [0, length) of K/V (a decode step at position
                          ///< length-1); 0 = all rows
};

struct QualitySample {
  double error = 0; ///< relative L2 error of the estimate vs exact attention (ref::relative_l2)
  double cost = 0;  ///< cost2: sampled / indexed tokens (0 when nothing is indexed)
};

/// For one kv-head's K, V (n x d and n x dv rows) and the queries of its GQA group (possibly at
/// several decode positions), the error and cost2 of every candidate on every query: result[c][i]
/// for candidate c, query i. W: d x (>= max K*L) columns, e.g. ref::simhash_matrix(seed, d, maxK,
/// maxL) (a narrower configuration's W is a column prefix of a wider one's).
///
/// Equal to building ref::build_index(K[0, length), W, {K, L, t, seed}, statics) and running
/// ref::magicpig_attention for each (candidate, query): the sample sets are identical (every
/// hash bit is decided exactly as ref decides it), hence so is the cost; the error agrees to
/// rounding (log u is summed by a faster series where ref sums every binomial term; see
/// quality.cpp). Single-threaded: the caller parallelises over heads.
///
/// Throws std::invalid_argument on bad shapes (d == 0, V rows != K rows, W rows != d, a query
/// of the wrong size or longer than n), an invalid (K, L, t) (ref::LshConfig::validate), a
/// candidate needing more columns than W has, or a query whose prefix has fewer than
/// `min_indexed` indexed tokens.
std::vector<std::vector<QualitySample>>
MeasureCandidates(ref::Matrix K, ref::Matrix V, ref::Matrix W,
                  const std::vector<QualityQuery> &queries, const std::vector<LshPoint> &candidates,
                  ref::StaticConfig statics = {}, std::size_t min_indexed = 16);

} // namespace pig::tune
