// pig-eval's workflows, as a library: each command reads its own plain options struct plus the
// ones every command shares, loads the model, prefills the text once and writes its report (CSV,
// gnuplot PNG, markdown to stdout and --out; --update-doc rewrites docs/RESULTS.md's sections).
//
// Errors are exceptions, never exits: UsageError for what is a bad command line only once the
// model is known (pig-eval prints it with the usage, exit 2), std::runtime_error /
// std::invalid_argument for the rest (pig-eval: exit 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/app/text.h"
#include "pig/eval/accuracy.h"
#include "pig/eval/tasks.h"
#include "pig/reference/transform.h"
#include "pig/runtime/lsh_kernels.h"
#include "pig/runtime/model.h"

namespace pig::eval {

/// A bad command line that only the loaded model reveals: a layer outside it, a context beyond
/// its trained one, a transform its head dim refuses.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// What every command reads.
struct EvalOptions {
  std::string out = "eval-out"; ///< directory of CSV, PNG and markdown
  std::string update_doc;       ///< rewrite the pig-eval sections of this file; empty: no
  std::string model = runtime::DefaultModelPath();
  runtime::ModelOverrides model_overrides;  // --rope-scaling, --rope-scale, --yarn-orig-ctx
  std::string text = app::kDefaultTextPath; ///< perplexity and attention-error text (.gz allowed)
  std::size_t threads = 1;
  std::uint64_t seed = 1; ///< task instances and sampling seeds
  runtime::lsh::DType kv = runtime::lsh::DType::bf16;
  /// MagicPIG's centring mean over the first mean_window indexed keys (0: all of them):
  /// attention-error's statics and downstream's AttentionSpec
  /// (runtime::AttentionSpec::mean_window).
  std::size_t mean_window = 0;
  /// Layers whose decode-step queries are captured (attention-error, kv-formats); each must be
  /// a layer of the model (else UsageError, for every command).
  std::vector<std::size_t> layers{2, 5, 8, 12, 16, 20, 24, 28};
  std::string command_line; ///< quoted in the markdown
};

/// K 7-14 x L 75, 150, 300: costs from well below to well above plain (10,150)'s, for every
/// transform measured (a transform moves the collision rate by a factor of up to ~10).
std::vector<KL> DefaultTransformGrid();

struct AttentionErrorOptions {
  std::vector<std::size_t> contexts{2048, 4096, 8192}; ///< KV cache lengths
  /// Also compare plain MagicPIG with hashing in fitted spaces at matched cost2: plain first
  /// (empty: no comparison), each validated against the model's head dim (else UsageError).
  std::vector<ref::TransformSpec> transforms;
  std::vector<KL> transform_grid = DefaultTransformGrid(); ///< must contain 10:150
  /// Also compare multi-probe configurations (ALGORITHM.md section 5) with plain MagicPIG at
  /// matched cost2, with their index memory (probe_report.h): empty, no comparison; else it must
  /// hold K=10,L=150,t=2 (the reference).
  std::vector<spec::LshParams> probes;
  /// LSH-hybrid variants (their budgets are replaced: see ErrorOptions::hybrid).
  std::vector<ref::HybridConfig> hybrid{ref::HybridConfig{}};
};

struct DownstreamOptions {
  std::vector<std::size_t> ppl_contexts{2048, 4096};
  std::size_t ppl_tokens = 48; ///< tokens scored after each context
  std::vector<std::size_t> task_contexts{2048};
  std::size_t instances = 3; ///< per task and context
  std::vector<std::string> tasks{"needle", "cwe", "fwe"};
  std::vector<KL> lsh{{10, 150}, {9, 120}, {8, 75}}; ///< magicpig configurations
  bool dense_only = false;
  double cwe_share = 0.5; ///< fraction of the CWE list taken by its 3 common words
  /// The SimHash matrices' seed (another draw of every LSH method's estimator); default the
  /// runtime's.
  std::optional<std::uint64_t> lsh_seed;
  /// The method "tuned": pig-tune's operating point in this file (pig/app/tuning.h);
  /// empty: none. max_error selects the point from a records file.
  std::string tuning;
  std::optional<double> max_error;
  bool force_tuning = false; ///< a point made for another model or KV type only warns
  /// The method "magicpig+SPEC": every lsh configuration hashing in this fitted space.
  std::optional<ref::TransformSpec> lsh_transform;
  /// lsh-hybrid's configurations, each run after every magicpig configuration at its cost2 (the
  /// budget fields are replaced).
  std::vector<ref::HybridConfig> hybrid{ref::HybridConfig{}};
};

struct KvFormatsOptions {
  std::vector<std::size_t> contexts{2048, 4096, 8192};
};

/// Relative L2 error of TopK, oracle sampling, Quest and MagicPIG vs exact attention on the
/// model's real KV caches (attention_error.{csv,md,png}; with transforms, transforms.*).
void RunAttentionError(const EvalOptions &eval, const AttentionErrorOptions &o);
/// Perplexity and the needle / aggregation tasks, decoding with each runtime Attention
/// (perplexity.csv, tasks.csv, downstream.{md,png}). Prints, once per method, the kernels that
/// served it ("pig-eval: kernels of magicpig K=10 L=150: specialised ...").
void RunDownstream(const EvalOptions &eval, const DownstreamOptions &o);
/// Both, sharing one prefill of the long text.
void RunAll(const EvalOptions &eval, const AttentionErrorOptions &error,
            const DownstreamOptions &down);
/// The error of exact attention with each candidate 8-bit KV format (kv_formats.md).
void RunKvFormats(const EvalOptions &eval, const KvFormatsOptions &o);

} // namespace pig::eval
