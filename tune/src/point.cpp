#include "pig/tune/point.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "pig/spec/kernel_key.h"
#include "pig/spec/lsh_params.h"
#include "pig/spec/schedule.h"
#include "pig/spec/text.h"

namespace pig::tune {
namespace {

using json = nlohmann::json;
using namespace json_fields;

std::string choice_str(const Candidate &c) {
  if (c.dense)
    return "dense";
  std::string s = "K=";
  s.append(std::to_string(c.K)).append(" L=").append(std::to_string(c.L));
  s.append(" t=").append(std::to_string(c.t));
  return s;
}

// "K=10 L=150 d=64 bf16" (pig::spec::KernelKey's spelling) -> K, L and the tail "d=64 bf16".
bool parse_kernel(const std::string &kernel, int &K, int &L, std::string &tail, std::string &why) {
  const std::optional<spec::KernelKey> key = spec::KernelKey::parse(kernel, &why);
  if (!key)
    return false;
  K = key->K;
  L = key->L;
  tail = spec::cat("d=", std::to_string(key->d), " ", spec::name(key->dtype));
  return true;
}

// One layer's options for selection: its measured candidates, and dense when allowed.
struct Option {
  Candidate c;
  double error, cost;
  std::size_t order; // tie-break after projections
  double cost2;      // reported (cost is what selection uses: cost2 or time)
};

std::vector<std::vector<Option>> options_of(const QualityTable &t, bool allow_dense) {
  std::vector<std::vector<Option>> o(t.layers.size());
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    const LayerTable &lt = t.layers[l];
    for (std::size_t i = 0; i < lt.candidates.size(); ++i)
      o[l].push_back({lt.candidates[i], lt.error[i],
                      lt.cost.size() == lt.candidates.size() ? lt.cost[i] : lt.cost2[i], i,
                      lt.cost2[i]});
    if ((allow_dense || lt.candidates.empty()) && std::isfinite(lt.dense_cost))
      o[l].push_back({Candidate{{0, 0, 0}, true}, 0.0, lt.dense_cost, lt.candidates.size(), 1.0});
  }
  return o;
}

// Deterministic order of equally good options: fewer projections, then record order.
bool tie_before(const Option &a, const Option &b) {
  if (a.c.projections() != b.c.projections())
    return a.c.projections() < b.c.projections();
  return a.order < b.order;
}

// Per layer, argmin cost + lambda * error.
std::vector<std::size_t> lagrange(const std::vector<std::vector<Option>> &opts, double lambda) {
  std::vector<std::size_t> pick(opts.size(), 0);
  for (std::size_t l = 0; l < opts.size(); ++l) {
    double best = 0;
    for (std::size_t i = 0; i < opts[l].size(); ++i) {
      const double v = opts[l][i].cost + lambda * opts[l][i].error;
      const double tol = 1e-12 * std::max(1.0, std::abs(best));
      if (i == 0 || v < best - tol) {
        best = v;
        pick[l] = i;
      } else if (v <= best + tol && tie_before(opts[l][i], opts[l][pick[l]])) {
        pick[l] = i;
      }
    }
  }
  return pick;
}

struct Totals {
  double error = 0, cost = 0, cost2 = 0;
};
Totals totals(const std::vector<std::vector<Option>> &opts, const std::vector<std::size_t> &pick) {
  Totals t;
  for (std::size_t l = 0; l < opts.size(); ++l) {
    t.error += opts[l][pick[l]].error;
    t.cost += opts[l][pick[l]].cost;
    t.cost2 += opts[l][pick[l]].cost2;
  }
  const double n = double(std::max<std::size_t>(opts.size(), 1));
  t.error /= n;
  t.cost /= n;
  t.cost2 /= n;
  return t;
}

OperatingPoint make_point(const QualityTable &t, const std::vector<std::vector<Option>> &opts,
                          const std::vector<std::size_t> &pick, std::string criterion) {
  OperatingPoint p;
  p.data_hash = t.data_hash;
  p.model_hash = t.model_hash;
  p.kernel_tail = t.kernel_tail;
  p.criterion = std::move(criterion);
  bool timed = false;
  for (std::size_t l = 0; l < opts.size(); ++l) {
    const Option &o = opts[l][pick[l]];
    p.layers.push_back({int(l), o.c, o.error, o.cost2});
    timed = timed || !t.layers[l].cost.empty();
  }
  const Totals s = totals(opts, pick);
  p.error = s.error;
  p.cost2 = s.cost2;
  p.attention_s = timed ? s.cost * double(opts.size()) : 0.0;
  return p;
}

// Greedy use of the slack left by the hull point: repeatedly take the single-layer change with
// the best exchange rate that keeps the constraint (error <= bound: changes that save cost;
// cost <= bound: changes that cut error). Deterministic: ties go to the lower layer.
void fill_slack(const std::vector<std::vector<Option>> &opts, std::vector<std::size_t> &pick,
                bool bound_on_error, double bound) {
  const double n = double(std::max<std::size_t>(opts.size(), 1));
  for (int iter = 0; iter < 10000; ++iter) {
    const Totals now = totals(opts, pick);
    double best_rate = 0;
    std::size_t bl = 0, bi = 0;
    bool found = false;
    for (std::size_t l = 0; l < opts.size(); ++l) {
      const Option &cur = opts[l][pick[l]];
      for (std::size_t i = 0; i < opts[l].size(); ++i) {
        const Option &o = opts[l][i];
        const double de = (o.error - cur.error) / n, dc = (o.cost - cur.cost) / n;
        double rate;
        if (bound_on_error) { // save cost, spend error
          if (!(dc < -1e-15) || now.error + de > bound * (1 + 1e-12))
            continue;
          rate = de > 0 ? -dc / de : 1e300;
        } else { // cut error, spend cost
          if (!(de < -1e-15) || now.cost + dc > bound * (1 + 1e-12))
            continue;
          rate = dc > 0 ? -de / dc : 1e300;
        }
        if (!found || rate > best_rate * (1 + 1e-12)) {
          found = true;
          best_rate = rate;
          bl = l;
          bi = i;
        }
      }
    }
    if (!found)
      return;
    pick[bl] = bi;
  }
}

// "" when v is a finite number in [lo, hi], else why (naming the field).
std::string range_problem(const char *field, double v, double lo, double hi) {
  if (std::isfinite(v) && v >= lo && v <= hi)
    return "";
  std::ostringstream m;
  m << "field '" << field << "' = " << v << " is outside [" << lo << ", " << hi << "]";
  if (!std::isfinite(v))
    m << " (not finite)";
  return m.str();
}

// The exact optimum over every combination of the layers' options, when it is small enough to
// find: dynamic programming over the layers on partial sums (bounded, objective) of the chosen
// options, keeping only the pairs no other pair beats on both (a pair beaten on both has no
// completion better than the beater's), and dropping pairs that cannot meet the bound even with
// the rest's smallest values or cannot beat `incumbent` (a feasible objective sum) even with
// the rest's smallest objective. Sums run over layers 0..n-1 in order, like totals(), so the
// chosen combination's totals are the ones compared here. Ties go to the smaller bounded sum,
// then to the first combination in layer-by-layer tie order (fewer projections, then record
// order). nullopt when no combination meets the bound or when the pairs kept after a layer
// exceed kMaxStates (the caller keeps the relaxation's point then).
constexpr std::size_t kMaxStates = std::size_t(1) << 18;
std::optional<std::vector<std::size_t>> exact_pick(const std::vector<std::vector<Option>> &opts,
                                                   bool bound_on_error, double bound,
                                                   double incumbent) {
  const std::size_t n = opts.size();
  auto bounded = [&](const Option &o) { return bound_on_error ? o.error : o.cost; };
  auto objective = [&](const Option &o) { return bound_on_error ? o.cost : o.error; };
  // Each layer's options in tie order, and the rest's smallest sums (for the pruning).
  std::vector<std::vector<std::size_t>> order(n);
  std::vector<double> rest_b(n + 1, 0.0), rest_o(n + 1, 0.0);
  for (std::size_t l = n; l-- > 0;) {
    if (opts[l].empty())
      return std::nullopt;
    order[l].resize(opts[l].size());
    for (std::size_t i = 0; i < opts[l].size(); ++i)
      order[l][i] = i;
    std::stable_sort(order[l].begin(), order[l].end(), [&](std::size_t a, std::size_t b) {
      return tie_before(opts[l][a], opts[l][b]);
    });
    double mb = bounded(opts[l][0]), mo = objective(opts[l][0]);
    for (const Option &o : opts[l]) {
      mb = std::min(mb, bounded(o));
      mo = std::min(mo, objective(o));
    }
    rest_b[l] = rest_b[l + 1] + mb;
    rest_o[l] = rest_o[l + 1] + mo;
  }
  const double nn = double(std::max<std::size_t>(n, 1));
  // Slack on the pruning only (the final choice is checked exactly, as totals() would).
  const double b_limit = bound * nn + 1e-9 * std::max(1.0, std::abs(bound * nn));
  const double o_limit = incumbent + 1e-9 * std::max(1.0, std::abs(incumbent));
  struct State {
    double b, o;
    std::size_t parent, option;
  };
  std::vector<std::vector<State>> layers(n);
  std::vector<State> prev{{0.0, 0.0, 0, 0}};
  for (std::size_t l = 0; l < n; ++l) {
    std::vector<State> next;
    for (std::size_t s = 0; s < prev.size(); ++s)
      for (std::size_t i : order[l]) {
        const Option &o = opts[l][i];
        const State x{prev[s].b + bounded(o), prev[s].o + objective(o), s, i};
        if (x.b + rest_b[l + 1] > b_limit || x.o + rest_o[l + 1] > o_limit)
          continue;
        next.push_back(x);
      }
    std::stable_sort(next.begin(), next.end(), [](const State &a, const State &b) {
      return a.b != b.b ? a.b < b.b : a.o < b.o;
    });
    std::vector<State> kept;
    double best_o = std::numeric_limits<double>::infinity();
    for (const State &x : next)
      if (x.o < best_o) {
        kept.push_back(x);
        best_o = x.o;
      }
    if (kept.size() > kMaxStates)
      return std::nullopt;
    layers[l] = kept;
    prev = std::move(kept);
  }
  // Ascending bounded sum, strictly falling objective: the last feasible pair is the optimum.
  std::optional<std::size_t> best;
  for (std::size_t s = 0; s < prev.size(); ++s)
    if (prev[s].b / nn <= bound)
      best = s;
  if (!best)
    return std::nullopt;
  std::vector<std::size_t> pick(n);
  for (std::size_t l = n, s = *best; l-- > 0;) {
    pick[l] = layers[l][s].option;
    s = layers[l][s].parent;
  }
  return pick;
}

} // namespace

void validate_point(const OperatingPoint &p) {
  const std::string where = "operating point: ";
  const double inf = std::numeric_limits<double>::infinity();
  if (!p.kernel_tail.empty()) {
    // The tail of a manifest line's key: "K=1 L=1 <tail>" must read and serve.
    std::string why;
    const auto key = spec::KernelKey::parse("K=1 L=1 " + p.kernel_tail, &why);
    if (key)
      why = key->validate();
    else
      why = "'" + p.kernel_tail + "' is not 'd=<head dim> <type>'";
    if (!why.empty())
      throw RecordError(where + "field 'kernel': " + why);
  }
  if (std::string why; !spec::Schedule::parse(p.schedule, &why))
    throw RecordError(where + "field 'schedule': " + why);
  if (std::string why = range_problem("error", p.error, 0, inf); !why.empty())
    throw RecordError(where + why);
  if (std::string why = range_problem("cost2", p.cost2, 0, 1); !why.empty())
    throw RecordError(where + why);
  if (std::string why = range_problem("attention_s", p.attention_s, 0, inf); !why.empty())
    throw RecordError(where + why);
  if (p.layers.empty())
    throw RecordError(where + "field 'layers' must be a non-empty array");
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    const LayerChoice &l = p.layers[i];
    const std::string w = where + "layers[" + std::to_string(i) + "]: ";
    if (l.layer != int(i))
      throw RecordError(w + "layer " + std::to_string(l.layer) + " out of order (expected " +
                        std::to_string(i) + ")");
    if (!l.c.dense) {
      const spec::LshParams lsh{l.c.K, l.c.L, l.c.t};
      if (std::string why = lsh.validate(); !why.empty()) {
        const char *field = lsh.K < 1 || lsh.K > spec::kMaxK   ? "K"
                            : lsh.L < 1 || lsh.L > spec::kMaxL ? "L"
                                                               : "t";
        throw RecordError(w + "field '" + field + "': " + why);
      }
    }
    if (std::string why = range_problem("error", l.error, 0, inf); !why.empty())
      throw RecordError(w + why);
    if (std::string why = range_problem("cost2", l.cost2, 0, 1); !why.empty())
      throw RecordError(w + why);
  }
}

std::string OperatingPoint::layers_str() const {
  std::string s;
  for (std::size_t b = 0; b < layers.size();) {
    std::size_t e = b + 1;
    while (e < layers.size() && layers[e].c == layers[b].c)
      ++e;
    if (!s.empty())
      s += ' ';
    s += std::to_string(b);
    if (e - b > 1)
      s.append("-").append(std::to_string(e - 1));
    s.append(":").append(choice_str(layers[b].c));
    b = e;
  }
  return s;
}

std::string to_json(const OperatingPoint &p) {
  json layers = json::array();
  for (const LayerChoice &l : p.layers) {
    json o = {{"layer", l.layer}};
    if (l.c.dense)
      o["dense"] = true;
    else {
      o["K"] = l.c.K;
      o["L"] = l.c.L;
      o["t"] = l.c.t;
    }
    o["error"] = l.error;
    o["cost2"] = l.cost2;
    layers.push_back(std::move(o));
  }
  json j = {{"schema", p.schema},
            {"kind", "operating_point"},
            {"data_hash", p.data_hash},
            {"kernel", p.kernel_tail},
            {"layers", std::move(layers)},
            {"schedule", p.schedule},
            {"criterion", p.criterion},
            {"error", p.error},
            {"cost2", p.cost2},
            {"attention_s", p.attention_s},
            {"pig_version", p.pig_version},
            {"timestamp", p.timestamp}};
  if (!p.model_hash.empty())
    j["model_hash"] = p.model_hash;
  return j.dump(1) + "\n";
}

OperatingPoint parse_point(std::string_view s) {
  json j;
  try {
    j = json::parse(s);
  } catch (const json::exception &e) {
    throw RecordError(std::string("operating point: not JSON: ") + e.what());
  }
  const std::string where = "operating point: ";
  OperatingPoint p;
  p.schema = integer(j, "schema", where);
  if (p.schema > kPointSchema || p.schema < 1)
    throw RecordError(where + "schema " + std::to_string(p.schema) +
                      " is not one this build reads (" + std::to_string(kPointSchema) + ")");
  if (text(j, "kind", where) != "operating_point")
    throw RecordError(where + "kind is '" + text(j, "kind", where) +
                      "', not 'operating_point' (a records file? give --max-error to select)");
  p.data_hash = text(j, "data_hash", where);
  if (j.contains("model_hash")) // optional: points of older records lack it
    p.model_hash = text(j, "model_hash", where);
  if (j.contains("kernel")) // optional: a hand-written point may omit it (emit-manifest needs it)
    p.kernel_tail = text(j, "kernel", where);
  p.schedule = text(j, "schedule", where);
  p.criterion = text(j, "criterion", where);
  p.error = number(j, "error", where);
  p.cost2 = number(j, "cost2", where);
  if (j.contains("attention_s"))
    p.attention_s = number(j, "attention_s", where);
  p.pig_version = text(j, "pig_version", where);
  p.timestamp = text(j, "timestamp", where);
  const json &layers = need(j, "layers", where);
  if (!layers.is_array() || layers.empty())
    throw RecordError(where + "field 'layers' must be a non-empty array");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string w = where + "layers[" + std::to_string(i) + "]: ";
    const json &o = layers[i];
    LayerChoice c;
    c.layer = integer(o, "layer", w);
    if (c.layer != int(i))
      throw RecordError(w + "layer " + std::to_string(c.layer) + " out of order (expected " +
                        std::to_string(i) + ")");
    auto d = o.is_object() ? o.find("dense") : o.end();
    if (d != o.end() && !d->is_boolean())
      throw RecordError(w + "field 'dense' must be a boolean");
    c.c.dense = d != o.end() && d->get<bool>();
    if (!c.c.dense) {
      c.c.K = integer(o, "K", w);
      c.c.L = integer(o, "L", w);
      c.c.t = integer(o, "t", w);
    } else
      c.c.K = c.c.L = c.c.t = 0;
    c.error = number(o, "error", w);
    c.cost2 = number(o, "cost2", w);
    p.layers.push_back(c);
  }
  validate_point(p);
  return p;
}

OperatingPoint load_point(const std::string &path) {
  return load_file(path, "operating point",
                   [](std::string_view text) { return parse_point(text); });
}

void save_point(const std::string &path, const OperatingPoint &p) {
  validate_point(p);
  write_atomically(path, to_json(p));
}

std::vector<Candidate> QualityTable::common() const {
  std::vector<Candidate> out;
  if (layers.empty())
    return out;
  for (const Candidate &c : layers[0].candidates) {
    bool all = true;
    for (const LayerTable &l : layers)
      all = all && std::find(l.candidates.begin(), l.candidates.end(), c) != l.candidates.end();
    if (all)
      out.push_back(c);
  }
  return out;
}

QualityTable build_quality_table(const std::vector<Record> &records, std::size_t n_layers,
                                 const std::string &data_hash) {
  std::set<std::string> hashes;
  for (const Record &r : records)
    if (r.kind == RecordKind::quality && r.ok() && r.quality && !r.dense)
      hashes.insert(r.quality->data_hash);
  std::string hash = data_hash;
  if (hash.empty()) {
    if (hashes.size() > 1)
      throw RecordError("the records hold quality measurements of " +
                        std::to_string(hashes.size()) +
                        " different (model, text, contexts); name one with --data-hash");
    if (hashes.empty())
      throw RecordError("no quality record (run pig-tune accuracy first)");
    hash = *hashes.begin();
  } else if (!hashes.count(hash))
    throw RecordError("no quality record with data hash " + hash);

  QualityTable t;
  t.data_hash = hash;
  t.layers.resize(n_layers);
  // Sums per (layer, candidate) over contexts.
  struct Acc {
    double e = 0, p = 0, c = 0;
    int n = 0;
  };
  std::vector<std::vector<Acc>> acc(n_layers);
  std::set<std::size_t> contexts;
  for (const Record &r : records) {
    if (r.kind != RecordKind::quality || !r.ok() || !r.quality || r.dense ||
        r.quality->data_hash != hash)
      continue;
    if (r.layer < 0 || std::size_t(r.layer) >= n_layers)
      throw RecordError("a quality record names layer " + std::to_string(r.layer) +
                        " of a model with " + std::to_string(n_layers) + " layers");
    Candidate c;
    std::string tail, why;
    if (!parse_kernel(r.kernel, c.K, c.L, tail, why))
      throw RecordError("a quality record's kernel: " + why);
    c.t = r.t;
    if (t.kernel_tail.empty())
      t.kernel_tail = tail;
    if (t.model_hash.empty())
      t.model_hash = r.quality->model_hash;
    contexts.insert(r.workload.context);
    LayerTable &lt = t.layers[std::size_t(r.layer)];
    auto it = std::find(lt.candidates.begin(), lt.candidates.end(), c);
    std::size_t i = std::size_t(it - lt.candidates.begin());
    if (it == lt.candidates.end()) {
      lt.candidates.push_back(c);
      acc[std::size_t(r.layer)].emplace_back();
    }
    Acc &a = acc[std::size_t(r.layer)][i];
    a.e += r.quality->value;
    a.p += r.quality->p90;
    a.c += r.quality->cost2;
    ++a.n;
  }
  for (std::size_t l = 0; l < n_layers; ++l)
    for (const Acc &a : acc[l]) {
      t.layers[l].error.push_back(a.e / a.n);
      t.layers[l].p90.push_back(a.p / a.n);
      t.layers[l].cost2.push_back(a.c / a.n);
    }
  t.contexts.assign(contexts.begin(), contexts.end());
  return t;
}

QualityTable with_layer_times(QualityTable t, const std::vector<LayerTime> &times) {
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    LayerTable &lt = t.layers[l];
    LayerTable out;
    out.dense_cost = std::numeric_limits<double>::infinity();
    for (const LayerTime &x : times)
      if (x.layer == int(l) && x.c.dense)
        out.dense_cost = x.seconds;
    for (std::size_t i = 0; i < lt.candidates.size(); ++i)
      for (const LayerTime &x : times)
        if (x.layer == int(l) && !x.c.dense && x.c == lt.candidates[i]) {
          out.candidates.push_back(lt.candidates[i]);
          out.error.push_back(lt.error[i]);
          out.p90.push_back(lt.p90[i]);
          out.cost2.push_back(lt.cost2[i]);
          out.cost.push_back(x.seconds);
          break;
        }
    lt = std::move(out);
  }
  return t;
}

std::optional<OperatingPoint> uniform_point(const QualityTable &t, const Candidate &c,
                                            const std::vector<std::size_t> &dense_layers) {
  std::vector<std::vector<Option>> opts(t.layers.size());
  std::vector<std::size_t> pick(t.layers.size(), 0);
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    if (std::count(dense_layers.begin(), dense_layers.end(), l)) {
      opts[l].push_back({Candidate{{0, 0, 0}, true}, 0.0, t.layers[l].dense_cost, 0, 1.0});
      continue;
    }
    const LayerTable &lt = t.layers[l];
    auto it = std::find(lt.candidates.begin(), lt.candidates.end(), c);
    if (it == lt.candidates.end())
      return std::nullopt;
    const std::size_t i = std::size_t(it - lt.candidates.begin());
    opts[l].push_back({c, lt.error[i], lt.cost.empty() ? lt.cost2[i] : lt.cost[i], i, lt.cost2[i]});
  }
  return make_point(t, opts, pick, "uniform " + choice_str(c));
}

std::optional<OperatingPoint> select_per_layer_max_error(const QualityTable &t, double max_error,
                                                         bool allow_dense) {
  const auto opts = options_of(t, allow_dense);
  // lambda large enough that every layer takes its most accurate option.
  double hi = 1.0;
  while (totals(opts, lagrange(opts, hi)).error > max_error && hi < 1e15)
    hi *= 4;
  if (totals(opts, lagrange(opts, hi)).error > max_error)
    return std::nullopt;
  double lo = 0;
  if (totals(opts, lagrange(opts, lo)).error > max_error) {
    for (int i = 0; i < 200; ++i) {
      const double mid = 0.5 * (lo + hi);
      (totals(opts, lagrange(opts, mid)).error > max_error ? lo : hi) = mid;
    }
  } else
    hi = lo;
  auto pick = lagrange(opts, hi);
  fill_slack(opts, pick, true, max_error);
  if (auto exact = exact_pick(opts, true, max_error, totals(opts, pick).cost * double(opts.size())))
    pick = std::move(*exact);
  char crit[64];
  std::snprintf(crit, sizeof crit, "max-error %g", max_error);
  return make_point(t, opts, pick, crit);
}

std::optional<OperatingPoint> select_per_layer_max_cost(const QualityTable &t, double max_cost2,
                                                        bool allow_dense) {
  const auto opts = options_of(t, allow_dense);
  if (totals(opts, lagrange(opts, 0)).cost > max_cost2)
    return std::nullopt;
  double lo = 0, hi = 1.0;
  while (totals(opts, lagrange(opts, hi)).cost <= max_cost2 && hi < 1e15)
    hi *= 4;
  if (totals(opts, lagrange(opts, hi)).cost <= max_cost2)
    lo = hi;
  else
    for (int i = 0; i < 200; ++i) {
      const double mid = 0.5 * (lo + hi);
      (totals(opts, lagrange(opts, mid)).cost <= max_cost2 ? lo : hi) = mid;
    }
  auto pick = lagrange(opts, lo);
  fill_slack(opts, pick, false, max_cost2);
  if (auto exact =
          exact_pick(opts, false, max_cost2, totals(opts, pick).error * double(opts.size())))
    pick = std::move(*exact);
  char crit[64];
  std::snprintf(crit, sizeof crit, "max-cost2 %g", max_cost2);
  return make_point(t, opts, pick, crit);
}

std::string model_hash_of(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read " + path);
  std::uint64_t h = 1469598103934665603ull;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    const size_t n = size_t(in.gcount());
    for (size_t i = 0; i < n; ++i)
      h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
  }
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

void require_every_layer(const QualityTable &t) {
  std::string missing; // runs: "3, 7-9"
  size_t n = 0;
  for (size_t l = 0; l < t.layers.size(); ++l) {
    if (!t.layers[l].candidates.empty())
      continue;
    size_t e = l;
    while (e + 1 < t.layers.size() && t.layers[e + 1].candidates.empty())
      ++e;
    missing.append(missing.empty() ? "" : ", ").append(std::to_string(l));
    if (e > l) // append: GCC 12's -Wrestrict false positive on "-" + std::string
      missing.append("-").append(std::to_string(e));
    n += e - l + 1;
    l = e;
  }
  if (n)
    throw std::runtime_error("the quality records (data hash " + t.data_hash +
                             ") measure no candidate on layer" + (n > 1 ? "s " : " ") + missing +
                             " of " + std::to_string(t.layers.size()) +
                             ": a point would make them dense (rerun pig-tune accuracy to "
                             "measure them; the records so far are kept)");
}

} // namespace pig::tune
