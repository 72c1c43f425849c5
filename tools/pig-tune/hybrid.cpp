// pig-tune hybrid: lsh-hybrid's knobs on the model's real KV caches. pig-eval attention-error's
// protocol (a dense prefill of the text, the queries of one real decode step at each context's
// end, chosen layers), then every configuration of the grid beside TopK at MagicPIG's measured
// cost2 per sample (or a fixed one), with pig::eval::MeasureGroup; the lowest mean error is
// written as a hybrid point (pig/tune/hybrid.h) that --hybrid @FILE reads.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"
#include "pig/app/decorators.h"
#include "pig/app/text.h" // text reading and normalisation
#include "pig/app/tuning.h"
#include "pig/eval/accuracy.h"
#include "pig/reference/reference.h"
#include "pig/runtime/hybrid_rank.h"
#include "pig/runtime/model.h"
#include "pig/tune/hybrid.h"
#include "workflows.h"

namespace pig::tune {

using namespace pig::runtime;
using namespace workflow;

namespace {

// The grid, each list checked on its own so that a bad value names its flag.
std::vector<ref::HybridConfig> Grid(const HybridTuneOptions &o, int columns) {
  auto check = [](const char *flag, auto &&set) {
    ref::HybridConfig c;
    set(c);
    try {
      c.validate();
    } catch (const std::invalid_argument &e) {
      throw UsageError(flag, e.what());
    }
  };
  for (double h : o.heads)
    check("--head", [h](ref::HybridConfig &c) { c.head_share = h; });
  for (double f : o.floors)
    check("--floor", [f](ref::HybridConfig &c) { c.floor = f; });
  for (int b : o.bits) {
    check("--bits", [b](ref::HybridConfig &c) { c.bits = b; });
    if (b > columns)
      throw UsageError("--bits", std::to_string(b) +
                                     " bits, but the index has K L = " + std::to_string(columns));
  }
  for (double e : o.epsilons)
    check("--eps", [e](ref::HybridConfig &c) { c.epsilon = e; });
  // The rankers the runtime serves, so that the point chosen can be decoded with.
  std::vector<ref::HybridRank> ranks;
  for (const std::string &name : o.ranks) {
    const std::optional<ref::HybridRank> r = ref::parse_rank(name);
    if (!r || *r == ref::HybridRank::lowrank)
      throw UsageError("--rank", "expects rankers of hamming, collisions, quant (the runtime's), "
                                 "got '" +
                                     name + "'");
    ranks.push_back(*r);
  }
  return hybrid_grid(o.heads, o.floors, o.bits, o.epsilons, ranks);
}

// The ranker's bytes per token and kv-head, as the runtime reads them.
std::size_t RankerBytes(const ref::HybridConfig &c, int columns, int L, std::size_t d) {
  return lsh::hybrid_ranker_bytes(c.rank, c.bits > 0 ? c.bits : columns, L, d);
}

} // namespace

int RunHybrid(const CommonOptions &common, const HybridTuneOptions &o) {
  const int columns = o.lsh.K * o.lsh.L;
  const std::vector<ref::HybridConfig> grid = Grid(o, columns);
  if (o.contexts.empty())
    throw UsageError("--contexts", "no context");
  std::vector<size_t> contexts = o.contexts;
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
  const ref::StaticConfig statics{};
  const size_t min_ctx = statics.sink + statics.local + 32;
  if (contexts.front() < min_ctx)
    throw UsageError("--contexts", "context " + std::to_string(contexts.front()) +
                                       " is too short to index (at least " +
                                       std::to_string(min_ctx) + ")");

  auto model = LlamaModel::Load(common.model);
  const LlamaConfig &cfg = model->config();
  if (contexts.back() > cfg.context_length)
    throw UsageError("--contexts", "context " + std::to_string(contexts.back()) +
                                       " exceeds the model's trained context " +
                                       std::to_string(cfg.context_length));
  std::vector<size_t> layers = o.layers;
  if (layers.empty()) // pig-eval attention-error's layers, those this model has
    for (size_t l : {2, 5, 8, 12, 16, 20, 24, 28})
      if (l < cfg.n_layers)
        layers.push_back(l);
  for (size_t l : layers)
    if (l >= cfg.n_layers)
      throw UsageError("--layers", "layer " + std::to_string(l) + " outside the model's " +
                                       std::to_string(cfg.n_layers));
  const std::string text = pig::app::NormalizeText(pig::app::ReadTextFile(o.text));
  const std::vector<int32_t> tokens = model->tokenizer().Encode(text);
  if (tokens.size() < contexts.back())
    throw std::runtime_error("--text " + o.text + " has " + std::to_string(tokens.size()) +
                             " tokens; the contexts need " + std::to_string(contexts.back()));

  const size_t d = cfg.head_dim, H = cfg.n_kv_heads;
  const std::string budget_rule =
      o.budget > 0 ? "cost2 " + Fmt("%g", o.budget)
                   : "= magicpig K=" + std::to_string(o.lsh.K) + " L=" + std::to_string(o.lsh.L);
  std::fprintf(stderr,
               "pig-tune hybrid: %zu configurations x %zu layers x %zu query heads x %zu "
               "contexts, at %s\n",
               grid.size(), layers.size(), size_t(cfg.n_heads), contexts.size(),
               budget_rule.c_str());

  ThreadPool pool(common.threads);
  auto owned = std::make_unique<app::CapturingAttention>(
      std::make_unique<DenseAttention>(cfg.Shape(contexts.back()), lsh::DType::bf16), layers);
  app::CapturingAttention &cap = *owned;
  cap.Arm(false);
  LlamaSession session(*model, pool, contexts.back(), std::move(owned));
  std::vector<float> logits(cfg.vocab);
  const ref::OwnedMatrix W =
      ref::simhash_matrix(AttentionSpec{}.seed, d, o.lsh.K, o.lsh.L); // the runtime's W

  pig::eval::ErrorOptions eo;
  eo.magicpig = {{o.lsh.K, o.lsh.L}};
  eo.threshold = o.lsh.t;
  eo.seed = AttentionSpec{}.seed;
  eo.statics = statics;
  eo.hybrid = grid;
  if (o.budget > 0) {
    eo.budgets = {o.budget};
    eo.matched = 0;
  } else {
    eo.budgets = {};
    eo.matched = 1;
  }

  // samples[v]: every error of configuration v; topk the same samples' TopK errors.
  struct Sample {
    size_t context = 0;
    std::vector<double> error, cost; // [configuration]
    double topk = 0, budget = 0;
  };
  std::vector<Sample> samples;
  const auto t_start = Clock::now();
  for (size_t P : contexts) {
    if (session.position() < P - 1)
      session.Forward(tokens.data() + session.position(), P - 1 - session.position(),
                      logits.data());
    cap.Arm(true);
    session.Forward(&tokens[P - 1], 1, logits.data());
    cap.Arm(false);
    const KvCache &cache = cap.cache();
    std::vector<std::vector<Sample>> per_job(layers.size() * H);
    pool.ParallelFor(per_job.size(), [&](size_t job, size_t) {
      const size_t layer = layers[job / H], kvh = job % H;
      ref::OwnedMatrix K(P, d), V(P, d);
      cache.ReadRows(layer, kvh, P, K.data.data(), V.data.data());
      for (const std::vector<pig::eval::ErrorPoint> &pts :
           pig::eval::MeasureGroup(cap.group_queries(layer, kvh), K, V, W, eo)) {
        // MeasureGroup's order: TopK, Quest, Oracle at each budget, MagicPIG, the variants at
        // each budget; then at the matched cost TopK, Quest, Oracle and the variants.
        const size_t topk = o.budget > 0 ? 0 : 1, first = 4;
        if (pts.size() != first + grid.size() || pts[topk].method != "TopK" ||
            pts[first].method != "LSH-hybrid")
          throw std::logic_error("pig-tune hybrid: unexpected MeasureGroup layout");
        Sample s;
        s.context = P;
        s.topk = pts[topk].error;
        s.budget = o.budget > 0 ? o.budget : pts[0].cost; // pts[0]: MagicPIG's sample
        for (size_t v = 0; v < grid.size(); ++v) {
          s.error.push_back(pts[first + v].error);
          s.cost.push_back(pts[first + v].cost);
        }
        per_job[job].push_back(std::move(s));
      }
    });
    for (auto &job : per_job)
      for (Sample &s : job)
        samples.push_back(std::move(s));
    std::fprintf(stderr, "pig-tune hybrid: context %zu measured (%.0f s)\n", P, Since(t_start));
    if (Stopped(common))
      return 130;
  }

  // The mean of f over the samples of context P (every context has layers x heads of them).
  auto context_mean = [&samples](size_t P, auto &&f) {
    double sum = 0;
    size_t n = 0;
    for (const Sample &s : samples)
      if (s.context == P) {
        sum += f(s);
        ++n;
      }
    return sum / double(n);
  };
  std::vector<HybridMeasure> measures(grid.size());
  double topk_error = 0;
  for (const Sample &s : samples)
    topk_error += s.topk / double(samples.size());
  double budget_cost2 = 0; // what every sample asked for: the fixed budget or MagicPIG's cost
  for (const Sample &s : samples)
    budget_cost2 += s.budget / double(samples.size());
  for (size_t v = 0; v < grid.size(); ++v) {
    HybridMeasure &m = measures[v];
    m.config = grid[v];
    m.samples = samples.size();
    m.topk_error = topk_error;
    std::vector<double> errors;
    for (const Sample &s : samples) {
      errors.push_back(s.error[v]);
      m.error += s.error[v] / double(samples.size());
      m.cost2 += s.cost[v] / double(samples.size());
    }
    std::sort(errors.begin(), errors.end());
    m.p90 = errors[std::min(errors.size() - 1, size_t(std::ceil(0.9 * double(errors.size()))) - 1)];
    for (size_t P : contexts)
      m.context_error.push_back(context_mean(P, [v](const Sample &s) { return s.error[v]; }));
  }
  const std::optional<size_t> best = select_hybrid(measures, budget_cost2);
  std::printf("## lsh-hybrid at %s (mean cost2 %.2f %%): %zu samples (%zu layers x %zu query "
              "heads x %zu contexts)\n\n",
              budget_rule.c_str(), 100 * budget_cost2, samples.size(), layers.size(),
              size_t(cfg.n_heads), contexts.size());
  std::printf("| spec | ranker B/token | error | p90 |");
  for (size_t P : contexts)
    std::printf(" %zu |", P);
  std::printf(" vs TopK | cost2 |\n|---|---|---|---|");
  for (size_t i = 0; i < contexts.size(); ++i)
    std::printf("---|");
  std::printf("---|---|\n");
  for (size_t v = 0; v < grid.size(); ++v) {
    const HybridMeasure &m = measures[v];
    const bool chosen = best && *best == v;
    std::printf("| %s%s%s | %zu | %.4f | %.4f |", chosen ? "**" : "", m.config.spec().c_str(),
                chosen ? "**" : "", RankerBytes(m.config, columns, o.lsh.L, d), m.error, m.p90);
    for (double e : m.context_error)
      std::printf(" %.4f |", e);
    const bool over = !keeps_budget(m, budget_cost2);
    std::printf(" %.2fx | %.2f %%%s |\n", m.error / topk_error, 100 * m.cost2,
                over ? " (over the budget)" : "");
  }
  std::printf("| TopK (exact q.k of every key) | %zu | %.4f | |", d * 2, topk_error);
  for (size_t P : contexts)
    std::printf(" %.4f |", context_mean(P, [](const Sample &s) { return s.topk; }));
  std::printf(" 1.00x | |\n\n");
  if (!best)
    throw std::runtime_error("every configuration read more than 1.02 x the budget's cost2 (" +
                             Fmt("%.4f", budget_cost2) + ") or gave no finite error: add --eps 0");
  const HybridMeasure &m = measures[*best];
  HybridPoint p;
  p.spec = m.config.spec();
  p.budget = budget_rule;
  p.cost2 = m.cost2;
  p.error = m.error;
  p.topk_error = topk_error;
  p.samples = samples.size();
  p.contexts = contexts;
  p.model_hash = model_hash_of(common.model);
  p.pig_version = PIG_VERSION;
  p.timestamp = Timestamp();
  save_hybrid_point(o.out, p);
  std::printf("chosen: %s: error %.4f (%.2fx TopK's %.4f) at cost2 %.2f %%\n", p.spec.c_str(),
              m.error, m.error / topk_error, topk_error, 100 * m.cost2);
  std::printf("wrote %s: --attention lsh-hybrid --hybrid @%s --budget %.4f\n", o.out.c_str(),
              o.out.c_str(), m.cost2);
  return 0;
}

} // namespace pig::tune
