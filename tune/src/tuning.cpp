#include "pig/tune/tuning.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace pig::tune {

std::vector<runtime::LayerLsh> LayerChoices(const OperatingPoint &p) {
  std::vector<runtime::LayerLsh> out;
  for (const LayerChoice &l : p.layers)
    out.push_back(l.c.dense ? runtime::LayerLsh{true}
                            : runtime::LayerLsh{false, l.c.K, l.c.L, l.c.t});
  return out;
}

std::optional<double> ParseMaxError(const std::string &text) {
  char *end = nullptr;
  const double e = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(e >= 0))
    return std::nullopt;
  return e;
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

Tuning LoadTuning(const std::string &file, std::optional<double> max_error, size_t n_layers) {
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
  return t;
}

} // namespace pig::tune
