// pig-tune select: an operating point from the records (no measuring): the cheapest per-layer (or
// uniform) point within an error bound, the most accurate within a cost2 bound, the most accurate
// measured point at a speed-up over the default; with --cost time, on this machine's per-layer
// times.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "pig/app/tuning.h"
#include "pig/tune/frontier.h"
#include "pig/tune/point.h"
#include "pig/tune/record.h"
#include "replay.h"
#include "workflows.h"

namespace pig::tune {

using namespace workflow;

namespace {

void PrintPoint(const OperatingPoint &p) {
  std::printf("criterion: %s\nlayers: %s\npredicted attention error (mean over layers): %.4f\n"
              "predicted cost2 (mean over layers, dense = 100 %%): %.2f %%\n",
              p.criterion.c_str(), p.layers_str().c_str(), p.error, 100 * p.cost2);
  if (!p.schedule.empty())
    std::printf("schedule: %s\n", p.schedule.c_str());
}

} // namespace

int RunSelect(const CommonOptions &common, const SelectOptions &o) {
  const std::string &records = common.records;
  const auto loaded = LoadRecords(records);
  const size_t n_layers = LayersOf(loaded.records);
  const QualityTable t = QualityTableOf(loaded.records, n_layers, o.data_hash);
  require_every_layer(t);
  std::optional<OperatingPoint> p;
  const auto dense = DefaultDense(n_layers);
  std::optional<LayerTimes> times;
  std::optional<QualityTable> timed;
  double def_step = 0;
  if (o.cost == "time") {
    bool foreign = false;
    times = LoadLayerTimes(loaded.records, HereFingerprint(common, o), o.context, foreign);
    if (!times) {
      // Never a time measured elsewhere: one warning, then the fallback (selection on cost2).
      std::fprintf(stderr,
                   "pig-tune: warning: no per-layer times of this machine (%s)%s; selecting on "
                   "cost2 instead (run pig-tune speed --per-layer)\n",
                   HereFingerprint(common, o).str().c_str(),
                   foreign ? " (times of other machines are not applied)" : "");
    } else {
      timed = with_layer_times(t, times->times);
      const auto d = uniform_point(*timed, DefaultCandidate(), dense);
      if (!d)
        throw std::runtime_error("the per-layer times lack the default (10, 150) on some layer");
      def_step = times->rest_s + d->attention_s;
    }
  }
  if (timed && o.min_speedup) {
    // Predicted: the step is the time outside attention plus the layers' attention times.
    const double budget = def_step / *o.min_speedup - times->rest_s;
    if (budget > 0)
      p = select_per_layer_max_cost(*timed, budget / double(n_layers));
    if (!p)
      throw std::runtime_error("no point is predicted to reach " + Fmt("%g", *o.min_speedup) +
                               "x the default at " + std::to_string(times->context) +
                               " tokens (the time outside attention alone is " +
                               Fmt("%.2f", 1e3 * times->rest_s) + " ms of the default's " +
                               Fmt("%.2f", 1e3 * def_step) + " ms)");
    p->criterion = "min-speedup " + Fmt("%g", *o.min_speedup) + " at " +
                   std::to_string(times->context) + " tokens (per-layer times)";
  } else if (timed && o.max_error) {
    p = select_per_layer_max_error(*timed, *o.max_error);
    if (p)
      p->criterion = "max-error " + Fmt("%g", *o.max_error) + ", fastest at " +
                     std::to_string(times->context) + " tokens (per-layer times)";
  } else if (timed && o.max_cost2) {
    throw UsageError("--max-cost2", "bounds cost2; with --cost time use --min-speedup");
  } else if (o.min_speedup) {
    const Fingerprint fp = HereFingerprint(common, o);
    size_t ctx = o.context;
    bool foreign = false;
    const auto rows = UsableSpeed(loaded.records, fp, ctx, foreign);
    if (rows.empty()) {
      // Never a speed measured elsewhere: one warning, then the fallback (the default point).
      std::fprintf(stderr,
                   "pig-tune: warning: no speed record of this machine (%s)%s; falling back to "
                   "the default (10, 150)\n",
                   fp.str().c_str(), foreign ? " (records of other machines are not applied)" : "");
      p = uniform_point(t, DefaultCandidate(), dense);
      if (!p)
        throw std::runtime_error("the records lack the default (10, 150) on some layer");
      p->criterion = "fallback: default (no speed record for this machine)";
    } else {
      // The most accurate measured point at least S times as fast as the default; ties (within
      // 2 % relative error) to the cheaper cost2, then record order: never raw timing.
      std::optional<OperatingPoint> best;
      for (const auto &row : rows) {
        if (row.ratio < *o.min_speedup)
          continue;
        auto q = PointOfSpeedRecord(row.r, t);
        if (!q)
          continue;
        if (!best || q->error < best->error * 0.98 ||
            (q->error <= best->error * 1.02 && q->cost2 < best->cost2)) {
          best = q;
          char crit[96];
          std::snprintf(crit, sizeof crit, "min-speedup %g at %zu tokens (measured %.2fx)",
                        *o.min_speedup, ctx, row.ratio);
          best->criterion = crit;
        }
      }
      if (!best)
        throw std::runtime_error("no measured point reaches " + Fmt("%g", *o.min_speedup) +
                                 "x the default at " + std::to_string(ctx) +
                                 " tokens on this machine (pig-tune show lists what was measured)");
      p = best;
    }
  } else if (o.max_error) {
    if (o.uniform) {
      // The cheapest uniform candidate within the bound (ties as select_max_error).
      std::vector<Measured> ms;
      std::vector<OperatingPoint> ups;
      for (const auto &c : t.common())
        if (auto u = uniform_point(t, c, dense)) {
          ms.push_back({c, u->cost2, u->error});
          ups.push_back(*u);
        }
      if (auto i = select_max_error(ms, *o.max_error)) {
        p = ups[*i];
        p->criterion = "uniform max-error " + Fmt("%g", *o.max_error);
      }
    } else
      p = select_per_layer_max_error(t, *o.max_error);
  } else if (o.max_cost2) {
    p = select_per_layer_max_cost(t, *o.max_cost2);
  }
  if (!p)
    throw std::runtime_error("no point of the records meets the bound");
  p->pig_version = PIG_VERSION;
  p->timestamp = Timestamp();
  save_point(o.out, *p);
  PrintPoint(*p);
  if (const auto def = uniform_point(t, DefaultCandidate(), dense))
    std::printf("the default (10, 150): error %.4f, cost2 %.2f %%\n", def->error, 100 * def->cost2);
  if (timed && p->attention_s > 0)
    std::printf("predicted decode step at %zu tokens on this machine: %.2f ms (the default "
                "%.2f ms): %.2fx\n",
                times->context, 1e3 * (times->rest_s + p->attention_s), 1e3 * def_step,
                def_step / (times->rest_s + p->attention_s));
  std::printf("wrote %s (pig-run --tuning %s)\n", o.out.c_str(), o.out.c_str());
  return 0;
}

} // namespace pig::tune
