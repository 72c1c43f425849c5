// lsh-hybrid's knobs (pig-tune hybrid, docs/TUNING.md): the measured grid of configurations, the
// choice among them, and the file the choice is written to and read from (--hybrid @FILE in
// pig-run, pig-serve, pig-bench-context and pig-eval).
//
// Every configuration of the grid runs on the same samples (one query head of one layer at one
// context), at the same cost2 per sample: MagicPIG's measured cost on that sample, or a fixed
// budget. TopK runs beside them at that cost, so each row also says how far it is from TopK.
// The choice is the lowest mean error among the configurations that keep to the budget: every
// fixed tail (its expected cost2 is the budget by construction), and each growing tail (eps > 0,
// which may read up to its cap) whose mean cost2 stays within 2 % of the budget's; ties go to
// the first in grid order.
//
// File, schema 1 (one JSON object):
//   {"schema": 1, "kind": "hybrid_point", "spec": "head=0.25:floor=0.1:rank=hamming",
//    "budget": "= magicpig K=10 L=150", "cost2": 0.029, "error": 0.061, "topk_error": 0.09,
//    "samples": 216, "contexts": [2048, 4096, 8192], "model_hash": "...",
//    "pig_version": "...", "timestamp": "..."}
// spec is ref::HybridConfig::spec(): what --hybrid reads; the budget stays the tool's --budget.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pig/reference/hybrid.h"

namespace pig::tune {

inline constexpr int kHybridPointSchema = 1;

/// One configuration of the grid, summed over its samples.
struct HybridMeasure {
  ref::HybridConfig config;          ///< its budget is unused
  double error = 0;                  ///< mean relative L2 error of the attention output
  double p90 = 0;                    ///< 90th percentile of the error
  double cost2 = 0;                  ///< mean cost2 measured
  double topk_error = 0;             ///< TopK's mean error at the same samples and costs
  std::vector<double> context_error; ///< mean error per context, in the contexts' order
  std::size_t samples = 0;
};

/// Whether m keeps to the budget: a fixed tail always; a growing tail when its mean cost2 <=
/// budget_cost2 * 1.02.
bool keeps_budget(const HybridMeasure &m, double budget_cost2);

/// The index of the lowest finite mean error among the fixed tails and the growing tails whose
/// cost2 <= budget_cost2 * 1.02 (ties: the first); nullopt when none qualifies.
std::optional<std::size_t> select_hybrid(const std::vector<HybridMeasure> &measures,
                                         double budget_cost2);

/// The grid: for each ranker, every combination of the lists (head shares, floors, ranker bits,
/// epsilons), in that nesting order (ranker, then head outermost); bits apply to rank=hamming
/// only (the other rankers take one bits = 0 instead of the list). Each validated
/// (ref::HybridConfig::validate). Throws std::invalid_argument naming the first value out of
/// range, or when a list is empty.
std::vector<ref::HybridConfig>
hybrid_grid(const std::vector<double> &heads, const std::vector<double> &floors,
            const std::vector<int> &bits, const std::vector<double> &epsilons,
            const std::vector<ref::HybridRank> &ranks = {ref::HybridRank::hamming});

struct HybridPoint {
  int schema = kHybridPointSchema;
  std::string spec;   ///< ref::HybridConfig::spec() of the choice
  std::string budget; ///< how cost2 was set: "= magicpig K=10 L=150" or "cost2 0.03"
  double cost2 = 0, error = 0, topk_error = 0;
  std::size_t samples = 0;
  std::vector<std::size_t> contexts;
  std::string model_hash; ///< of the model measured ("": unknown)
  std::string pig_version, timestamp;
  friend bool operator==(const HybridPoint &, const HybridPoint &) = default;
};

/// One JSON document (pretty, newline-terminated). Deterministic.
std::string to_json(const HybridPoint &p);
/// Throws RecordError naming the field on malformed JSON, a missing or mistyped field, a kind
/// other than "hybrid_point", a newer schema, a spec ref::HybridConfig::parse refuses, or a
/// cost2 outside (0, 1] or an error that is negative or not finite.
HybridPoint parse_hybrid_point(std::string_view text);
/// Reads a file; throws RecordError when it cannot be read or parsed.
HybridPoint load_hybrid_point(const std::string &path);
/// Writes atomically (`path`.tmp renamed over the target); throws RecordError on any failure,
/// leaving `path` as it was.
void save_hybrid_point(const std::string &path, const HybridPoint &p);

} // namespace pig::tune
