// attention-error --transforms: plain MagicPIG against hashing in fitted spaces (transform.h) at
// matched cost2, on the model's real KV caches. Raw points and per-configuration aggregates go
// to CSV; the markdown tables (docs/RESULTS.md section "hash-transforms") compare each transform's
// error, interpolated on its error-vs-cost frontier (ErrorAtCost), with plain MagicPIG's at the
// cost plain's reference configuration actually had.
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

struct TransformReportOptions {
  std::string out;        ///< directory
  std::string update_doc; ///< rewrite its "hash-transforms" section; empty: no
  std::string command_line;
  std::vector<std::size_t> contexts;
  std::vector<std::size_t> layers;
  TransformGridOptions grid; ///< transforms[0] must be plain
  KL reference{10, 150};     ///< plain's configuration the others are matched to (in the grid)
};

class TransformReport {
public:
  /// Throws std::invalid_argument when transforms[0] is not plain or the reference is not in
  /// the grid.
  explicit TransformReport(TransformReportOptions o);

  void Add(std::size_t context, std::size_t layer, std::size_t head, const TransformPoint &p);
  /// Writes transforms_grid.csv, transforms.md (and the doc section), transforms.png.
  void Finish(double seconds, double prefill_seconds);

private:
  struct Cell {
    std::vector<double> cost, error;
  };
  using Key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>; // ctx, layer, t, g
  static constexpr std::size_t kAll = ~std::size_t(0);

  /// Mean cost and (mean or median) error per grid point of transform t.
  std::vector<std::pair<double, double>> Frontier(std::size_t ctx, std::size_t layer, std::size_t t,
                                                  bool median) const;
  std::string Markdown(double seconds, double prefill_seconds) const;
  void Plot() const;

  TransformReportOptions o_;
  std::size_t ref_ = 0; ///< grid index of the reference configuration
  std::unique_ptr<Csv> raw_;
  std::map<Key, Cell> cells_;
};

} // namespace pig::eval
