#include "pig/tune/hybrid.h"

#include <cmath>
#include <stdexcept>

#include "json_fields.h"

namespace pig::tune {

using namespace json_fields;

bool keeps_budget(const HybridMeasure &m, double budget_cost2) {
  // A fixed tail reads the budget in expectation (the water-filling sets sum pi to it), so only
  // its draw moves the measured cost; a growing tail may read up to its cap.
  return m.config.epsilon == 0 || m.cost2 <= budget_cost2 * 1.02;
}

std::optional<std::size_t> select_hybrid(const std::vector<HybridMeasure> &measures,
                                         double budget_cost2) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < measures.size(); ++i) {
    const HybridMeasure &m = measures[i];
    if (!keeps_budget(m, budget_cost2) || !std::isfinite(m.error))
      continue;
    if (!best || m.error < measures[*best].error)
      best = i;
  }
  return best;
}

std::vector<ref::HybridConfig> hybrid_grid(const std::vector<double> &heads,
                                           const std::vector<double> &floors,
                                           const std::vector<int> &bits,
                                           const std::vector<double> &epsilons,
                                           const std::vector<ref::HybridRank> &ranks) {
  if (heads.empty() || floors.empty() || bits.empty() || epsilons.empty() || ranks.empty())
    throw std::invalid_argument("lsh-hybrid grid: every list needs at least one value");
  std::vector<ref::HybridConfig> grid;
  const std::vector<int> all_columns{0};
  for (ref::HybridRank r : ranks)
    for (double h : heads)
      for (double f : floors)
        for (int b : r == ref::HybridRank::hamming ? bits : all_columns)
          for (double e : epsilons) {
            ref::HybridConfig c;
            c.rank = r;
            c.head_share = h;
            c.floor = f;
            c.bits = b;
            c.epsilon = e;
            c.validate();
            grid.push_back(c);
          }
  return grid;
}

std::string to_json(const HybridPoint &p) {
  json j;
  j["schema"] = p.schema;
  j["kind"] = "hybrid_point";
  j["spec"] = p.spec;
  j["budget"] = p.budget;
  j["cost2"] = p.cost2;
  j["error"] = p.error;
  j["topk_error"] = p.topk_error;
  j["samples"] = p.samples;
  j["contexts"] = p.contexts;
  j["model_hash"] = p.model_hash;
  j["pig_version"] = p.pig_version;
  j["timestamp"] = p.timestamp;
  return j.dump(2) + "\n";
}

HybridPoint parse_hybrid_point(std::string_view s) {
  json j;
  try {
    j = json::parse(s);
  } catch (const json::exception &e) {
    throw RecordError(std::string("hybrid point: not JSON: ") + e.what());
  }
  const std::string where = "hybrid point: ";
  HybridPoint p;
  p.schema = integer(j, "schema", where);
  if (p.schema > kHybridPointSchema || p.schema < 1)
    throw RecordError(where + "schema " + std::to_string(p.schema) +
                      " is not one this build reads (" + std::to_string(kHybridPointSchema) + ")");
  if (text(j, "kind", where) != "hybrid_point")
    throw RecordError(where + "kind is '" + text(j, "kind", where) +
                      "', not 'hybrid_point' (pig-tune hybrid writes one)");
  p.spec = text(j, "spec", where);
  try {
    ref::HybridConfig::parse(p.spec);
  } catch (const std::invalid_argument &e) {
    throw RecordError(where + "field 'spec': " + e.what());
  }
  p.budget = text(j, "budget", where);
  p.cost2 = number(j, "cost2", where);
  if (!(p.cost2 > 0 && p.cost2 <= 1))
    throw RecordError(where + "field 'cost2' must be in (0, 1]");
  p.error = number(j, "error", where);
  p.topk_error = number(j, "topk_error", where);
  for (auto [name, v] : {std::pair{"error", p.error}, std::pair{"topk_error", p.topk_error}})
    if (!(v >= 0 && std::isfinite(v)))
      throw RecordError(where + "field '" + name + "' must be finite and >= 0");
  const int samples = integer(j, "samples", where);
  if (samples < 0)
    throw RecordError(where + "field 'samples' must be >= 0");
  p.samples = std::size_t(samples);
  const json &contexts = need(j, "contexts", where);
  if (!contexts.is_array())
    throw RecordError(where + "field 'contexts' must be an array");
  for (const json &c : contexts) {
    if (!c.is_number_unsigned())
      throw RecordError(where + "field 'contexts' must hold non-negative integers");
    p.contexts.push_back(c.get<std::size_t>());
  }
  p.model_hash = text(j, "model_hash", where);
  p.pig_version = text(j, "pig_version", where);
  p.timestamp = text(j, "timestamp", where);
  return p;
}

HybridPoint load_hybrid_point(const std::string &path) {
  return load_file(path, "hybrid point",
                   [](std::string_view text) { return parse_hybrid_point(text); });
}

void save_hybrid_point(const std::string &path, const HybridPoint &p) {
  const std::string text = to_json(p);
  parse_hybrid_point(text); // what could not be read back is not written
  write_atomically(path, text);
}

} // namespace pig::tune
