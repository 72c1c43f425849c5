#include "pig/eval/transform_report.h"
#include "pig/spec/files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace pig::eval {

namespace {

std::string Ratio(std::optional<double> v, double base) {
  if (!v)
    return "n/a";
  return Fmt("%.3f", *v) + " (" + Fmt("%.2f", *v / base) + "x)";
}

} // namespace

TransformReport::TransformReport(TransformReportOptions o) : o_(std::move(o)) {
  if (o_.grid.transforms.empty() || !o_.grid.transforms.front().identity())
    throw std::invalid_argument("TransformReport: the first transform must be plain");
  const auto it = std::find_if(o_.grid.grid.begin(), o_.grid.grid.end(), [&](KL kl) {
    return kl.K == o_.reference.K && kl.L == o_.reference.L;
  });
  if (it == o_.grid.grid.end())
    throw std::invalid_argument(
        "TransformReport: the reference K=" + std::to_string(o_.reference.K) +
        " L=" + std::to_string(o_.reference.L) + " is not in the grid");
  ref_ = std::size_t(it - o_.grid.grid.begin());
  raw_ = std::make_unique<Csv>(
      o_.out + "/transforms.csv",
      std::vector<std::string>{"context", "layer", "head", "transform", "K", "L", "cost", "error"});
}

void TransformReport::Add(std::size_t context, std::size_t layer, std::size_t head,
                          const TransformPoint &p) {
  const KL kl = o_.grid.grid[p.grid];
  raw_->row({std::to_string(context), std::to_string(layer), std::to_string(head),
             o_.grid.transforms[p.transform].str(), std::to_string(kl.K), std::to_string(kl.L),
             Fmt("%.6f", p.cost), Fmt("%.6f", p.error)});
  for (std::size_t l : {layer, kAll}) {
    Cell &c = cells_[{context, l, p.transform, p.grid}];
    c.cost.push_back(p.cost);
    c.error.push_back(p.error);
  }
}

std::vector<std::pair<double, double>> TransformReport::Frontier(std::size_t ctx, std::size_t layer,
                                                                 std::size_t t, bool median) const {
  std::vector<std::pair<double, double>> pts;
  for (std::size_t g = 0; g < o_.grid.grid.size(); ++g) {
    const auto it = cells_.find({ctx, layer, t, g});
    if (it != cells_.end())
      pts.push_back(
          {Mean(it->second.cost), median ? Median(it->second.error) : Mean(it->second.error)});
  }
  return pts;
}

std::string TransformReport::Markdown(double seconds, double prefill_seconds) const {
  const auto &T = o_.grid.transforms;
  std::vector<std::string> layer_names;
  for (std::size_t l : o_.layers)
    layer_names.push_back(std::to_string(l));
  std::string grid;
  for (KL kl : o_.grid.grid)
    grid.append(grid.empty() ? "" : ",")
        .append(std::to_string(kl.K))
        .append(":")
        .append(std::to_string(kl.L));
  std::string refname = "(";
  refname.append(std::to_string(o_.reference.K)).append(",");
  refname.append(std::to_string(o_.reference.L)).append(")");
  std::string md;
  md += "Command: `" + o_.command_line + "` (" + Fmt("%.0f", seconds) + " s for this part, " +
        Fmt("%.0f", prefill_seconds) + " s of it the model's prefill). Layers " +
        Join(layer_names, ", ") + ", all query heads, t = " + std::to_string(o_.grid.threshold) +
        ", grid (K:L) " + grid + ", pig::ref's estimator throughout.\n\n";
  md += "**Matching.** Each transform's grid gives points (mean cost2, mean error); its "
        "frontier (points no cheaper point beats) is interpolated linearly in log cost2 at the "
        "mean cost2 plain MagicPIG " +
        refname +
        " had, and the same for the median error. "
        "Cells: error at plain's cost (ratio to plain's); n/a: plain's cost lies outside the "
        "transform's frontier (no extrapolation).\n\n";
  std::string head = "| transform |", sep = "|---|";
  for (std::size_t ctx : o_.contexts) {
    head += " n = " + std::to_string(ctx) + ": mean | median |";
    sep += "---|---|";
  }
  md += head + "\n" + sep + "\n";
  for (std::size_t t = 0; t < T.size(); ++t) {
    std::string row = "| " + T[t].str() + (t == 0 ? " " + refname : "") + " |";
    for (std::size_t ctx : o_.contexts) {
      const auto it = cells_.find({ctx, kAll, 0, ref_});
      if (it == cells_.end()) {
        row += " | |";
        continue;
      }
      const double cost = Mean(it->second.cost);
      const double mean0 = Mean(it->second.error), med0 = Median(it->second.error);
      if (t == 0) {
        row.append(" ").append(Fmt("%.3f", mean0)).append(" at ");
        row.append(Fmt("%.2f", 100 * cost)).append(" % | ").append(Fmt("%.3f", med0)).append(" |");
        continue;
      }
      row.append(" ").append(Ratio(ErrorAtCost(Frontier(ctx, kAll, t, false), cost), mean0));
      row.append(" | ").append(Ratio(ErrorAtCost(Frontier(ctx, kAll, t, true), cost), med0));
      row.append(" |");
    }
    md += row + "\n";
  }
  // Per layer: the ratio of the matched mean error to plain's, per context.
  for (std::size_t ctx : o_.contexts) {
    md += "\nPer layer at n = " + std::to_string(ctx) +
          ": plain's mean error, and each transform's matched mean error as a ratio to it.\n\n";
    std::string h = "| layer | plain " + refname + " |", s2 = "|---|---|";
    for (std::size_t t = 1; t < T.size(); ++t) {
      h.append(" ").append(T[t].str()).append(" |");
      s2 += "---|";
    }
    md += h + "\n" + s2 + "\n";
    for (std::size_t layer : o_.layers) {
      const auto it = cells_.find({ctx, layer, 0, ref_});
      if (it == cells_.end())
        continue;
      const double cost = Mean(it->second.cost), mean0 = Mean(it->second.error);
      std::string row = "| " + std::to_string(layer) + " | " + Fmt("%.3f", mean0) + " at " +
                        Fmt("%.2f", 100 * cost) + " % |";
      for (std::size_t t = 1; t < T.size(); ++t) {
        const auto e = ErrorAtCost(Frontier(ctx, layer, t, false), cost);
        row.append(" ").append(e ? Fmt("%.2fx", *e / mean0) : std::string("n/a")).append(" |");
      }
      md += row + "\n";
    }
  }
  md += "\nEvery grid point's mean cost and error: `transforms_grid.csv`; every estimate: "
        "`transforms.csv`; the frontiers: `transforms.png`.\n";
  return md;
}

void TransformReport::Plot() const {
  const std::string dir = o_.out + "/plotdata";
  spec::MakeDirs(dir);
  std::string gp = "set terminal pngcairo size 1500,460 font ',11'\nset output '" + o_.out +
                   "/transforms.png'\nset multiplot layout 1," +
                   std::to_string(o_.contexts.size()) +
                   " title 'MagicPIG with hashing in fitted spaces: mean relative L2 error vs "
                   "mean cost2 over the (K, L) grid'\n"
                   "set logscale xy\nset grid\nset key top right font ',9'\n"
                   "set xlabel 'cost2 (%)'\nset ylabel 'relative L2 error'\n";
  for (std::size_t ctx : o_.contexts) {
    std::vector<std::string> plots;
    for (std::size_t t = 0; t < o_.grid.transforms.size(); ++t) {
      auto pts = Frontier(ctx, kAll, t, false);
      std::sort(pts.begin(), pts.end());
      std::string data;
      for (auto [c, e] : pts)
        data += Fmt("%.6f", 100 * c) + " " + Fmt("%.6f", e) + "\n";
      const std::string f = dir + "/tr_" + std::to_string(ctx) + "_" + std::to_string(t) + ".dat";
      spec::WriteFileAtomically(f, data);
      plots.push_back("'" + f + "' using 1:2 with points pt 7 ps 0.6 title '" +
                      o_.grid.transforms[t].str() + "'");
    }
    gp += "set title 'KV cache of " + std::to_string(ctx) + " tokens'\nplot " + Join(plots, ", ") +
          "\n";
  }
  gp += "unset multiplot\n";
  const std::string script = o_.out + "/transforms.gp";
  spec::WriteFileAtomically(script, gp);
  RunGnuplot(script);
}

void TransformReport::Finish(double seconds, double prefill_seconds) {
  raw_.reset(); // flush
  {
    Csv g(o_.out + "/transforms_grid.csv", {"context", "layer", "transform", "K", "L", "samples",
                                            "mean_cost", "mean_error", "median_error"});
    for (const auto &[k, c] : cells_) {
      const auto &[ctx, layer, t, gi] = k;
      g.row({std::to_string(ctx), layer == kAll ? std::string("all") : std::to_string(layer),
             o_.grid.transforms[t].str(), std::to_string(o_.grid.grid[gi].K),
             std::to_string(o_.grid.grid[gi].L), std::to_string(c.error.size()),
             Fmt("%.6f", Mean(c.cost)), Fmt("%.6f", Mean(c.error)), Fmt("%.6f", Median(c.error))});
    }
  }
  Plot();
  const std::string md = Markdown(seconds, prefill_seconds);
  spec::WriteFileAtomically(o_.out + "/transforms.md", md);
  if (!o_.update_doc.empty())
    UpdateMarkedSection(o_.update_doc, "hash-transforms", md);
  std::printf("\n%s", md.c_str());
}

} // namespace pig::eval
