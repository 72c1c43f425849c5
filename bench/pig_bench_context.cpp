// pig-bench-context: decode speed of the real model, dense against LSH sampling attention, at
// long contexts (issue: 2k, 4k, 8k, 16k, 32k), with the share of each step spent in attention.
//
// The contexts are distinct text: one dense prefill of the longest context's tokens of --text
// (the Debian FAQ, 42k tokens), each context its first tokens. Prefilling 32k tokens takes
// minutes on 2 cores, so the KV rows are kept on disk (--kv-cache-dir, PrefillKept) and a later
// run reads them back. With --tile, the old way: a --prefill of a few thousand tokens whose keys
// and values repeat up to each context; each key then appears context/prefill times, which
// changes what a sparse method reads, so tiled figures are named as such. Beyond the model's
// trained context (8k) quality is not meaningful; speed is.
//
// For each context: all methods decode the same --steps tokens (the text's next ones) from the
// same cache, one step of each in turn; the first LSH step builds the index of every sparse layer
// and is reported apart. With --tuning FILE a third method, "tuned" (magicpig with pig-tune's
// operating point, per layer), decodes too, its steps alternated with the other two. With
// --transform SPEC a method "magicpig+SPEC" (magicpig's K, L, t hashing in a space fitted to the
// keys, AttentionSpec:: transform) decodes alternated with the others: its speed vs plain magicpig
// and vs dense, the first step (index build and the fit) and the fitted hashing's memory. With
// --hybrid SPEC the extra method is lsh-hybrid instead (spec::HybridConfig::parse's SPEC; its
// budget, e.g. budget=6%, sets the method's cost2, to match magicpig's in the table): its speed vs
// magicpig against the target of 0.9x, its first step and its index. With --kv A,B (e.g.
// bf16,q8) dense and magicpig run with each KV element type, all alternated, and a second table
// compares them (LSH with B against dense with A and with B: the 8-bit KV cache's end-to-end
// figure); the prefill then runs with f32 KV and each tiled cache holds its rows converted.
// Usage: pig-bench-context [--model FILE] [--text FILE] [--tile --prefill N] [--steps N]
//                          [--contexts 2048,4096,...] [--threads N] [--kv T[,T2]] [--out DIR]
//                          [--kv-cache-dir DIR]
//                          [--tuning FILE [--max-error E]] [--transform SPEC
//                          [--transform-lsh K=..,L=..]] [--hybrid SPEC]
//                          (pig-bench-context --help)
// --out DIR writes speed.csv and draws speed.png with gnuplot (docs/PERFORMANCE.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pig/app/kernels.h"
#include "pig/app/options.h"
#include "pig/app/report.h"
#include "pig/app/text.h"
#include "pig/app/tiled_decode.h"
#include "pig/app/tuning.h"  // --tuning FILE
#include "pig/eval/report.h" // CSV and gnuplot helpers
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/runtime/ops.h"
#include "pig/spec/hybrid_config.h"

#include "context_table.h"

namespace {

using namespace pig::runtime;
using Run = pig::app::DecodeRun;

struct Options {
  pig::app::ModelOptions model;
  pig::app::LongContextOptions ctx; // --text, --tile --prefill, --kv-cache-dir
  size_t steps = 16, threads = 0;
  std::vector<size_t> contexts{2048, 4096, 8192, 16384, 32768};
  lsh::DType kv = lsh::DType::bf16;
  std::optional<lsh::DType> kv2;  // --kv A,B: dense and magicpig with B too
  std::string out;                // --out: CSV + PNG
  pig::app::TuningOptions tuning; // --tuning FILE [--max-error E]: a third method, "tuned"
  // --transform SPEC: a method "magicpig+SPEC", magicpig hashing in a fitted space.
  std::optional<pig::ref::TransformSpec> transform;
  // --transform-lsh K=..,L=..: the transform's (K, L, t), to compare at matched cost2 (a
  // transform changes the collision rate); default magicpig's.
  pig::spec::LshParams transform_lsh;
  // --hybrid SPEC: a method lsh-hybrid (its budget from SPEC).
  std::optional<pig::spec::HybridConfig> hybrid;
  // --lsh2 K=..,L=..,t=..,r=..: a method magicpig with another configuration (multi-probe).
  std::optional<pig::spec::LshParams> lsh2;
  // --dense-below N|measured: LSH's (and tuned's) AttentionSpec::dense_below.
  size_t dense_below = AttentionSpec::kDenseBelowMeasured;
};

// The command line: the shared groups (model, threads, tuning) and the bench's own options.
Options ParseOptions(int argc, char **argv) {
  Options o;
  CLI::App app{"Decode speed of the real model, dense against LSH sampling attention, at long "
               "contexts of distinct text (one dense prefill, kept on disk), or tiled; the share "
               "of each step spent in attention. --out DIR writes speed.csv and draws speed.png "
               "with gnuplot "
               "(docs/PERFORMANCE.md).",
               "pig-bench-context"};
  pig::app::Init(app);
  pig::app::AddModelOptions(app, o.model, false, /*rope=*/true);
  pig::app::AddThreadsOption(app, o.threads);
  pig::app::AddTuningOptions(app, o.tuning);
  pig::app::AddLongContextOptions(app, o.ctx);
  app.add_option("--steps", o.steps, "decode steps per run (the first is reported apart)")
      ->check(pig::app::Integer(1, size_t(1) << 20))
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--contexts",
         [&o](const std::string &v) {
           o.contexts.clear();
           for (size_t c : pig::app::ParseList(v))
             o.contexts.push_back(c);
         },
         "context lengths, a,b,... (default 2048,4096,8192,16384,32768)")
      ->check(pig::app::IntegerList(1, size_t(1) << 24))
      ->type_name("LIST");
  app.add_option("--out", o.out, "directory for speed.csv and speed.png");
  app.add_option_function<std::string>(
         "--kv",
         [&o](const std::string &k) {
           const size_t comma = k.find(',');
           lsh::DType t2{};
           if (!lsh::parse_dtype(k.substr(0, comma), o.kv) ||
               (comma != std::string::npos && !lsh::parse_dtype(k.substr(comma + 1), t2)))
             throw CLI::ValidationError("--kv", "expects T or T,T2 with T in bf16, f32, q8; got '" +
                                                    k + "'");
           if (comma != std::string::npos) {
             if (t2 == o.kv)
               throw CLI::ValidationError("--kv",
                                          "--kv T,T2 needs two different types, got '" + k + "'");
             o.kv2 = t2;
           }
         },
         "the KV cache's element type T (bf16, f32 or q8); T,T2 adds dense and magicpig with T2")
      ->type_name("T[,T2]")
      ->group(pig::app::kAttentionGroup);
  pig::ref::TransformSpec transform;
  CLI::Option *x = pig::app::AddTransformOption(
      app, transform,
      "a method magicpig+SPEC: magicpig hashing in a space fitted to the keys, whiten:a=A; vs "
      "magicpig and dense");
  CLI::Option *xl = pig::app::AddLshOption(
      app, "--transform-lsh", o.transform_lsh,
      "the (K, L, t) of --transform's method, to match magicpig's cost2 (default magicpig's)");
  CLI::Option *h =
      app.add_option_function<std::string>(
             "--hybrid",
             [&o](const std::string &text) {
               try {
                 o.hybrid = pig::app::ParseHybridSpec(text);
               } catch (const std::invalid_argument &e) {
                 throw CLI::ValidationError("--hybrid", e.what());
               }
             },
             "a method lsh-hybrid with SPEC (docs/HYBRID.md), e.g. budget=6%:head=0.25 or "
             "@FILE:budget=6% (pig-tune hybrid's choice), its budget matching magicpig's cost2; "
             "vs magicpig and dense")
          ->type_name("SPEC");
  h->excludes(x);
  pig::spec::LshParams lsh2;
  CLI::Option *l2 = pig::app::AddLshOption(
      app, "--lsh2", lsh2,
      "a method magicpig with another (K, L, t, r), e.g. multi-probe K=12,L=50,r=1 (fewer "
      "tables, a smaller index); vs magicpig and dense");
  l2->excludes(x);
  l2->excludes(h);
  app.add_option_function<std::string>(
         "--dense-below",
         [&o](const std::string &v) {
           AttentionSpec s; // the attention field's parser: the same values as pig-run's flag
           try {
             pig::app::FieldNamed("dense_below").apply(s, v, {});
           } catch (const std::invalid_argument &e) {
             throw CLI::ValidationError("--dense-below", e.what());
           }
           o.dense_below = s.dense_below;
         },
         "LSH decodes densely below N positions: measured (the default: where sampling is timed "
         "faster on this machine) or N (0: never, the paper's rule)")
      ->type_name("N|measured");
  pig::app::Parse(app, argc, argv);
  if (x->count())
    o.transform = transform;
  if (l2->count())
    o.lsh2 = lsh2;
  if (o.steps < 2)
    pig::app::UsageError(app, "--steps must be at least 2 (the first step is reported apart)");
  if (xl->count() && !o.transform)
    pig::app::UsageError(
        app, "--transform-lsh gives the (K, L) of --transform SPEC's method: give --transform");
  pig::app::CheckTuningOptions(app, o.tuning);
  return o;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = ParseOptions(argc, argv);
  try {
    pig::app::RegisterKernels();
    auto model = LlamaModel::Load(o.model.path, o.model.overrides);
    const LlamaConfig &c = model->config();
    // --tuning: loaded (and refused) before the prefill.
    std::optional<pig::app::Tuning> tuning;
    if (!o.tuning.file.empty()) {
      tuning = pig::app::LoadTuning(o.tuning.file, o.tuning.max_error,
                                    pig::app::TuningTargetOf(o.tuning, o.model.path, c, o.kv));
      for (const std::string &w : tuning->warnings)
        std::fprintf(stderr, "pig-bench-context: warning: %s\n", w.c_str());
      AttentionSpec probe;
      probe.kv_dtype = o.kv;
      pig::app::ApplyTuning(probe, tuning->point).Validate(c.n_layers);
    }
    // Distinct text: the longest context's tokens are prefilled, each context decodes the text's
    // tokens after its own end. Tiled: --prefill tokens, every context decodes the next ones.
    const size_t longest = *std::max_element(o.contexts.begin(), o.contexts.end());
    const size_t n_pre = o.ctx.Prefilled(longest);
    const std::vector<int32_t> tokens =
        pig::app::LongText(model->tokenizer(), o.ctx.text, n_pre + o.steps, o.ctx.tile);
    auto feed_of = [&](size_t ctx) {
      const size_t at = o.ctx.FeedStart(ctx);
      return std::vector<int32_t>(tokens.begin() + std::ptrdiff_t(at),
                                  tokens.begin() + std::ptrdiff_t(at + o.steps));
    };
    ThreadPool pool(o.threads);
    AttentionSpec dense;
    dense.kv_dtype = o.kv;
    // --kv A,B: one prefill for both types, exact rows converted into each context's cache.
    const lsh::DType pre_dtype = o.kv2 ? lsh::DType::f32 : o.kv;
    const pig::app::KeptPrefill pre = pig::app::PrefillKept(
        *model, o.model.path, pool,
        std::vector<int32_t>(tokens.begin(), tokens.begin() + std::ptrdiff_t(n_pre)), pre_dtype,
        o.ctx.kv_cache_dir);
    const std::string kv_names = std::string(lsh::to_string(o.kv)) +
                                 (o.kv2 ? std::string(" and ") + lsh::to_string(*o.kv2) : "");
    std::printf("pig-bench-context: %s, %zu threads, kernels %s, KV %s; %s; %zu decode steps per "
                "run\n",
                o.model.path.c_str(), pool.size(), BestKernels().target, kv_names.c_str(),
                o.ctx.Describe(pre, n_pre).c_str(), o.steps);
    AttentionSpec lsh = dense;
    lsh.method = pig::spec::Method::magicpig;
    lsh.dense_below = o.dense_below;
    if (lsh.dense_below == AttentionSpec::kDenseBelowMeasured) {
      const auto m0 = std::chrono::steady_clock::now();
      const size_t n = MeasuredDenseCrossover(lsh, c.Shape(0));
      std::printf("LSH decodes densely below %zu positions (measured in %.2f s; --dense-below "
                  "N pins it)\n",
                  n, std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count());
      lsh.dense_below = n;
    }
    // The methods' indices in `specs` and `runs`: dense 0, LSH 1, then tuned and the transform
    // when given (0: absent).
    std::vector<AttentionSpec> specs{dense, lsh};
    size_t ti = 0, xi = 0;
    if (tuning) {
      ti = specs.size();
      specs.push_back(pig::app::ApplyTuning(dense, tuning->point));
      specs.back().dense_below = lsh.dense_below;
      std::printf("tuning: %s\n", pig::app::DescribePoint(tuning->source, tuning->point).c_str());
    }
    const std::string xl = o.transform ? "magicpig+" + o.transform->str()
                           : o.hybrid  ? "lsh-hybrid"
                           : o.lsh2    ? "magicpig " + o.lsh2->str()
                                       : "";
    if (o.transform) {
      xi = specs.size();
      AttentionSpec x = lsh;
      x.transform = *o.transform;
      static_cast<pig::spec::LshParams &>(x) = o.transform_lsh;
      x.Validate(c.n_layers);
      specs.push_back(x);
      std::printf("transform: %s: %s\n", xl.c_str(), x.str(c.n_layers).c_str());
    }
    if (o.hybrid) {
      xi = specs.size();
      AttentionSpec x = dense;
      x.method = pig::spec::Method::lsh_hybrid;
      x.hybrid = *o.hybrid;
      x.budget = o.hybrid->budget;
      x.Validate(c.n_layers);
      specs.push_back(x);
      std::printf("hybrid: %s\n", x.str(c.n_layers).c_str());
    }
    if (o.lsh2) {
      xi = specs.size();
      AttentionSpec x = lsh;
      static_cast<pig::spec::LshParams &>(x) = *o.lsh2;
      x.Validate(c.n_layers);
      specs.push_back(x);
      std::printf("lsh2: %s\n", x.str(c.n_layers).c_str());
    }
    size_t d2i = 0; // --kv A,B: dense and magicpig with B at d2i, d2i + 1
    if (o.kv2) {
      d2i = specs.size();
      for (AttentionSpec x : {dense, lsh}) {
        x.kv_dtype = *o.kv2;
        x.Validate(c.n_layers);
        specs.push_back(x);
      }
    }
    pig::bench::ContextTable table({.tuned = ti,
                                    .extra = xi,
                                    .extra_name = xl,
                                    .extra_key = o.hybrid ? "hybrid"
                                                 : o.lsh2 ? "lsh2"
                                                          : "transform",
                                    .extra_target = o.hybrid ? 0.9
                                                    : o.lsh2 ? 0.0
                                                             : 0.95,
                                    .kv2 = d2i},
                                   o.kv, o.kv2, o.out);
    // The machine's limits, measured here, for the step parts' floors.
    const Kernels &kern = BestKernels();
    const pig::bench::StepFloors floors{pig::app::MeasureReadBandwidth(pool),
                                        pig::app::MeasurePeakMacRate(pool, kern.f32_peak_loop),
                                        pool.size(),
                                        double(model->WeightBytesPerToken()),
                                        c.n_layers,
                                        c.n_heads,
                                        c.n_kv_heads,
                                        c.head_dim};
    std::vector<std::pair<size_t, std::vector<Run>>> measured;
    for (size_t ctx : o.contexts) {
      std::vector<std::unique_ptr<KvCache>> tiled;
      for (lsh::DType t : {o.kv, o.kv2.value_or(o.kv)})
        if (tiled.empty() || tiled[0]->dtype() != t)
          tiled.push_back(pig::app::TileCache(pre.kv(), n_pre, ctx, t));
      const std::vector<Run> runs =
          pig::app::DecodeAlternated(*model, pool, specs, tiled, ctx, feed_of(ctx));
      table.Add(ctx, runs, tiled);
      measured.emplace_back(ctx, runs);
    }
    table.Finish(pool.size());
    std::vector<std::pair<size_t, std::string>> which{{0, "dense"}, {1, "LSH"}};
    if (ti)
      which.emplace_back(ti, "tuned");
    if (xi)
      which.emplace_back(xi, xl);
    for (const auto &[ctx, runs] : measured)
      pig::bench::PrintStepParts(ctx, floors, runs, specs, which);
    // Which kernel sets served LSH and, with --tuning, the point's configurations.
    const AttentionShape probe_shape = c.Shape(16);
    std::printf("\nkernels: %s\n", MakeAttention(lsh, probe_shape)->stats().kernels.c_str());
    if (ti)
      std::printf("tuned kernels: %s\n",
                  MakeAttention(specs[ti], probe_shape)->stats().kernels.c_str());
    if (xi)
      std::printf("%s kernels: %s\n", xl.c_str(),
                  MakeAttention(specs[xi], probe_shape)->stats().kernels.c_str());
  } catch (const pig::app::TuningMismatch &e) { // a point made for another model: bad --tuning
    std::fprintf(stderr, "pig-bench-context: error: %s\n", e.what());
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-bench-context: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
