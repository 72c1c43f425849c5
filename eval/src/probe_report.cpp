#include "pig/eval/probe_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <stdexcept>

#include "pig/runtime/lsh_index.h"
#include "pig/spec/files.h"
#include "pig/spec/kv_type.h"

namespace pig::eval {

namespace {

// The runtime index's bytes per token per kv-head over `indexed` tokens (lsh_index.h).
double IndexBytes(std::size_t indexed, int K, int L) {
  return runtime::lsh::IndexLayout::of(indexed, K, L).bytes_per_token();
}

std::string Name(const spec::LshParams &p) {
  return "K=" + std::to_string(p.K) + " L=" + std::to_string(p.L) + " r=" + std::to_string(p.r);
}

} // namespace

std::vector<spec::LshParams> DefaultProbeGrid() {
  std::vector<spec::LshParams> g;
  for (int K = 8; K <= 11; ++K)
    for (int L : {75, 100, 120, 150})
      g.push_back({K, L, 2, 0});
  for (int K = 11; K <= 13; ++K)
    for (int L : {40, 45, 50, 55, 60, 75})
      g.push_back({K, L, 2, 1});
  for (int K = 14; K <= 15; ++K)
    for (int L : {25, 30, 35})
      g.push_back({K, L, 2, 2});
  return g;
}

ProbeReport::ProbeReport(ProbeReportOptions o) : o_(std::move(o)) {
  const auto it = std::find(o_.grid.configs.begin(), o_.grid.configs.end(), o_.reference);
  if (it == o_.grid.configs.end())
    throw std::invalid_argument("ProbeReport: the reference " + o_.reference.str() +
                                " is not in the grid");
  ref_ = std::size_t(it - o_.grid.configs.begin());
  raw_ = std::make_unique<Csv>(
      o_.out + "/probes.csv",
      std::vector<std::string>{"context", "layer", "head", "K", "L", "t", "r", "cost", "error"});
}

void ProbeReport::Add(std::size_t context, std::size_t layer, std::size_t head,
                      const ProbePoint &p) {
  const spec::LshParams &c = o_.grid.configs[p.config];
  raw_->row({std::to_string(context), std::to_string(layer), std::to_string(head),
             std::to_string(c.K), std::to_string(c.L), std::to_string(c.t), std::to_string(c.r),
             Fmt("%.6f", p.cost), Fmt("%.6f", p.error)});
  Cell &cell = cells_[{context, p.config}];
  cell.cost.push_back(p.cost);
  cell.error.push_back(p.error);
}

std::string ProbeReport::Markdown(double seconds, double prefill_seconds) const {
  const auto &C = o_.grid.configs;
  std::vector<std::string> layer_names;
  for (std::size_t l : o_.layers)
    layer_names.push_back(std::to_string(l));
  const double kv64 = double(2 * spec::row_bytes(spec::DType::bf16, 64));
  const double kv128 = double(2 * spec::row_bytes(spec::DType::bf16, 128));
  std::set<int> radii;
  for (const spec::LshParams &c : C)
    radii.insert(c.r);
  std::string md;
  md += "Command: `" + o_.command_line + "` (" + Fmt("%.0f", seconds) + " s for this part, " +
        Fmt("%.0f", prefill_seconds) + " s of it the model's prefill). Layers " +
        Join(layer_names, ", ") +
        ", all query heads, pig::ref's estimator with the multi-probe collision probability. "
        "Index: the runtime's bytes per token per kv-head (u16 ids, L per token, and the "
        "bucket offsets); bf16 K and V rows take " +
        Fmt("%.0f", kv64) + " B at d = 64 and " + Fmt("%.0f", kv128) + " B at d = 128.\n\n";
  for (std::size_t ctx : o_.contexts) {
    const auto rit = cells_.find({ctx, ref_});
    if (rit == cells_.end())
      continue;
    const std::size_t indexed = ref::split_tokens(ctx, o_.grid.statics).indexed();
    const double rcost = Mean(rit->second.cost), rerr = Mean(rit->second.error);
    const double rmed = Median(rit->second.error);
    md += "**n = " + std::to_string(ctx) + "**, reference " + Name(o_.reference) + ": cost2 " +
          Fmt("%.2f", 100 * rcost) + " %, error " + Fmt("%.3f", rerr) + " (median " +
          Fmt("%.3f", rmed) + "), index " +
          Fmt("%.1f", IndexBytes(indexed, o_.reference.K, o_.reference.L)) + " B.\n\n";
    md += "Per probe radius: the mean (median) error on that radius's frontier at the "
          "reference's cost2 (n/a: outside the frontier), and the smallest index among its "
          "configurations at most as costly and as wrong as the reference.\n\n";
    md += "| r | probes per table | error at matched cost2 | median | smallest index no worse "
          "| B/token |\n|---|---|---|---|---|---|\n";
    for (int r : radii) {
      std::vector<std::pair<double, double>> mean_pts, med_pts;
      std::optional<std::size_t> best;
      for (std::size_t c = 0; c < C.size(); ++c) {
        const auto it = cells_.find({ctx, c});
        if (C[c].r != r || it == cells_.end())
          continue;
        const double cost = Mean(it->second.cost), err = Mean(it->second.error);
        mean_pts.push_back({cost, err});
        med_pts.push_back({cost, Median(it->second.error)});
        if (cost <= rcost * 1.0001 && err <= rerr * 1.0001 &&
            (!best ||
             IndexBytes(indexed, C[c].K, C[c].L) < IndexBytes(indexed, C[*best].K, C[*best].L)))
          best = c;
      }
      const auto e = ErrorAtCost(mean_pts, rcost), m = ErrorAtCost(med_pts, rcost);
      md += "| " + std::to_string(r) + " | " +
            std::to_string(spec::probes_per_table(o_.reference.K, r)) +
            " at K = " + std::to_string(o_.reference.K) + " | " +
            (e ? Fmt("%.3f", *e) + " (" + Fmt("%.2f", *e / rerr) + "x)" : std::string("n/a")) +
            " | " + (m ? Fmt("%.3f", *m) : std::string("n/a")) + " | " +
            (best ? Name(C[*best]) : std::string("none")) + " | " +
            (best ? Fmt("%.1f", IndexBytes(indexed, C[*best].K, C[*best].L)) : std::string("")) +
            " |\n";
    }
    md += "\nEvery configuration:\n\n| configuration | probes per table | cost2 | error | "
          "median | index B/token | / KV d=64 | / KV d=128 |\n|---|---|---|---|---|---|---|---|\n";
    for (std::size_t c = 0; c < C.size(); ++c) {
      const auto it = cells_.find({ctx, c});
      if (it == cells_.end())
        continue;
      const double bytes = IndexBytes(indexed, C[c].K, C[c].L);
      md += "| " + Name(C[c]) + " | " + std::to_string(spec::probes_per_table(C[c].K, C[c].r)) +
            " | " + Fmt("%.2f", 100 * Mean(it->second.cost)) + " % | " +
            Fmt("%.3f", Mean(it->second.error)) + " | " + Fmt("%.3f", Median(it->second.error)) +
            " | " + Fmt("%.1f", bytes) + " | " + Fmt("%.2f", bytes / kv64) + " | " +
            Fmt("%.2f", bytes / kv128) + " |\n";
    }
    md += "\n";
  }
  md += "Every estimate: `probes.csv`; per configuration: `probes_grid.csv`.\n";
  return md;
}

void ProbeReport::Finish(double seconds, double prefill_seconds) {
  raw_.reset(); // flush
  {
    Csv g(o_.out + "/probes_grid.csv", {"context", "K", "L", "t", "r", "samples", "mean_cost",
                                        "mean_error", "median_error", "index_bytes_per_token"});
    for (const auto &[k, c] : cells_) {
      const auto &[ctx, ci] = k;
      const spec::LshParams &p = o_.grid.configs[ci];
      g.row({std::to_string(ctx), std::to_string(p.K), std::to_string(p.L), std::to_string(p.t),
             std::to_string(p.r), std::to_string(c.error.size()), Fmt("%.6f", Mean(c.cost)),
             Fmt("%.6f", Mean(c.error)), Fmt("%.6f", Median(c.error)),
             Fmt("%.2f", IndexBytes(ref::split_tokens(ctx, o_.grid.statics).indexed(), p.K, p.L))});
    }
  }
  const std::string md = Markdown(seconds, prefill_seconds);
  spec::WriteFileAtomically(o_.out + "/probes.md", md);
  if (!o_.update_doc.empty())
    UpdateMarkedSection(o_.update_doc, "multi-probe", md);
  std::printf("\n%s", md.c_str());
}

} // namespace pig::eval
