// attention-error --probes: multi-probe MagicPIG (fewer tables, each probed within r bits of the
// query's code; ALGORITHM.md section 5) against plain MagicPIG, on the model's real KV caches:
// each configuration's mean cost2 and error beside the index memory it needs (runtime
// IndexLayout bytes per token per kv-head, against the bf16 KV rows of d = 64 and d = 128), and
// per probe radius the error interpolated on that radius's error-vs-cost frontier at the cost the
// reference configuration had (ErrorAtCost). CSV of every estimate; markdown (docs/RESULTS.md
// section "multi-probe").
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "pig/eval/accuracy.h"
#include "pig/eval/report.h"

namespace pig::eval {

/// Plain MagicPIG's K 8-11 x L 75-150, multi-probe r = 1 (K 11-13 x L 40-75) and r = 2 (K 14-15 x
/// L 25-35): costs around the reference (10, 150)'s at 2k-8k, indexes of 1/3 to 1x its size.
std::vector<spec::LshParams> DefaultProbeGrid();

struct ProbeReportOptions {
  std::string out;        ///< directory
  std::string update_doc; ///< rewrite its "multi-probe" section; empty: no
  std::string command_line;
  std::vector<std::size_t> contexts;
  std::vector<std::size_t> layers;
  ProbeGridOptions grid;
  spec::LshParams reference{}; ///< (10, 150, 2, 0): the others are matched to its cost
};

class ProbeReport {
public:
  /// Throws std::invalid_argument when the reference is not in the grid.
  explicit ProbeReport(ProbeReportOptions o);

  void Add(std::size_t context, std::size_t layer, std::size_t head, const ProbePoint &p);
  /// Writes probes.csv (every estimate), probes_grid.csv and probes.md (and the doc section).
  void Finish(double seconds, double prefill_seconds);

private:
  struct Cell {
    std::vector<double> cost, error;
  };
  using Key = std::tuple<std::size_t, std::size_t>; // context, config
  std::string Markdown(double seconds, double prefill_seconds) const;

  ProbeReportOptions o_;
  std::size_t ref_ = 0;
  std::unique_ptr<Csv> raw_;
  std::map<Key, Cell> cells_;
};

} // namespace pig::eval
