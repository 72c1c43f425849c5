// The quality-vs-cost frontier of LSH configurations and its exploration (pig-tune), after
// FAISS's auto-tuning: evaluate the cheapest and the most expensive candidate first, then skip
// every candidate whose bounds, derived from the measured ones, show it cannot improve the
// frontier. The bounds assume monotonicity in the configuration's partial order (more hash bits
// K or a higher threshold t: fewer collisions, cheaper and less accurate; more tables L: the
// opposite), which holds for the estimator's expectation (ALGORITHM.md); measured noise can break
// it, which at worst skips a point within noise of the frontier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "pig/spec/lsh_params.h"

namespace pig::tune {

/// One layer's choice: LSH (K, L, t) (the spec::LshParams base), or dense attention;
/// {{K, L, t}, dense} initialises ({K, L, t} alone: an LSH choice).
struct Candidate : spec::LshParams {
  bool dense = false;
  friend bool operator==(const Candidate &, const Candidate &) = default;
  /// K * L, the tie-breaker (fewer projections per token); dense counts as the largest.
  std::int64_t projections() const;
};

/// True when `a` costs at least as much as `b` and is at least as accurate, by the partial order:
/// dense above everything; else a.K <= b.K, a.L >= b.L, a.t <= b.t.
bool at_least_as_expensive(const Candidate &a, const Candidate &b);

struct Measured {
  Candidate c;
  double cost = 0;  ///< cost2 (sampled fraction) or a step time: lower is better
  double error = 0; ///< attention error: lower is better
};

/// Indices of the points no other point dominates (cost <= and error <= with one strict), in
/// ascending cost (ties: error, then index).
std::vector<std::size_t> pareto_frontier(const std::vector<Measured> &points);

class Explorer {
public:
  /// `order_seed` shuffles the middle candidates (deterministically) as FAISS does, so that a
  /// budget-limited run samples the whole space rather than one corner.
  explicit Explorer(std::vector<Candidate> candidates, std::uint64_t order_seed = 1);

  /// The index (in the constructor's list) of the next candidate to measure, or nullopt when
  /// every candidate was measured or skipped.
  std::optional<std::size_t> next();
  /// The measurement of candidate i (as returned by next()).
  void report(std::size_t i, double cost, double error);

  const std::vector<Measured> &measured() const { return measured_; }
  std::size_t skipped() const { return skipped_; }
  std::vector<std::size_t> frontier() const { return pareto_frontier(measured_); }

private:
  bool cannot_improve(const Candidate &c) const;
  std::vector<Candidate> cands_;
  std::vector<std::size_t> order_;
  std::size_t pos_ = 0, skipped_ = 0;
  std::vector<Measured> measured_;
};

/// The cheapest point with error <= max_error. Points whose cost is within tie_rel (relative) of
/// the cheapest are ties, broken by fewer projections (K * L), then by index (the order given:
/// manifest order), never by the cost itself. nullopt when no point qualifies.
std::optional<std::size_t> select_max_error(const std::vector<Measured> &points, double max_error,
                                            double tie_rel = 0.02);
/// The most accurate point with cost <= max_cost (e.g. the baseline's step time / the speed-up
/// asked for); errors within tie_rel of the best are ties, broken as above.
std::optional<std::size_t> select_max_cost(const std::vector<Measured> &points, double max_cost,
                                           double tie_rel = 0.02);

} // namespace pig::tune
