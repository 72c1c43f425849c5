// pig-eval's reports (internal to the eval library): each aggregates what the driver (run.cpp)
// measures and writes CSV, gnuplot PNG and markdown. ErrorReport: attention-error's tables;
// Downstream: the perplexity and task runs of every method and their tables; KvFormatReport: the
// kv-formats table.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pig/app/tuning.h" // --tuning FILE
#include "pig/eval/accuracy.h"
#include "pig/eval/kv_formats.h"
#include "pig/eval/report.h"
#include "pig/eval/run.h"
#include "pig/eval/tasks.h"
#include "pig/reference/reference.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"

namespace pig::eval {

using runtime::AttentionSpec;
using runtime::KvCache;
using runtime::LlamaModel;
using runtime::ThreadPool;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0);

/// One kv-head's cached rows (f32) and the decode step's queries of its group.
using LoadGroup = std::function<void(std::size_t layer, std::size_t kvh, ref::OwnedMatrix &K,
                                     ref::OwnedMatrix &V, std::vector<std::vector<float>> &qs)>;

// ---------------------------------------------------------------------------------------------
// Part 1: attention error on real KV caches.

struct ErrorKey {
  size_t context;
  std::string method, config;
  bool operator<(const ErrorKey &o) const {
    return std::tie(context, method, config) < std::tie(o.context, o.method, o.config);
  }
};

struct ErrorAgg {
  Stat cost, err;
  size_t order = 0; // first-seen order, to print rows as MeasureGroup emits them
};

class ErrorReport {
public:
  ErrorReport(const EvalOptions &e, const AttentionErrorOptions &o);

  void Add(size_t context, size_t layer, size_t head, const ErrorPoint &p);

  void Finish(double seconds, double prefill_seconds);

private:
  static constexpr size_t kAllLayers = ~size_t(0);
  using Map = std::map<ErrorKey, ErrorAgg>;

  static std::vector<std::pair<ErrorKey, ErrorAgg>> Sorted(const Map &m);

  // Fixed-budget points (and every MagicPIG configuration) of one method, sorted by cost.
  static std::string Series(const Map &m, size_t context, const std::string &method);

  void Plot() const;

  std::vector<std::string> LayerNames() const;

  void Markdown(double seconds, double prefill_seconds) const;

  const EvalOptions &e_;
  const AttentionErrorOptions &o_;
  Csv raw_;
  Map all_;
  std::map<size_t, Map> per_layer_;
};

// ---------------------------------------------------------------------------------------------
// Part 2: downstream.

struct Method {
  std::string label;  // "dense", "magicpig", "magicpig+whiten:a=0.25", "topk", "quest", "tuned"
  std::string config; // "K=10 L=150", "= magicpig 10,150"
  AttentionSpec spec;
  int matched_to = -1; // index of the magicpig configuration whose cost2 sets the budget
};

struct MethodRun {
  double cost1 = 0, cost2 = 0;
  double seconds = 0;
  size_t steps = 0;
  std::string kernels; // AttentionStats::kernels: which kernels served
};

struct Cell {
  Stat score, cost1, cost2;
  size_t order = 0;
};

struct DownKey {
  std::string task;
  size_t context;
  std::string method, config;
  bool operator<(const DownKey &o) const {
    return std::tie(task, context, method, config) <
           std::tie(o.task, o.context, o.method, o.config);
  }
};

class Downstream {
public:
  // shared_prefill: the long text's prefill also served attention-error (command all).
  Downstream(const EvalOptions &e, const DownstreamOptions &o, bool shared_prefill,
             const runtime::LlamaModel &model, runtime::ThreadPool &pool,
             const pig::app::Tuning *tuning);

  // Perplexity of tokens [n + 1, n + M] given a dense prefix of n positions held by `prefix`,
  // `logits0` being the prediction of token n (from the dense prefill).
  void Perplexity(const KvCache &prefix, size_t n, const std::vector<int32_t> &tokens,
                  const std::vector<float> &logits0);

  void Tasks();

  void Finish(double seconds, double prefill_seconds);

private:
  struct PplCell {
    double nll = 0, delta = 0, se = 0, cost1 = 0, cost2 = 0;
    size_t order = 0;
  };

  // Teacher-forces tokens [n, n + M) with one method; nll gets -log p of tokens [n + 1, n + M].
  // The prediction of token n comes from the dense prefill, the same for every method: unscored.
  MethodRun ScoreTokens(const KvCache &prefix, size_t n, const std::vector<int32_t> &tokens,
                        const std::vector<float> &logits0, const AttentionSpec &spec,
                        std::vector<double> &nll) const;

  // The common words must outnumber the rest clearly but leave room for many distinct words.
  size_t CweCommonFreq(size_t size) const;
  // Rare words appear at least twice (as in RULER) and often enough that the generator's word
  // pool (150 distinct words) covers the rest of the list.
  size_t CweRareFreq(size_t size) const;

  void RunTask(const TaskInstance &t, const std::vector<int32_t> &ids, size_t ctx, size_t inst);

  std::vector<std::string> Contexts(const std::vector<size_t> &v) const;

  // Scores (y) against cost2 (x) per task, one series per method; dense as a flat line.
  void Plot() const;

  bool HasPpl(size_t ctx) const;

  void Markdown(double seconds, double prefill_seconds) const;

  // Prints, the first time a method runs, the kernels that served it.
  void ShowKernels(const Method &m, const MethodRun &r);

  const EvalOptions &e_;
  const DownstreamOptions &o_;
  bool shared_prefill_;
  const LlamaModel &model_;
  ThreadPool &pool_;
  std::vector<Method> methods_;
  Csv ppl_csv_, task_csv_;
  std::map<DownKey, PplCell> ppl_;
  std::map<DownKey, Cell> cells_;
  std::vector<double> dense_nll_, cost2_;
  std::set<std::string> kernels_shown_;
};

// ---------------------------------------------------------------------------------------------

// kv-formats: the quantisation error of each candidate 8-bit format (kv_formats.h), aggregated
// over the layers, kv-heads and query heads of each context.
class KvFormatReport {
public:
  void Measure(size_t P, const std::vector<size_t> &layers, size_t n_kv_heads,
               const LoadGroup &load);
  void Finish(const EvalOptions &eval, size_t d) const;

private:
  static std::string JoinSizes(const std::vector<size_t> &v);
  std::map<std::pair<size_t, int>, std::vector<KvFormatError>> errs_;
};

} // namespace pig::eval
