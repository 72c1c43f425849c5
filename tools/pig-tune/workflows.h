// The workflows of pig-tune (docs/TUNING.md), one function per subcommand; pig-tune's main only
// parses the command line into these options. Library pig_tune_workflows: pig_tune on the
// runtime and the model.
//
//   RunAccuracy      per-layer attention error and cost2 of LSH candidates (K, L, t) on the
//                    model's real KV caches (machine-independent, cached by a hash)
//   RunSpeed         decode-step time of candidates and tuned points on this machine,
//                    interleaved round-robin against the default (10, 150)
//   RunSelect        an operating point: max_error E, max_cost2 C or min_speedup S
//   RunEmitManifest  the configs/kernels.txt lines a point needs
//   RunShow          the frontier: a table and a PNG (gnuplot)
//   RunHybrid        lsh-hybrid's knobs (head share, floor, ranker bits, epsilon) on the model's
//                    real KV caches at MagicPIG's cost2; the best written as a hybrid point
//
// Every measurement is one JSON Lines record appended atomically to the records file: a stop
// request keeps every record written so far, and a rerun skips what is already measured.
// Select, emit-manifest and show only read records (replay: no model, no measurement).
//
// Each returns the process's exit status (0, or 130 when stopped by CommonOptions::stop) and
// throws on failure: UsageError for a bad option value (pig-tune exits 2), anything else derived
// from std::exception for a failed run (exit 1). Tables and results go to stdout, progress and
// warnings to stderr.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/spec/lsh_params.h"
#include "pig/tune/speed.h"

namespace pig::tune {

/// A bad value of one command-line option, found while running: option() names the flag
/// ("--lsh"), message() says what is wrong; what() is "option: message".
class UsageError : public std::runtime_error {
public:
  UsageError(std::string option, std::string message)
      : std::runtime_error(option + ": " + message), option_(std::move(option)),
        message_(std::move(message)) {}
  const std::string &option() const { return option_; }
  const std::string &message() const { return message_; }

private:
  std::string option_, message_;
};

/// What every subcommand shares.
struct CommonOptions {
  std::string records = "pig-tune.jsonl"; ///< tuning records, JSON Lines (appended)
  std::string model;                      ///< GGUF model (accuracy, speed)
  std::size_t threads = 0;                ///< 0: every core
  /// Set (by a Ctrl-C handler) to stop after the record being written; null: never.
  const std::atomic<bool> *stop = nullptr;
};

/// pig-eval's default text (long enough for 8k tokens).
std::string DefaultAccuracyText();

struct AccuracyOptions {
  std::string text = DefaultAccuracyText(); ///< prefilled densely to build the KV caches
  std::vector<std::size_t> contexts{2048, 4096, 8192};
  std::size_t positions = 4; ///< decode positions per context whose queries are measured
  std::vector<int> Ks{6, 7, 8, 9, 10, 11}, Ls{32, 48, 64, 100, 150, 200}, ts{1, 2};
  std::size_t max_evals = 0; ///< candidates measured (0: every one the exploration keeps)
  double time_limit = 0;     ///< seconds; stops starting new candidates (0: none)
  bool exhaustive = false;   ///< no pruning of candidates that cannot improve the frontier
  std::size_t sink = 4, local = 64;
};

struct SpeedRunOptions {
  std::string text = "/usr/share/common-licenses/GPL-3"; ///< prefilled densely, then tiled
  std::vector<std::size_t> contexts{8192, 16384, 32768};
  std::size_t prefill = 2048;         ///< tokens prefilled (tiled up to each context)
  std::vector<spec::LshParams> lsh;   ///< uniform candidates
  std::vector<std::string> points;    ///< operating point files
  std::vector<double> max_errors;     ///< per-layer points selected from the quality records
  std::vector<std::string> schedules; ///< each candidate x each schedule ("" = default)
  SpeedOptions harness;               ///< rounds, time, dropping (stop and progress: set here)
  bool per_layer = false;             ///< per-layer attention times (select --cost time)
  std::size_t max_per_layer = 0;      ///< candidates timed per layer at most (0: all)
};

/// select and show: which records, and as which machine.
struct SelectOptions {
  std::optional<double> max_error, max_cost2, min_speedup; ///< select: exactly one
  std::size_t context = 0;                 ///< the speed records' context (0: the largest measured)
  bool uniform = false;                    ///< one (K, L, t) on every sparse layer (with max_error)
  std::string cost = "cost2";              ///< what selection minimises or bounds: cost2 | time
  std::string out = "pig-tune-point.json"; ///< select: the point file written
  std::string data_hash;                   ///< quality records of this data hash
  std::string as_machine; ///< "cpu|target|cores|threads|l3_bytes": replay as that machine
};

struct EmitManifestOptions {
  std::string point;    ///< operating point file
  std::string out;      ///< written here (empty: stdout)
  std::string manifest; ///< leave out the lines this manifest lists
  bool append = false;  ///< append the missing lines to manifest
};

struct ShowOptions {
  std::string out;      ///< directory for frontier.png and the CSVs (empty: tables only)
  SelectOptions select; ///< data_hash, context, as_machine
};

/// pig-tune hybrid: the grid is every combination of the lists (pig/tune/hybrid.h).
struct HybridTuneOptions {
  std::string text = DefaultAccuracyText(); ///< prefilled densely to build the KV caches
  std::vector<std::size_t> contexts{2048, 4096, 8192};
  std::vector<std::size_t> layers; ///< empty: pig-eval attention-error's (2, 5, 8, ..., 28)
  spec::LshParams lsh{10, 150, 2}; ///< the index every configuration ranks with
  double budget = 0;               ///< cost2 of every sample (0: MagicPIG's measured cost)
  std::vector<double> heads{0.1, 0.25, 0.5, 0.75}, floors{0.05, 0.1, 0.2};
  std::vector<int> bits{0};                  ///< ranker bits (0: all K L), rank=hamming's
  std::vector<std::string> ranks{"hamming"}; ///< hamming, collisions, quant (the runtime's)
  std::vector<double> epsilons{0};
  std::string out = "pig-tune-hybrid.json"; ///< the hybrid point written
};

int RunAccuracy(const CommonOptions &common, const AccuracyOptions &o);
int RunHybrid(const CommonOptions &common, const HybridTuneOptions &o);
int RunSpeed(const CommonOptions &common, SpeedRunOptions o);
int RunSelect(const CommonOptions &common, const SelectOptions &o);
int RunEmitManifest(const EmitManifestOptions &o);
int RunShow(const CommonOptions &common, const ShowOptions &o);

} // namespace pig::tune
