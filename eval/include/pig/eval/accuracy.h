// Attention error of the sparse estimators against exact attention for one (layer, kv-head) of
// a real KV cache and the queries of its GQA group, computed with the scalar reference
// (pig::ref). Shared by pig-eval (real caches) and pig-compare (synthetic attention).
//
// The framing is the runtime's (attention.h): the first `sink` and the last `local` tokens are
// static and attended exactly by every method; each method chooses among the indexed tokens in
// between, and its cost is the fraction of the indexed tokens it reads (ALGORITHM.md cost2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pig/reference/reference.h"
#include "pig/spec/lsh_params.h"

namespace pig::eval {

/// Codes of a narrower LSH configuration read out of those of a wider one over the same W.
/// Column c of W is bit c % K of code c / K (ALGORITHM.md 1.2), so every sign bit the narrow
/// configuration needs (columns below its K*L) is already in the wide codes: hashing the keys
/// once serves every configuration. Requires to.columns() <= from.columns().
std::vector<std::uint16_t> Recode(const std::vector<std::uint16_t> &wide,
                                  const ref::LshConfig &from, const ref::LshConfig &to);

/// The smallest oracle-sampling budget B whose expected unique draws reach `target` tokens
/// (bisection: sum_i 1 - (1 - w_i)^B increases with B), at most `max_draws`.
std::size_t OracleBudget(std::span<const double> weights, double target,
                         std::size_t max_draws = std::size_t(1) << 40);

/// A MagicPIG configuration's hash (K, L); the threshold is ErrorOptions::threshold.
using KL = spec::LshHash;

struct ErrorOptions {
  std::vector<double> budgets{0.01, 0.02, 0.05, 0.10}; ///< TopK / Quest / oracle, of indexed
  std::vector<KL> magicpig{{10, 150}, {9, 120}, {8, 75}, {7, 64}, {6, 32}};
  /// MagicPIG configurations at whose measured cost TopK, Quest and oracle also run.
  std::size_t matched = 3; ///< the first `matched` entries of `magicpig`
  int threshold = 2;
  std::uint64_t seed = 0x9e3779b97f4a7c15ull; ///< W (the runtime's default)
  ref::StaticConfig statics{};
  std::size_t quest_page = 16;
  std::uint64_t sample_seed = 1;
  /// Oracle sampling draws at most this many samples: where the indexed part's softmax is
  /// concentrated on a few tokens, reaching a target of unique draws takes astronomically many
  /// (the expected count saturates); the point then sits at the cost actually reached.
  std::size_t max_oracle_draws = std::size_t(1) << 20;
  /// LSH-hybrid variants (ref::hybrid_attention) on the widest MagicPIG index: each runs at every
  /// entry of `budgets` and at the measured cost of the `matched` MagicPIG configurations (on that
  /// configuration's index); their budget fields are replaced. A variant with reuse = R > 1 is
  /// measured at its stalest step: its selection is made with the query R - 1 decode steps
  /// earlier, over the first n - (R - 1) rows (index, split and all), and attended by this query
  /// with ref::hybrid_reuse; its cost counts the R - 1 tokens attended exactly because of it.
  std::vector<ref::HybridConfig> hybrid{ref::HybridConfig{}};
};

/// The group's queries `lag` decode steps before the ones measured (one per query, in the same
/// order): what a reused selection was made with (ErrorOptions::hybrid, reuse > 1).
using EarlierQueries = std::function<std::vector<std::vector<float>>(std::size_t lag)>;

/// One estimate of one query head.
struct ErrorPoint {
  std::string method; ///< TopK, Quest, Oracle, MagicPIG, LSH-hybrid
  std::string config; ///< "b=2%", "K=10 L=150", "= MagicPIG 10,150"
  double cost = 0;    ///< tokens read from the indexed part / indexed tokens
  double error = 0;   ///< relative L2 error of the output vs exact attention
};

/// Every method on each query of one kv-head's cache (K, V: n x d rows of positions [0, n)).
/// W must have d rows and at least max K*L columns (ref::simhash_matrix(seed, d, 10, 150)).
/// Returns, per query, the points in a fixed order.
/// `earlier` is needed only by hybrid variants with reuse > 1 (std::invalid_argument without it,
/// or when the cache is too short for their lag).
std::vector<std::vector<ErrorPoint>> MeasureGroup(const std::vector<std::vector<float>> &queries,
                                                  ref::Matrix K, ref::Matrix V, ref::Matrix W,
                                                  const ErrorOptions &opt,
                                                  const EarlierQueries &earlier = {});

/// Plain MagicPIG and hashing in fitted spaces (ref::TransformSpec, transform.h) over a grid of
/// (K, L), for the matched-cost comparison of attention-error's transform table: a transform
/// changes the collision rate, so configurations are compared along each one's error-vs-cost
/// frontier, not at equal (K, L).
struct TransformGridOptions {
  std::vector<ref::TransformSpec> transforms; ///< each runs every grid point
  std::vector<KL> grid;
  int threshold = 2;
  std::uint64_t seed = 0x9e3779b97f4a7c15ull;
  ref::StaticConfig statics{};
};

struct TransformPoint {
  std::size_t transform = 0; ///< index into TransformGridOptions::transforms
  std::size_t grid = 0;      ///< index into TransformGridOptions::grid
  double cost = 0;
  double error = 0;
};

/// Every (transform, grid point) on each query of one kv-head's cache (K, V: n x d). Per
/// transform, the index of the widest grid point is built once (the transform fitted to the
/// centred indexed keys, W = ref::simhash_matrix(seed, hashed dim, widest K, widest L)) and the
/// others are recoded from it (Recode); each estimate is ref::magicpig_attention. Returns, per
/// query, transforms x grid points in that order.
std::vector<std::vector<TransformPoint>>
MeasureTransformGrid(const std::vector<std::vector<float>> &queries, ref::Matrix K, ref::Matrix V,
                     const TransformGridOptions &opt);

/// Multi-probe MagicPIG (ALGORITHM.md section 5) over a list of (K, L, t, r): fewer tables, each
/// probed in the buckets within r bits of the query's code, trade index memory (2 L bytes per
/// token) for probes. Codes are computed once against a W wide enough for every configuration
/// (ref::simhash_matrix(seed, d, 16, ceil(max K*L / 16))) and recoded per configuration (Recode);
/// each estimate is ref::magicpig_attention with that configuration's r.
struct ProbeGridOptions {
  std::vector<spec::LshParams> configs;
  std::uint64_t seed = 0x9e3779b97f4a7c15ull;
  ref::StaticConfig statics{};
};

struct ProbePoint {
  std::size_t config = 0; ///< index into ProbeGridOptions::configs
  double cost = 0;
  double error = 0;
};

/// Every configuration on each query of one kv-head's cache (K, V: n x d rows). Returns, per
/// query, the configurations' points in order.
std::vector<std::vector<ProbePoint>>
MeasureProbeGrid(const std::vector<std::vector<float>> &queries, ref::Matrix K, ref::Matrix V,
                 const ProbeGridOptions &opt);

/// The error at `cost` on the error-vs-cost frontier of `points` (cost, error): the points no
/// cheaper-or-equal point beats, linearly interpolated in log(cost) between the two frontier
/// points around `cost`. Empty when `cost` lies outside the frontier's cost range (no
/// extrapolation) or no point has a positive cost.
std::optional<double> ErrorAtCost(std::vector<std::pair<double, double>> points, double cost);

} // namespace pig::eval
