// pig-bench-context's report: the table of each context's figures (dense, LSH and the optional
// methods), the --kv A,B table, the extra method's (--transform, --hybrid or --lsh2) speed
// against LSH, and with --out DIR speed.csv, kv.csv and speed.png (gnuplot).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pig/app/tiled_decode.h"
#include "pig/eval/report.h"
#include "pig/runtime/kv_cache.h"

namespace pig::bench {

// Where each method's run is among DecodeAlternated's: dense 0, LSH 1, then those given (0 when
// absent).
struct ContextMethods {
  size_t tuned = 0; // --tuning: magicpig with pig-tune's operating point
  // One extra method compared with LSH: --transform SPEC ("magicpig+SPEC", key "transform"),
  // --hybrid SPEC ("lsh-hybrid ...", key "hybrid") or --lsh2 K=..,L=.. ("magicpig K=..", key
  // "lsh2"). The key prefixes its CSV columns and names the option in the plot; `target` is the
  // issue's speed target against magicpig (0.95, 0.9; 0: none).
  size_t extra = 0;
  std::string extra_name, extra_key;
  double extra_target = 0;
  size_t kv2 = 0; // --kv A,B: dense and magicpig with B, at kv2 and kv2 + 1
};

// The machine's limits measured in the run, and what a step of the model reads and computes.
struct StepFloors {
  double bandwidth = 0;    // streaming read, bytes/s (MeasureReadBandwidth)
  double f32_macs = 0;     // f32 FMA peak, MAC/s over the pool (MeasurePeakMacRate)
  size_t threads = 1;      // the pool's
  double weight_bytes = 0; // LlamaModel::WeightBytesPerToken
  size_t n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
};

// Where the steps' time went, per method, at one context: each part's milliseconds per token
// beside its floor (bytes over the bandwidth or multiply-accumulates over the peak), for the
// methods in `which` (indices into runs and specs).
void PrintStepParts(size_t ctx, const StepFloors &f, const std::vector<app::DecodeRun> &runs,
                    const std::vector<runtime::AttentionSpec> &specs,
                    const std::vector<std::pair<size_t, std::string>> &which);

class ContextTable {
public:
  // Prints the table's header; with `out` (a directory) opens speed.csv there, and kv.csv with
  // kv2.
  ContextTable(const ContextMethods &m, runtime::lsh::DType kv,
               std::optional<runtime::lsh::DType> kv2, std::string out);
  // One context's row: the runs of DecodeAlternated, the tiled caches (the second: KV type B's).
  void Add(size_t ctx, const std::vector<app::DecodeRun> &runs,
           const std::vector<std::unique_ptr<runtime::KvCache>> &tiled);
  // After the last context: the --kv A,B table, the extra method's line and speed.png
  // (`threads` for its title).
  void Finish(size_t threads);

private:
  double ExtraMib(const app::DecodeRun &x) const;
  // Whether the extra method's memory is an index (lsh-hybrid, --lsh2) rather than a fitted hash.
  bool IndexKey() const { return xkey_ == "hybrid" || xkey_ == "lsh2"; }

  size_t ti_, xi_, d2i_;
  std::string xl_, xkey_;
  double xtarget_;
  runtime::lsh::DType kv_;
  std::optional<runtime::lsh::DType> kv2_;
  std::string out_;
  size_t xcol_; // column (1-based) of the extra method's first CSV column, for the plot
  std::unique_ptr<eval::Csv> csv_, csv_kv_;
  std::vector<std::string> kv_rows_; // the --kv A,B table, printed after the main one
  std::vector<std::pair<size_t, double>> x_vs_lsh_; // per context: extra tok/s over LSH's
};

} // namespace pig::bench
