// pig-tune show: the frontier of the records: the uniform points, the per-layer points at the
// uniform frontier's errors, this machine's speed records; with --out, CSVs and a PNG (gnuplot).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "pig/eval/report.h" // CSV, gnuplot
#include "pig/spec/files.h"
#include "pig/tune/frontier.h"
#include "pig/tune/point.h"
#include "pig/tune/record.h"
#include "replay.h"
#include "workflows.h"

namespace pig::tune {

using namespace workflow;

int RunShow(const CommonOptions &common, const ShowOptions &so) {
  const std::string &records = common.records, &out = so.out;
  const SelectOptions &o = so.select;
  const auto loaded = LoadRecords(records);
  const size_t n_layers = LayersOf(loaded.records);
  const QualityTable t = QualityTableOf(loaded.records, n_layers, o.data_hash);
  const auto dense = DefaultDense(n_layers);
  std::vector<Measured> ms;
  for (const auto &c : t.common())
    if (auto u = uniform_point(t, c, dense))
      ms.push_back({c, u->cost2, u->error});
  const auto front = pareto_frontier(ms);
  std::printf("quality records: data hash %s, %zu layers, contexts", t.data_hash.c_str(), n_layers);
  for (size_t c : t.contexts)
    std::printf(" %zu", c);
  std::printf("\n\nUniform points (one (K, L, t) on every layer but the default dense ones):\n\n"
              "| K | L | t | error | cost2 | frontier |\n|---|---|---|---|---|---|\n");
  std::vector<size_t> order(ms.size());
  for (size_t i = 0; i < ms.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ms[a].cost < ms[b].cost; });
  for (size_t i : order)
    std::printf("| %d | %d | %d | %.4f | %.2f %% | %s |\n", ms[i].c.K, ms[i].c.L, ms[i].c.t,
                ms[i].error, 100 * ms[i].cost,
                std::count(front.begin(), front.end(), i) ? "yes" : "");
  // Per-layer points along the uniform frontier's errors.
  std::printf("\nPer-layer points (pig-tune select --max-error E) at the uniform frontier's "
              "errors:\n\n| max error | error | cost2 | vs uniform cost2 | layers |\n"
              "|---|---|---|---|---|\n");
  std::vector<std::pair<double, double>> per_layer;
  for (size_t i : front) {
    const auto p = select_per_layer_max_error(t, ms[i].error);
    if (!p)
      continue;
    per_layer.push_back({p->cost2, p->error});
    std::printf("| %.4f | %.4f | %.2f %% | %.2fx cheaper | %s |\n", ms[i].error, p->error,
                100 * p->cost2, ms[i].cost / std::max(p->cost2, 1e-12), p->layers_str().c_str());
  }
  // Speed records of this machine.
  bool foreign = false;
  size_t ctx = o.context;
  const auto rows = UsableSpeed(loaded.records, HereFingerprint(common, o), ctx, foreign);
  if (!rows.empty()) {
    std::printf("\nSpeed on this machine at %zu tokens:\n\n| configuration | schedule | step ms | "
                "vs default | error |\n|---|---|---|---|---|\n",
                ctx);
    for (const auto &r : rows)
      std::printf("| %s%s | %s | %.2f | %.2fx | %s |\n", r.r.kernel.c_str(),
                  r.r.kernel.rfind("point", 0) == 0 ? "" : (" t=" + std::to_string(r.r.t)).c_str(),
                  r.r.schedule.c_str(), 1e3 * r.r.time->median_s, r.ratio,
                  r.r.quality ? Fmt("%.4f", r.r.quality->value).c_str() : "?");
  } else if (foreign)
    std::printf("\n(speed records of other machines are not shown)\n");
  if (out.empty())
    return 0;
  pig::spec::MakeDirs(out);
  {
    pig::eval::Csv u(out + "/uniform.csv", {"cost2", "error", "frontier", "K", "L", "t"});
    for (size_t i : order)
      u.row({Fmt("%.6f", ms[i].cost), Fmt("%.6f", ms[i].error),
             std::count(front.begin(), front.end(), i) ? "1" : "0", std::to_string(ms[i].c.K),
             std::to_string(ms[i].c.L), std::to_string(ms[i].c.t)});
    pig::eval::Csv f(out + "/frontier.csv", {"cost2", "error"});
    std::vector<size_t> fs(front.begin(), front.end());
    for (size_t i : fs)
      f.row({Fmt("%.6f", ms[i].cost), Fmt("%.6f", ms[i].error)});
    pig::eval::Csv pl(out + "/per_layer.csv", {"cost2", "error"});
    for (const auto &[k, e] : per_layer)
      pl.row({Fmt("%.6f", k), Fmt("%.6f", e)});
    pig::eval::Csv sp(out + "/speed.csv", {"step_ms", "error", "ratio"});
    for (const auto &r : rows)
      if (r.r.quality)
        sp.row({Fmt("%.4f", 1e3 * r.r.time->median_s), Fmt("%.6f", r.r.quality->value),
                Fmt("%.4f", r.ratio)});
  }
  const auto def = uniform_point(t, DefaultCandidate(), dense);
  std::string gp = "set datafile separator ','\nset terminal pngcairo size 1300,500 noenhanced "
                   "font ',10'\nset output '" +
                   out + "/frontier.png'\nset multiplot layout 1," + (rows.empty() ? "1" : "2") +
                   " title 'pig-tune: attention error vs cost (" + t.data_hash + ")'\n" +
                   "set grid\nset key top right\nset logscale x\nset xlabel 'cost2 (mean over "
                   "layers, dense layer = 1)'\nset ylabel 'attention error (relative L2, mean "
                   "over layers)'\nset title 'quality'\n";
  gp += "plot '" + out +
        "/uniform.csv' every ::1 using 1:2 with points pt 7 ps 0.6 lc rgb "
        "'#999999' title 'uniform candidates', '" +
        out +
        "/frontier.csv' every ::1 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' title "
        "'uniform frontier', '" +
        out +
        "/per_layer.csv' every ::1 using 1:2 with linespoints lw 2 lc rgb '#d62728' title "
        "'per-layer points'";
  if (def)
    gp += ", '-' using 1:2 with points pt 9 ps 2 lc rgb '#2ca02c' title 'default (10,150)'\n" +
          Fmt("%.6f", def->cost2) + "," + Fmt("%.6f", def->error) + "\ne";
  gp += "\n";
  if (!rows.empty())
    gp += "unset logscale x\nset xlabel 'decode speed-up over the default (10,150), same run, " +
          std::to_string(ctx) + " tokens, this machine'\nset title 'speed'\nplot '" + out +
          "/speed.csv' every ::1 using 3:2 with points pt 7 ps 1.2 title 'measured points'\n";
  gp += "unset multiplot\n";
  pig::spec::WriteFileAtomically(out + "/frontier.gp", gp);
  if (pig::eval::RunGnuplot(out + "/frontier.gp"))
    std::printf("\nwrote %s/frontier.png\n", out.c_str());
  return 0;
}

} // namespace pig::tune
