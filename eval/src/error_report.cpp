// attention-error's report: raw points to attention_error.csv, per-(context, method, config)
// aggregates to attention_error_summary.csv and markdown, error-vs-cost plots (gnuplot).
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "pig/spec/files.h"
#include "reports.h"

namespace pig::eval {

ErrorReport::ErrorReport(const EvalOptions &e, const AttentionErrorOptions &o)
    : e_(e), o_(o), raw_(e.out + "/attention_error.csv",
                         {"context", "layer", "head", "method", "config", "cost", "error"}) {}

void ErrorReport::Add(size_t context, size_t layer, size_t head, const ErrorPoint &p) {
  raw_.row({std::to_string(context), std::to_string(layer), std::to_string(head), p.method,
            p.config, Fmt("%.6f", p.cost), Fmt("%.6f", p.error)});
  for (size_t l : {layer, kAllLayers}) {
    auto &m = l == kAllLayers ? all_ : per_layer_[l];
    auto [it, fresh] = m.try_emplace(ErrorKey{context, p.method, p.config});
    if (fresh)
      it->second.order = m.size();
    it->second.cost.add(p.cost);
    it->second.err.add(p.error);
  }
}

void ErrorReport::Finish(double seconds, double prefill_seconds) {
  const std::string dir = e_.out;
  {
    Csv s(dir + "/attention_error_summary.csv",
          {"context", "method", "config", "samples", "mean_cost", "mean_error", "sd_error"});
    for (const auto &[k, a] : Sorted(all_))
      s.row({std::to_string(k.context), k.method, k.config, std::to_string(a.err.n),
             Fmt("%.6f", a.cost.mean), Fmt("%.6f", a.err.mean), Fmt("%.6f", a.err.sd())});
  }
  Plot();
  Markdown(seconds, prefill_seconds);
}

std::vector<std::pair<ErrorKey, ErrorAgg>> ErrorReport::Sorted(const Map &m) {
  std::vector<std::pair<ErrorKey, ErrorAgg>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(), [](const auto &a, const auto &b) {
    return std::tie(a.first.context, a.second.order) < std::tie(b.first.context, b.second.order);
  });
  return v;
}

std::string ErrorReport::Series(const Map &m, size_t context, const std::string &method) {
  std::vector<std::pair<double, double>> pts;
  for (const auto &[k, a] : m)
    if (k.context == context && k.method == method && k.config.rfind("= ", 0) != 0)
      pts.push_back({a.cost.mean, a.err.mean});
  std::sort(pts.begin(), pts.end());
  std::string s;
  for (auto [c, e] : pts)
    s += Fmt("%.6f", 100 * c) + " " + Fmt("%.6f", e) + "\n";
  return s;
}

void ErrorReport::Plot() const {
  const std::string dir = e_.out + "/plotdata";
  spec::MakeDirs(dir);
  const char *methods[] = {"TopK", "Quest", "Oracle", "MagicPIG", "LSH-hybrid"};
  std::string gp = "set terminal pngcairo size 1500,460 font ',11'\n"
                   "set output '" +
                   e_.out +
                   "/attention_error.png'\n"
                   "set multiplot layout 1," +
                   std::to_string(o_.contexts.size()) +
                   " title 'Relative L2 error of the attention output vs exact, real KV caches "
                   "of SmolLM2-135M (mean over layers " +
                   Join(LayerNames(), ",") +
                   " and all 9 query heads)'\n"
                   "set logscale y\nset grid\nset key top right\n"
                   "set xlabel 'cost: tokens read / indexed tokens (%)'\n"
                   "set ylabel 'relative L2 error'\nset xrange [0:*]\n";
  for (size_t ctx : o_.contexts) {
    std::vector<std::string> plots;
    for (const char *m : methods) {
      const std::string f = dir + "/err_" + std::to_string(ctx) + "_" + m + ".dat";
      spec::WriteFileAtomically(f, Series(all_, ctx, m));
      plots.push_back("'" + f + "' using 1:2 with linespoints lw 2 title '" + m + "'");
    }
    gp += "set title 'KV cache of " + std::to_string(ctx) + " tokens'\nplot " + Join(plots, ", ") +
          "\n";
  }
  gp += "unset multiplot\n";
  // Figure 4 of the paper, per layer: TopK's error against its budget, with MagicPIG's.
  const size_t ctx = o_.contexts.back();
  gp += "set terminal pngcairo size 900,560 font ',11'\nset output '" + e_.out +
        "/attention_error_layers.png'\n"
        "set title 'Per layer, KV cache of " +
        std::to_string(ctx) +
        " tokens (mean over 9 query heads): TopK solid, MagicPIG dashed'\n"
        "set key outside right\n";
  std::vector<std::string> plots;
  int color = 1;
  for (size_t layer : e_.layers) {
    for (const char *m : {"TopK", "MagicPIG"}) {
      const std::string f =
          dir + "/err_layer" + std::to_string(layer) + "_" + std::to_string(ctx) + "_" + m + ".dat";
      spec::WriteFileAtomically(f, Series(per_layer_.at(layer), ctx, m));
      plots.push_back("'" + f + "' using 1:2 with linespoints lw 2 lc " + std::to_string(color) +
                      (std::string(m) == "TopK" ? " dt 1" : " dt 2") + " title '" + m + " layer " +
                      std::to_string(layer) + "'");
    }
    ++color;
  }
  gp += "plot " + Join(plots, ", ") + "\n";
  const std::string script = e_.out + "/attention_error.gp";
  spec::WriteFileAtomically(script, gp);
  RunGnuplot(script);
}

std::vector<std::string> ErrorReport::LayerNames() const {
  std::vector<std::string> v;
  for (size_t l : e_.layers)
    v.push_back(std::to_string(l));
  return v;
}

void ErrorReport::Markdown(double seconds, double prefill_seconds) const {
  std::string md;
  md += "Command: `" + e_.command_line + "` (" + Fmt("%.0f", seconds) +
        " s wall in total for this part, of which " + Fmt("%.0f", prefill_seconds) +
        " s the model's prefill). Layers " + Join(LayerNames(), ", ") +
        ", all query heads; per cell: mean relative L2 error (standard deviation) over " +
        "layers x heads, and the mean cost (tokens read / indexed tokens).\n\n";
  std::string head = "| method | config |", sep = "|---|---|";
  for (size_t ctx : o_.contexts) {
    head += " n = " + std::to_string(ctx) + " |";
    sep += "---|";
  }
  md += head + "\n" + sep + "\n";
  // Rows in the order of the first context; cells looked up per context.
  for (const auto &[k, a] : Sorted(all_)) {
    if (k.context != o_.contexts.front())
      continue;
    std::string row = "| " + k.method + " | " + k.config + " |";
    for (size_t ctx : o_.contexts) {
      auto it = all_.find(ErrorKey{ctx, k.method, k.config});
      if (it == all_.end()) {
        row += " |";
        continue;
      }
      const ErrorAgg &c = it->second;
      // Appended in two steps: GCC 12 reports a false -Wrestrict on `" " + std::string` here.
      row += ' ';
      row += Fmt("%.3f", c.err.mean) + " (" + Fmt("%.3f", c.err.sd()) + ") at " +
             Fmt("%.2f", 100 * c.cost.mean) + " % |";
    }
    md += row + "\n";
  }
  if (!all_.empty())
    md += "\nSamples per cell: " + std::to_string(all_.begin()->second.err.n) +
          " (layers x query heads, one decode step each).\n";
  spec::WriteFileAtomically(e_.out + "/attention_error.md", md);
  if (!e_.update_doc.empty())
    UpdateMarkedSection(e_.update_doc, "attention-error", md);
  std::printf("\n%s", md.c_str());
}

} // namespace pig::eval
