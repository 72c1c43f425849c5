#include "pig/app/tuning.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "pig/spec/kernel_key.h"

namespace pig::app {

// The points, records and selection are tune's; this file applies them to the runtime.
using namespace pig::tune;

std::vector<runtime::LayerLsh> LayerChoices(const OperatingPoint &p) {
  std::vector<runtime::LayerLsh> out;
  for (const LayerChoice &l : p.layers)
    out.push_back(l.c.dense ? runtime::LayerLsh{{}, true}
                            : runtime::LayerLsh{{l.c.K, l.c.L, l.c.t}});
  return out;
}

runtime::AttentionSpec ApplyTuning(runtime::AttentionSpec spec, const OperatingPoint &p) {
  spec.method = pig::spec::Method::magicpig;
  spec.layers = LayerChoices(p);
  spec.dense_layers.clear();
  spec.dense_layers_set = false;
  if (!p.schedule.empty()) {
    std::string err;
    const auto s = runtime::lsh::Schedule::parse(p.schedule, &err);
    if (!s)
      throw std::runtime_error("the operating point's schedule: " + err);
    spec.schedule = *s;
  }
  return spec;
}

namespace {

// What the point was made for against the target: each difference refused (TuningMismatch), or
// a warning with force; what the point does not say, a warning.
void CheckTarget(const std::string &file, const OperatingPoint &p, const TuningTarget &target,
                 std::vector<std::string> &warnings) {
  std::vector<std::string> mismatches;
  if (p.kernel_tail.empty()) {
    if (target.head_dim || target.kv)
      warnings.push_back(file + " does not say its head dim and KV type (no \"kernel\"): not "
                                "checked");
  } else {
    std::string err;
    const auto key = spec::KernelKey::parse("K=1 L=1 " + p.kernel_tail, &err);
    if (!key)
      throw TuningMismatch(target.flag + " " + file + ": field 'kernel' '" + p.kernel_tail +
                           "' cannot be read (expected e.g. 'd=64 bf16'): " + err);
    if (target.head_dim && size_t(key->d) != target.head_dim)
      mismatches.push_back("head dim " + std::to_string(key->d) +
                           " (field 'kernel'), the model's is " + std::to_string(target.head_dim));
    if (target.kv && key->dtype != *target.kv)
      mismatches.push_back(std::string("a ") + spec::name(key->dtype) +
                           " KV cache (field 'kernel'), this run's is " + spec::name(*target.kv) +
                           " (--kv)");
  }
  if (!target.model_path.empty()) {
    if (p.model_hash.empty())
      warnings.push_back(file + " does not name the model it was made for (no \"model_hash\": "
                                "selected from older records): not checked");
    else {
      const std::string here = model_hash_of(target.model_path);
      if (here != p.model_hash)
        mismatches.push_back("another model (field 'model_hash' " + p.model_hash + ", " +
                             target.model_path + " hashes to " + here + ")");
    }
  }
  if (mismatches.empty())
    return;
  std::string all;
  for (const std::string &m : mismatches)
    all += (all.empty() ? "" : "; ") + m;
  if (!target.force)
    throw TuningMismatch(target.flag + " " + file + ": the point was made for " + all +
                         " (--force-tuning uses it anyway)");
  warnings.push_back(file + ": the point was made for " + all + "; used anyway (--force-tuning)");
}

} // namespace

Tuning LoadTuning(const std::string &file, std::optional<double> max_error, size_t n_layers) {
  TuningTarget target;
  target.n_layers = n_layers;
  return LoadTuning(file, max_error, target);
}

Tuning LoadTuning(const std::string &file, std::optional<double> max_error,
                  const TuningTarget &target) {
  const size_t n_layers = target.n_layers;
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw std::runtime_error("--tuning " + file + ": cannot be read");
  std::string first;
  std::getline(in, first);
  Tuning t;
  try {
    // A point file is one pretty-printed JSON document; a records file has one record per line.
    const bool records = first.find("\"kind\"") != std::string::npos &&
                         first.find("operating_point") == std::string::npos;
    if (!records) {
      t.point = load_point(file);
      t.source = "operating point " + file;
      if (max_error)
        t.warnings.push_back("--max-error is ignored: " + file + " is an operating point");
    } else {
      if (!max_error)
        throw std::runtime_error("--tuning " + file +
                                 " is a records file: give --max-error E to select a point");
      LoadedRecords loaded = load_records(file);
      for (const std::string &p : loaded.problems)
        t.warnings.push_back(file + ": skipped " + p);
      const QualityTable table = build_quality_table(loaded.records, n_layers);
      require_every_layer(table);
      auto p = select_per_layer_max_error(table, *max_error);
      if (!p)
        throw std::runtime_error("no point of " + file + " meets --max-error");
      t.point = *p;
      t.source = "selected from " + file + " (" + p->criterion + ")";
    }
  } catch (const RecordError &e) {
    throw std::runtime_error(std::string("--tuning: ") + e.what());
  }
  if (t.point.layers.size() != n_layers)
    throw std::runtime_error("--tuning " + file + ": the point has " +
                             std::to_string(t.point.layers.size()) + " layers, the model " +
                             std::to_string(n_layers));
  CheckTarget(file, t.point, target, t.warnings);
  return t;
}

} // namespace pig::app
