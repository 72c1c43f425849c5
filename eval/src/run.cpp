// The driver of pig-eval's commands: loads the model, checks what only the model can refuse,
// prefills the text once (capturing the decode-step queries of chosen layers at each
// checkpoint) and feeds each report asked for.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pig/app/decorators.h"
#include "pig/eval/probe_report.h"
#include "pig/eval/run.h"
#include "pig/eval/transform_report.h"
#include "pig/spec/files.h"
#include "reports.h"

namespace pig::eval {

using namespace pig::runtime;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<KL> DefaultTransformGrid() {
  std::vector<KL> g;
  for (int K = 7; K <= 14; ++K)
    for (int L : {75, 150, 300})
      g.push_back({K, L});
  return g;
}

namespace {

// One prefill of the long text serves every part asked for (null: not asked).
void Run(const EvalOptions &e, const AttentionErrorOptions *error, const DownstreamOptions *down,
         const KvFormatsOptions *kvf) {
  const auto start = Clock::now();
  spec::MakeDirs(e.out);
  auto model = LlamaModel::Load(e.model, e.model_overrides);
  const LlamaConfig &cfg = model->config();
  ThreadPool pool(e.threads);
  const bool formats = kvf != nullptr;
  const bool part1 = error != nullptr;
  const bool part2 = down != nullptr;
  const std::vector<size_t> none;
  const std::vector<size_t> &error_contexts = error ? error->contexts : kvf ? kvf->contexts : none;
  for (size_t l : e.layers)
    if (l >= cfg.n_layers)
      throw UsageError("--layers: layer " + std::to_string(l) + " outside the model's " +
                       std::to_string(cfg.n_layers));

  // Checkpoints of the one long-text prefill: attention-error captures and perplexity points.
  std::set<size_t> checkpoints;
  size_t capacity = 0, need_tokens = 0;
  if (part1 || formats)
    for (size_t c : error_contexts) {
      checkpoints.insert(c);
      capacity = std::max(capacity, c);
      need_tokens = std::max(need_tokens, c);
    }
  if (part2)
    for (size_t c : down->ppl_contexts) {
      checkpoints.insert(c);
      capacity = std::max(capacity, c);
      need_tokens = std::max(need_tokens, c + down->ppl_tokens + 1);
    }
  if (capacity > cfg.context_length)
    throw UsageError("a context of " + std::to_string(capacity) +
                     " exceeds the model's trained context " + std::to_string(cfg.context_length));

  std::unique_ptr<ErrorReport> errors;
  if (part1)
    errors = std::make_unique<ErrorReport>(e, *error);
  std::unique_ptr<TransformReport> transforms;
  if (part1 && !error->transforms.empty()) {
    for (const pig::ref::TransformSpec &t : error->transforms)
      try {
        t.validate(cfg.head_dim);
      } catch (const std::invalid_argument &err) {
        throw UsageError(std::string("--transforms: ") + err.what());
      }
    TransformReportOptions to;
    to.out = e.out;
    to.update_doc = e.update_doc;
    to.command_line = e.command_line;
    to.contexts = error_contexts;
    to.layers = e.layers;
    to.grid.transforms = error->transforms;
    to.grid.grid = error->transform_grid;
    to.grid.seed = AttentionSpec{}.seed;
    transforms = std::make_unique<TransformReport>(std::move(to));
  }
  double transforms_s = 0;
  std::unique_ptr<ProbeReport> probes;
  if (part1 && !error->probes.empty()) {
    ProbeReportOptions po;
    po.out = e.out;
    po.update_doc = e.update_doc;
    po.command_line = e.command_line;
    po.contexts = error_contexts;
    po.layers = e.layers;
    po.grid.configs = error->probes;
    po.grid.seed = AttentionSpec{}.seed;
    po.grid.statics.mean_window = e.mean_window;
    try {
      probes = std::make_unique<ProbeReport>(std::move(po));
    } catch (const std::invalid_argument &err) {
      throw UsageError(std::string("--probes: ") + err.what());
    }
  }
  double probes_s = 0;
  // --tuning: loaded (and refused) before any prefill.
  std::optional<pig::app::Tuning> tuning;
  if (part2 && !down->tuning.empty()) {
    pig::app::TuningTarget target; // this model and --kv (a point made for others: exit 2)
    target.n_layers = cfg.n_layers;
    target.head_dim = cfg.head_dim;
    target.kv = e.kv;
    target.model_path = e.model;
    target.force = down->force_tuning;
    try {
      tuning = pig::app::LoadTuning(down->tuning, down->max_error, target);
    } catch (const pig::app::TuningMismatch &err) {
      throw UsageError(err.what());
    }
    for (const std::string &w : tuning->warnings)
      std::fprintf(stderr, "pig-eval: warning: %s\n", w.c_str());
    AttentionSpec probe;
    probe.kv_dtype = e.kv;
    pig::app::ApplyTuning(probe, tuning->point).Validate(cfg.n_layers);
    const pig::tune::OperatingPoint &p = tuning->point;
    std::fprintf(stderr,
                 "pig-eval: tuning: %s: layers %s (predicted attention error %.3f, cost2 %.1f "
                 "%%%s%s)\n",
                 tuning->source.c_str(), p.layers_str().c_str(), p.error, 100.0 * p.cost2,
                 p.criterion.empty() ? "" : "; criterion ", p.criterion.c_str());
  }
  if (part2)
    for (const pig::ref::HybridConfig &h : down->hybrid) {
      // What the runtime refuses (reuse, pre, lowrank) fails here, before any prefill.
      AttentionSpec probe;
      probe.method = pig::spec::Method::lsh_hybrid;
      probe.kv_dtype = e.kv;
      probe.hybrid = h;
      try {
        probe.Validate(cfg.n_layers);
      } catch (const std::invalid_argument &err) {
        throw UsageError(std::string("--downstream-hybrid: ") + err.what());
      }
    }
  KvFormatReport kv_formats;
  std::unique_ptr<Downstream> downstream;
  if (part2)
    downstream =
        std::make_unique<Downstream>(e, *down, part1, *model, pool, tuning ? &*tuning : nullptr);

  double prefill_s = 0, part1_s = 0, ppl_s = 0;
  if (!checkpoints.empty()) {
    const std::string text = app::NormalizeText(app::ReadTextFile(e.text));
    const std::vector<int32_t> tokens = model->tokenizer().Encode(text);
    std::fprintf(stderr, "pig-eval: text %s: %zu bytes, %zu tokens\n", e.text.c_str(), text.size(),
                 tokens.size());
    if (tokens.size() < need_tokens)
      throw std::runtime_error("the text has " + std::to_string(tokens.size()) +
                               " tokens, the contexts need " + std::to_string(need_tokens));
    // kv-formats quantises the exact rows itself: the capture keeps them in f32.
    auto owned = std::make_unique<app::CapturingAttention>(
        std::make_unique<DenseAttention>(cfg.Shape(capacity), formats ? lsh::DType::f32 : e.kv),
        e.layers);
    app::CapturingAttention &cap = *owned;
    cap.Arm(false); // only each checkpoint's decode step
    LlamaSession base(*model, pool, capacity, std::move(owned));
    std::vector<float> logits(cfg.vocab);
    const pig::ref::OwnedMatrix W =
        pig::ref::simhash_matrix(AttentionSpec{}.seed, cfg.head_dim, 10, 150);
    ErrorOptions eo;
    eo.sample_seed = e.seed;
    eo.statics.mean_window = e.mean_window;
    if (error)
      eo.hybrid = error->hybrid;
    // lsh-hybrid variants that reuse a selection need the queries of the steps before: the last
    // `lag` positions before P - 1 are decode steps too.
    size_t lag = 0;
    if (error)
      for (const pig::ref::HybridConfig &h : eo.hybrid)
        lag = std::max(lag, size_t(h.reuse) - 1);
    for (size_t P : checkpoints) {
      // Prefill to P - 1 - lag, then positions P - 1 - lag .. P - 1 as decode steps: their queries
      // are real decode steps', and the cache then holds exactly P positions.
      auto t0 = Clock::now();
      if (lag + 1 >= P || base.position() > P - 1 - lag)
        throw UsageError("--hybrid reuse=" + std::to_string(lag + 1) + " needs " +
                         std::to_string(lag) + " decode steps before the context of " +
                         std::to_string(P) + " tokens, after the one before it");
      if (base.position() < P - 1 - lag)
        base.Forward(tokens.data() + base.position(), P - 1 - lag - base.position(), logits.data());
      cap.Arm(true);
      for (size_t p = P - 1 - lag; p < P; ++p)
        base.Forward(&tokens[p], 1, logits.data());
      cap.Arm(false);
      prefill_s += Since(t0);
      std::fprintf(stderr, "pig-eval: prefilled %zu tokens (%.0f s so far)\n", P, prefill_s);
      if ((part1 || formats) && std::count(error_contexts.begin(), error_contexts.end(), P)) {
        t0 = Clock::now();
        const KvCache &cache = cap.cache();
        const size_t d = cfg.head_dim, group = cfg.n_heads / cfg.n_kv_heads;
        // One kv-head's cached rows (f32) and the decode step's queries of its group.
        const LoadGroup load = [&](size_t layer, size_t kvh, pig::ref::OwnedMatrix &K,
                                   pig::ref::OwnedMatrix &V, std::vector<std::vector<float>> &qs) {
          K = pig::ref::OwnedMatrix(P, d);
          V = pig::ref::OwnedMatrix(P, d);
          cache.ReadRows(layer, kvh, P, K.data.data(), V.data.data());
          qs = cap.group_queries(layer, kvh);
        };
        if (formats) {
          kv_formats.Measure(P, e.layers, cfg.n_kv_heads, load);
          continue;
        }
        // Every (layer, kv-head) of --layers as a job across the pool: measure(queries, K, V)
        // returns each query's points, which add(layer, head, point) takes under a lock. A job's
        // exception (a transform the keys refuse) is rethrown here by the pool.
        auto over_groups = [&](const auto &measure, const auto &add) {
          std::vector<std::pair<size_t, size_t>> jobs;
          for (size_t layer : e.layers)
            for (size_t kvh = 0; kvh < cfg.n_kv_heads; ++kvh)
              jobs.push_back({layer, kvh});
          std::mutex mu;
          pool.ParallelFor(jobs.size(), [&](size_t j, size_t) {
            const auto [layer, kvh] = jobs[j];
            pig::ref::OwnedMatrix K, V;
            std::vector<std::vector<float>> qs;
            load(layer, kvh, K, V, qs);
            const auto pts = measure(qs, K, V);
            std::lock_guard<std::mutex> lock(mu);
            for (size_t g = 0; g < pts.size(); ++g)
              for (const auto &p : pts[g])
                add(layer, kvh * group + g, p);
          });
        };
        for (size_t layer : e.layers)
          for (size_t kvh = 0; kvh < cfg.n_kv_heads; ++kvh) {
            pig::ref::OwnedMatrix K, V;
            std::vector<std::vector<float>> qs;
            load(layer, kvh, K, V, qs);
            const auto pts = MeasureGroup(qs, K, V, W, eo, [&](size_t back) {
              return cap.group_queries(layer, kvh, P - 1 - back);
            });
            for (size_t g = 0; g < pts.size(); ++g)
              for (const auto &p : pts[g])
                errors->Add(P, layer, kvh * group + g, p);
          }
        part1_s += Since(t0);
        std::fprintf(stderr, "pig-eval: attention error at %zu done (%.0f s)\n", P, part1_s);
        if (transforms) {
          t0 = Clock::now();
          TransformGridOptions go;
          go.transforms = error->transforms;
          go.grid = error->transform_grid;
          go.seed = AttentionSpec{}.seed;
          over_groups([&](const auto &qs, const auto &K,
                          const auto &V) { return MeasureTransformGrid(qs, K, V, go); },
                      [&](size_t layer, size_t head, const TransformPoint &p) {
                        transforms->Add(P, layer, head, p);
                      });
          transforms_s += Since(t0);
          std::fprintf(stderr, "pig-eval: hash transforms at %zu done (%.0f s)\n", P, transforms_s);
        }
        if (probes) {
          t0 = Clock::now();
          ProbeGridOptions go;
          go.configs = error->probes;
          go.seed = AttentionSpec{}.seed;
          go.statics.mean_window = e.mean_window;
          over_groups([&](const auto &qs, const auto &K,
                          const auto &V) { return MeasureProbeGrid(qs, K, V, go); },
                      [&](size_t layer, size_t head, const ProbePoint &p) {
                        probes->Add(P, layer, head, p);
                      });
          probes_s += Since(t0);
          std::fprintf(stderr, "pig-eval: multi-probe at %zu done (%.0f s)\n", P, probes_s);
        }
      }
      if (part2 && std::count(down->ppl_contexts.begin(), down->ppl_contexts.end(), P)) {
        t0 = Clock::now();
        downstream->Perplexity(cap.cache(), P, tokens, logits);
        ppl_s += Since(t0);
      }
    }
  }
  if (formats)
    kv_formats.Finish(e, cfg.head_dim);
  if (errors)
    errors->Finish(part1_s + prefill_s, prefill_s);
  if (transforms)
    transforms->Finish(transforms_s + prefill_s, prefill_s);
  if (probes)
    probes->Finish(probes_s + prefill_s, prefill_s);
  if (downstream) {
    const auto t0 = Clock::now();
    downstream->Tasks();
    downstream->Finish(ppl_s + Since(t0), prefill_s);
  }
  // The tables went to stdout, which is block-buffered in a pipe: flushed first, so that this
  // line on stderr cannot land inside one of their rows (ctest matches the rows).
  std::fflush(stdout);
  std::fprintf(stderr, "pig-eval: done in %.0f s (prefill of the text %.0f s)\n", Since(start),
               prefill_s);
}
} // namespace

void RunAttentionError(const EvalOptions &eval, const AttentionErrorOptions &o) {
  Run(eval, &o, nullptr, nullptr);
}

void RunDownstream(const EvalOptions &eval, const DownstreamOptions &o) {
  Run(eval, nullptr, &o, nullptr);
}

void RunAll(const EvalOptions &eval, const AttentionErrorOptions &error,
            const DownstreamOptions &down) {
  Run(eval, &error, &down, nullptr);
}

void RunKvFormats(const EvalOptions &eval, const KvFormatsOptions &o) {
  Run(eval, nullptr, nullptr, &o);
}

} // namespace pig::eval
